"""`python -m bench first-stage-time`: the first stage's time and its two halves over a graph of up to millions of
facts written straight into the embedded FalkorDB, or the local Neo4j with GRAPH_BACKEND=neo4j
(bench/first_stage_time.py)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from bench.first_stage_time import GRAPH_ID, SERIES, measure
from bench.load_run import synthetic_queries
from bench.cli import DEFAULT_OUTPUT_ROOT, bench_group, command_line, run_facts

LABELS = dict(zip(SERIES, ("first stage (search, reranker off)", "keyword half, the kept hits checked",
                           "keyword half, every hit checked", "similarity half (vector index)")))
NEO4J_KEYWORD_LABEL = "keyword half (Graphiti's own query)"


@bench_group.command("first-stage-time")
@click.option("--facts", type=click.IntRange(min=1), default=100_000, show_default=True,
              help="facts the graph holds (those it lacks are written first)")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path),
              default=DEFAULT_OUTPUT_ROOT / "first-stage-time" / "data", show_default=True,
              help="where the graph is kept (a later run with more facts adds only the rest)")
@click.option("--queries", type=click.IntRange(min=1), default=40, show_default=True,
              help="how many of bench scale's search queries")
@click.option("--limit", type=click.IntRange(min=1), default=10, show_default=True, help="facts per search")
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path), default=None, help="also write the JSON here")
def first_stage_time_command(facts, data_dir, queries, limit, output):
    """p50/p95 of the first stage, of its keyword half (the kept hits checked, and on FalkorDB every hit
    checked) and of its similarity half over a graph of bench scale's facts with stand-in vectors, written
    straight into the database, not imported (GRAPH_BACKEND=neo4j: the local Neo4j). Run it with no app
    using DATA_DIR."""
    data_dir.mkdir(parents=True, exist_ok=True)
    texts = (synthetic_queries() * (queries // len(synthetic_queries()) + 1))[:queries]
    report = {**run_facts(), "command": command_line(), **measure(data_dir, GRAPH_ID, facts, texts, limit, click.echo)}
    if output is not None:
        output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    agree = report["keyword_halves_agree"]
    click.echo(f"{report['facts']} facts, {report['queries']} queries of {limit} facts; the database started in "
               f"{report['database_start_s']} s, the vector index was ready {report['index_build_s']} s later; "
               f"the keyword half found at least {report['fewest_keyword_hits']} hits per query"
               + (f", and both keyword halves gave the same facts in the same order on {agree}" if agree is not None
                  else "") +
               f"; the database holds {report['database_rss_mib']} MiB resident "
               f"({report['database_peak_rss_mib']} MiB at most)")
    click.echo(f"| {report['backend']} | p50 | p95 |\n| --- | ---: | ---: |")
    for name, figures in report["ms"].items():
        label = NEO4J_KEYWORD_LABEL if report["backend"] != "falkordb" and name == SERIES[1] else LABELS[name]
        click.echo(f"| {label} | {figures['p50_ms']} ms | {figures['p95_ms']} ms |")
