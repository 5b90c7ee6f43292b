"""`python -m bench prompt-layout`: the prompt tokens a llama.cpp server evaluates per passage, query first
against passage first (bench/prompt_layout.py)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from bench.prompt_layout import PromptLayoutArgs, measure
from bench.cli import bench_group, require_judge, server_options


@bench_group.command("prompt-layout")
@click.option("--dataset", required=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="a TREC candidate folder")
@server_options("judge server")
@click.option("--queries", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--passages", type=click.IntRange(min=1), default=5, show_default=True,
              help="judged passages per query and layout, after one warm-up")
def prompt_layout_command(dataset, base_url, model, queries, passages) -> None:
    """Tokens evaluated per passage in the production layout and passage first; JSON on stdout."""
    require_judge(base_url)
    click.echo(json.dumps(measure(PromptLayoutArgs(dataset=dataset, base_url=base_url, model=model, queries=queries,
                                                   passages=passages)), indent=2))
