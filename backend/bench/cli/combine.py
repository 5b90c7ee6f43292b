"""`python -m bench combine`: several benchmark runs in one RESULTS.md and one plot, as docs/bench/ holds them
(bench/report.py)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from bench.report import write_combined
from bench.cli import bench_group, require_bench_extras


@bench_group.command("combine")
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@click.argument("results", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
def combine_command(out_dir, results) -> None:
    """Write OUT_DIR/RESULTS.md (a table per dataset) and OUT_DIR/quality_latency.png from RESULTS
    (results.json files of `bench rerank` and `bench graph`)."""
    require_bench_extras("combine")
    try:
        runs = [json.loads(path.read_text(encoding="utf-8")) for path in results]
    except ValueError as error:
        raise click.ClickException(f"not a results.json: {error}") from None
    write_combined(runs, out_dir)
