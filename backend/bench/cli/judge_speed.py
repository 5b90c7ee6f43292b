"""`python -m bench judge-speed`: how close a judge server comes to its physical limit on the reranker's own
requests (bench/judge_speed.py)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from bench.judge_speed import JudgeSpeedArgs, measure
from bench.cli import bench_group, label_option, require_judge, server_options
from app.config import DEFAULT_MAX_DOCUMENT_CHARS


@bench_group.command("judge-speed")
@click.option("--dataset", required=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="a TREC candidate folder, e.g. ../../shared/data/trec-dl19-passage-bm25-top100")
@server_options("judge server")
@click.option("--server-log", type=click.Path(dir_okay=False), default=None,
              help="llama-cpp-python's log, for servers whose answers carry no timings")
@click.option("--queries", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--passages", type=click.IntRange(min=1), default=10, show_default=True)
@click.option("--parallel", type=click.IntRange(min=1), default=4, show_default=True,
              help="requests in flight (RERANKER_MAX_PARALLEL)")
@click.option("--max-chars", type=click.IntRange(min=1), default=DEFAULT_MAX_DOCUMENT_CHARS, show_default=True)
@click.option("--throughput", type=click.FloatRange(min=0, min_open=True), default=None,
              help="the model's prompt tokens/s to measure against (e.g. llama-bench's pp128), so that servers "
                   "are compared with one limit; default: measured on this server")
@label_option
def judge_speed_command(dataset, base_url, model, server_log, queries, passages, parallel, max_chars, throughput,
                        label) -> None:
    """Wall time per judged passage against the server's physical limit; JSON on stdout."""
    require_judge(base_url)
    args = JudgeSpeedArgs(dataset=dataset, base_url=base_url, model=model, server_log=server_log, queries=queries,
                          passages=passages, parallel=parallel, max_chars=max_chars, throughput=throughput,
                          label=label)
    click.echo(json.dumps(measure(args), indent=2))
