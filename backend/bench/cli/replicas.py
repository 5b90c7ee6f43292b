"""`python -m bench replicas`: two API replicas and two workers on the local Neo4j and one broker, under
search, report and import load, with one replica and one worker killed -9 mid-run
(bench/replicas.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from bench.replicas import ReplicaOptions, StackError, markdown_table, run as run_replicas
from bench.cli import DEFAULT_OUTPUT_ROOT, bench_group, command_line, run_facts
from app.config import Config
from app.graph.local_neo4j import LocalNeo4jError, install as install_neo4j


def _range_ms(text: str) -> tuple[float, float]:
    try:
        low, high = (float(part) for part in text.split("-"))
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a range of milliseconds such as 50-150",
                                 param_hint="--writer-ms") from None
    if not 0 <= low <= high:
        raise click.BadParameter("give LOW-HIGH with 0 <= LOW <= HIGH", param_hint="--writer-ms")
    return low, high


@bench_group.command("replicas")
@click.option("--clients", type=click.IntRange(min=1), default=8, show_default=True,
              help="keep-alive search clients, spread over the replicas")
@click.option("--duration", type=click.FloatRange(min=5), default=60.0, show_default=True,
              help="seconds of load")
@click.option("--reports", type=click.IntRange(min=0), default=2, show_default=True,
              help="reports in flight at once (each started on one replica, polled on the other)")
@click.option("--facts", type=click.IntRange(min=10), default=200, show_default=True,
              help="synthetic facts in the graph before the load")
@click.option("--trickle-facts", type=click.IntRange(min=1, max=500), default=5, show_default=True,
              help="facts per acknowledged import batch during the load")
@click.option("--trickle-every", type=click.FloatRange(min=0.05), default=1.0, show_default=True,
              help="seconds between two import batches")
@click.option("--kill/--no-kill", default=True, show_default=True,
              help="kill -9 one API replica and one worker (one with a task in hand) mid-run")
@click.option("--kill-at", type=click.FloatRange(min=0.1, max=0.9), default=0.5, show_default=True,
              help="when to kill, as a share of --duration")
@click.option("--writer-ms", default="50-150", show_default=True,
              help="the stand-in report model's delay per answer, ms")
@click.option("--output", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="results and the processes' logs (default: bench-out/replicas)")
@click.option("--json-out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="also write the figures as JSON here")
def replicas_command(clients, duration, reports, facts, trickle_facts, trickle_every, kill, kill_at, writer_ms,
                     output, json_out) -> None:
    """Two API replicas and two workers (local Neo4j, one broker) under search, report and import load,
    one of each killed -9 mid-run: throughput, latency, errors on live replicas, what was lost at the kill,
    reports and tasks answered across replicas, acknowledged facts kept. Exits 1 when a must fails."""
    options = ReplicaOptions(clients=clients, duration_s=duration, reports=reports, facts=facts,
                             trickle_facts=trickle_facts, trickle_every_s=trickle_every, kill=kill, kill_at=kill_at,
                             writer_ms=_range_ms(writer_ms))
    try:
        install_neo4j(Config.from_env().neo4j_cache_dir)  # once; a clear line when Java or Maven is missing
    except LocalNeo4jError as error:
        raise click.ClickException(f"the local Neo4j cannot be installed: {error}") from None
    folder = (output or DEFAULT_OUTPUT_ROOT / "replicas").resolve()
    facts_of_run = {**run_facts(), "command": command_line(),
                    "load_average_at_start": [round(value, 1) for value in os.getloadavg()]}
    try:
        figures = run_replicas(options, log_dir=folder / "logs", echo=click.echo)
    except StackError as error:
        raise click.ClickException(str(error)) from None
    result = {**figures, **facts_of_run, "load_average_at_end": [round(value, 1) for value in os.getloadavg()]}
    table = markdown_table(result)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    (folder / "results.md").write_text(
        f"{facts_of_run['command']}\n\n{facts_of_run['date']}, {facts_of_run['machine']}, load average "
        f"{result['load_average_at_start']} -> {result['load_average_at_end']}\n\n{table}\n", encoding="utf-8")
    if json_out is not None:
        json_out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    click.echo(table)
    click.echo(f"Wrote {folder}/results.json and results.md (logs: {folder}/logs)")
    failed = [f"{check['must']}: {check['value']}" for check in result["musts"] if not check["ok"]]
    if failed:
        if result["first_errors_on_live_replicas"]:
            click.echo("First errors on live replicas: " + " | ".join(result["first_errors_on_live_replicas"][:5]),
                       err=True)
        raise click.ClickException("must failed: " + "; ".join(failed))
