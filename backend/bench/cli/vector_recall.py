"""`python -m bench vector-recall`: the vector index's recall and search time for several over-asks, on a graph
already stored (bench/vector_recall.py)."""

from __future__ import annotations

import json
import os
from contextlib import nullcontext
from pathlib import Path

import click

from bench.load_run import synthetic_queries
from bench.scale import GRAPH_ID as SCALE_GRAPH_ID
from bench.stand_in_embedder import StandInEmbedder
from bench.vector_recall import recall_by_overfetch
from bench.cli import bench_group, command_line, run_facts


def _factors(text: str) -> list[int | None]:
    try:
        factors = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a comma list of whole numbers", param_hint="--overfetch") from None
    if any(factor < 1 for factor in factors):
        raise click.BadParameter("over-asks are whole numbers >= 1", param_hint="--overfetch")
    return factors or [None]


@bench_group.command("vector-recall")
@click.option("--data-dir", required=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="the DATA_DIR of an app that stored the graph (bench scale keeps one per run)")
@click.option("--graph-id", default=SCALE_GRAPH_ID, show_default=True, help="the graph to measure")
@click.option("--overfetch", default="", help="hits asked per fact wanted, a comma list (default: what search asks)")
@click.option("--queries", type=click.IntRange(min=1), default=40, show_default=True,
              help="how many of bench scale's search queries")
@click.option("--k", type=click.IntRange(min=1), default=20, show_default=True, help="facts wanted per query")
@click.option("--stand-in-embedder", is_flag=True,
              help="embed the queries with bench scale's stand-in, for a graph it filled with --stand-in-embedder")
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path), default=None, help="also write the JSON here")
def vector_recall_command(data_dir, graph_id, overfetch, queries, k, stand_in_embedder, output):
    """recall@k of the vector index against the exact cosine, and its search p50/p95, per over-ask. The app's
    settings (EMBEDDING_PROVIDER above all) must be those the graph was stored with; the app must be stopped."""
    factors = _factors(overfetch)
    texts = (synthetic_queries() * (queries // len(synthetic_queries()) + 1))[:queries]
    with StandInEmbedder() if stand_in_embedder else nullcontext() as stand_in:
        if stand_in is not None:  # this process's settings are read from the environment
            os.environ.update(stand_in.env)
        try:
            rows = recall_by_overfetch(data_dir, graph_id, texts, k, factors)
        except ValueError as error:
            raise click.ClickException(str(error)) from None
    report = {**run_facts(), "command": command_line(), "graph_id": graph_id, "rows": rows}
    if output is not None:
        output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    click.echo(f"| hits asked per fact wanted | recall@{k}, mean (lowest query) | as near as exact | "
               "index search p50 / p95 |\n| ---: | ---: | ---: | ---: |")
    for row in rows:
        click.echo(f"| {row['overfetch']} | {row['mean']:.4f} ({row['min']:.2f}) | {row['as_near_as_exact']:.4f} | "
                   f"{row['index_search_ms_p50']} / {row['index_search_ms_p95']} ms |")
    if rows[0]["index_score_error"] is not None:
        click.echo(f"Largest gap between the index's score of a hit and its exact score: {rows[0]['index_score_error']}")
