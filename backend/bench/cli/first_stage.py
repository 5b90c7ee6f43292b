"""`python -m bench first-stage`: the first stage's quality and speed from the exact cosine and from the vector
index, over `bench graph`'s stored graph (bench/first_stage.py)."""

from __future__ import annotations

import json
from pathlib import Path

import click
from flask import current_app
from flask.cli import with_appcontext

from bench.cli import bench_group, command_line, require_bench_extras, require_embedder, run_facts
from bench.cli.graph import parse_query_range, stored_graph_output


@bench_group.command("first-stage")
@click.option("--dataset", required=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="the folder `bench graph` reads (DL19's TREC candidates, or SciFact)")
@click.option("--queries", "query_range", default=None, metavar="FIRST-LAST",
              help="queries by position in the dataset, 1-based and inclusive (e.g. 1-20)")
@click.option("--limit", type=click.IntRange(min=1), default=10, show_default=True, help="facts per search")
@click.option("--corpus", type=click.Choice(["candidates", "all"]), default="candidates", show_default=True,
              help="abstracts to import (SciFact), as `bench graph --corpus`")
@click.option("--output", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="bench graph's output folder, whose stored graph is searched [default: bench-out/<dataset>-graph]")
@with_appcontext
def first_stage_command(dataset, query_range, limit, corpus, output) -> None:
    """The first stage alone (reranker off), from the exact cosine and from the vector index, on the same
    queries: nDCG@10, MRR@10 and first-stage p50/p95. The index phase searches a copy of the stored graph."""
    require_bench_extras("first-stage")
    from bench.first_stage import FirstStageArgs, markdown_table, run_first_stage_bench

    config = current_app.config["APP_CONFIG"]
    query_range = parse_query_range(query_range)
    require_embedder(config)
    output = (output or stored_graph_output(dataset)).resolve()
    args = FirstStageArgs(dataset=dataset.resolve(), output=output, config=config, query_range=query_range,
                          max_queries=None if query_range else 50, limit=limit, corpus=corpus,
                          command=command_line(), extra=run_facts())
    results = run_first_stage_bench(args, echo=click.echo)
    (output / "first-stage.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    click.echo(markdown_table(results))
    click.echo(f"Wrote {output}/first-stage.json")
