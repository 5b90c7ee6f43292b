"""`python -m bench injection`: how often an injected passage of the crafted set lands in the judge's top 3, per
prompt layout (bench/injection.py, the set in bench/injection_set.py)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import click

from bench.injection import LAYOUTS, run_measurement, summary_line
from bench.injection_set import CASES, INJECTIONS
from bench.cli import bench_group, require_judge, server_options


@bench_group.command("injection")
@server_options("judge server")
@click.option("--layout", type=click.Choice((*LAYOUTS, "all")), default="all", show_default=True)
@click.option("--json-out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="also write the full result (every trial) to this file")
def injection_command(base_url, model, layout, json_out) -> None:
    """Top-3 hits of injected passages in the naive, delimited and defended layouts; one line per layout."""
    require_judge(base_url)
    layouts = LAYOUTS if layout == "all" else (layout,)
    results = asyncio.run(run_measurement(base_url, model, CASES, INJECTIONS, layouts))
    for name in layouts:
        click.echo(summary_line(name, results[name]))
    if json_out:
        json_out.write_text(json.dumps(results, indent=2, ensure_ascii=False), encoding="utf-8")
