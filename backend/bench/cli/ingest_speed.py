"""`python -m bench ingest-speed`: one text episode's extraction through the app's own API on a given model
server, timed (bench/ingest_speed.py)."""

from __future__ import annotations

import json

import click

from bench.ingest_speed import measure
from bench.cli import bench_group, label_option, require_llm, server_options


@bench_group.command("ingest-speed")
@server_options("model server that extracts (Graphiti's LLM)")
@click.option("--repeats", type=click.IntRange(min=1), default=1, show_default=True, help="episodes, one at a time")
@label_option
def ingest_speed_command(base_url, model, repeats, label) -> None:
    """Seconds per episode ingested, in a fresh data folder on the embedded defaults; JSON on stdout."""
    require_llm(base_url)
    click.echo(json.dumps(measure(base_url, model, repeats, label), indent=2))
