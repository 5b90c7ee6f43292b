"""`python -m bench filter-cost`: the first stage's time under each search filter, over a graph of bench scale's facts
written straight into the embedded FalkorDB, or the local Neo4j with GRAPH_BACKEND=neo4j (bench/filter_cost.py)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from bench.filter_cost import measure
from bench.load_run import synthetic_queries
from bench.cli import DEFAULT_OUTPUT_ROOT, bench_group, command_line, run_facts


@bench_group.command("filter-cost")
@click.option("--facts", type=click.IntRange(min=1), default=10_000, show_default=True,
              help="facts the graph holds (those it lacks are written first)")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path),
              default=DEFAULT_OUTPUT_ROOT / "filter-cost" / "data", show_default=True,
              help="where the graph is kept (a later run with more facts adds only the rest)")
@click.option("--queries", type=click.IntRange(min=1), default=20, show_default=True,
              help="how many of bench scale's search queries")
@click.option("--limit", type=click.IntRange(min=1), default=10, show_default=True, help="facts per search")
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path), default=None, help="also write the JSON here")
def filter_cost_command(facts, data_dir, queries, limit, output):
    """p50/p95 of the first stage with each search filter (none, relation types, labels, source, a valid_at
    window, as_of, current_only, both, a centre) over a graph of bench scale's facts given relation names,
    times and labels. Run it with no app using DATA_DIR."""
    data_dir.mkdir(parents=True, exist_ok=True)
    texts = (synthetic_queries() * (queries // len(synthetic_queries()) + 1))[:queries]
    report = {**run_facts(), "command": command_line(), **measure(data_dir, facts, texts, limit, click.echo)}
    if output is not None:
        output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    click.echo(f"| {report['backend']}, {report['facts']} facts | p50 | p95 | fewest facts answered |\n"
               "| --- | ---: | ---: | ---: |")
    for row in report["filters"]:
        click.echo(f"| {row['filter']} | {row['p50_ms']} ms | {row['p95_ms']} ms | {row['fewest_facts_answered']} |")
