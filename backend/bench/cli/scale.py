"""`python -m bench scale`: one graph grown through the sizes, import throughput, search latency and memory at each
(bench/scale.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from bench.scale import DEFAULT_SIZES, ScaleOptions, markdown_table as scale_table, run as run_scale
from bench.cli import DEFAULT_OUTPUT_ROOT, bench_group, command_line, require_judge, run_facts


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a comma list of fact counts", param_hint="--sizes") from None
    if not sizes or sizes[0] < 1 or any(later <= earlier for earlier, later in zip(sizes, sizes[1:])):
        raise click.BadParameter("sizes are fact counts >= 1, each larger than the one before", param_hint="--sizes")
    return sizes


@bench_group.command("scale")
@click.option("--sizes", default=",".join(map(str, DEFAULT_SIZES)), show_default=True,
              help="facts in the one graph at each step (comma list, growing)")
@click.option("--batch-size", type=click.IntRange(min=1, max=5000), default=2000, show_default=True,
              help="facts per import request of the bulk import")
@click.option("--sensors", type=click.IntRange(min=0), default=1000, show_default=True,
              help="sensors the facts cycle through (0: a new sensor entity per fact)")
@click.option("--searches", type=click.IntRange(min=1), default=20, show_default=True,
              help="first-stage searches (reranker off) at each size")
@click.option("--reranked-searches", type=click.IntRange(min=0), default=3, show_default=True,
              help="reranked searches at each size (with --base-url and --model)")
@click.option("--limit", type=click.IntRange(min=1), default=10, show_default=True, help="facts per search")
@click.option("--base-url", default=None, help="judge server for the reranked searches (none: they are skipped)")
@click.option("--model", default=None, help="judge model for the reranked searches")
@click.option("--vector-index", is_flag=True,
              help="serve with GRAPH_VECTOR_INDEX=on, and at each size also search without it and measure the "
                   "index's recall@20 against the exact cosine")
@click.option("--stand-in-embedder", is_flag=True,
              help="embed with a stand-in that answers at once (a sum of one random vector per word): measures "
                   "the import and the searches without the embedding model; recall is then that of word overlap")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="keep the grown graph in this new or empty folder (for `bench vector-recall`); default: a "
                   "temporary one, removed at the end")
@click.option("--output", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="results folder (default: bench-out/scale)")
def scale_command(sizes, batch_size, sensors, searches, reranked_searches, limit, base_url, model, vector_index,
                  stand_in_embedder, data_dir, output):
    """Grow one graph through the sizes (served app, its own database per GRAPH_BACKEND, local embedder): import
    throughput, first-stage and reranked search p50/p95, app and database memory at each size."""
    if bool(base_url) != bool(model):
        raise click.BadParameter("give both --base-url and --model, or neither", param_hint="--base-url/--model")
    if data_dir is not None and data_dir.exists() and any(data_dir.iterdir()):
        raise click.BadParameter(f"{data_dir} is not empty: the graph is grown from nothing", param_hint="--data-dir")
    options = ScaleOptions(sizes=_sizes(sizes), batch_size=batch_size, sensors=sensors or None,
                           searches=searches, reranked_searches=reranked_searches, limit=limit, judge_base_url=base_url,
                           judge_model=model, vector_index=vector_index, stand_in_embedder=stand_in_embedder,
                           data_dir=data_dir.resolve() if data_dir is not None else None)
    if options.has_judge:
        require_judge(base_url)
    else:
        click.echo("No judge given (--base-url and --model): reranked searches are skipped.")
    folder = (output or DEFAULT_OUTPUT_ROOT / "scale").resolve()
    facts = {**run_facts(), "command": command_line(),
             "load_average_at_start": [round(value, 1) for value in os.getloadavg()]}
    report = {**run_scale(options, log_dir=folder / "logs", echo=click.echo), **facts,
              "load_average_at_end": [round(value, 1) for value in os.getloadavg()]}
    table = scale_table(report)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    (folder / "results.md").write_text(
        f"{facts['command']}\n\n{facts['date']}, {facts['machine']}, load average "
        f"{report['load_average_at_start']} -> {report['load_average_at_end']}\n\n{table}\n", encoding="utf-8")
    click.echo(table)
    click.echo(f"Wrote {folder}/results.json and results.md")
