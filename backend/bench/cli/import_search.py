"""`python -m bench import-search`: search latency of one graph while a large import into it runs
(bench/import_search.py)."""

from __future__ import annotations

import os
import sys

import click

from bench.import_search import ImportSearchOptions, run as run_import_search
from bench.cli import bench_group


@bench_group.command("import-search")
@click.option("--facts", type=click.IntRange(min=1, max=5000), default=3000, show_default=True,
              help="facts in the large import (new entities each)")
@click.option("--base-facts", type=click.IntRange(min=1), default=300, show_default=True,
              help="facts in the graph before the import")
@click.option("--interval-s", type=click.FloatRange(min=0.05), default=0.5, show_default=True,
              help="a search is sent this often during the import")
@click.option("--search-delay-s", type=click.FloatRange(min=0), default=3.0, show_default=True,
              help="searches start this long after the import was sent")
@click.option("--target-p95-s", type=click.FloatRange(min=0), default=2.0, show_default=True,
              help="exit 1 when the search p95 during the import is above this")
def import_search_command(facts, base_facts, interval_s, search_delay_s, target_p95_s):
    """Search latency of one graph while a large import into it runs (served app, embedded FalkorDB)."""
    options = ImportSearchOptions(facts=facts, base_facts=base_facts, interval_s=interval_s,
                                  search_delay_s=search_delay_s)
    click.echo(f"Serving the API; importing {base_facts} facts, then {facts} more with a search every {interval_s} s...")
    report = run_import_search(options)
    imported, during, corrected = report["import"], report["during_import"], report["during_import_corrected"]
    for label, figures in (("baseline", report["baseline"]), ("during import", during),
                           ("  corrected", corrected)):
        click.echo(f"{label + ':':15}{figures['requests']} searches, p50 {figures['p50_ms']} ms, "
                   f"p95 {figures['p95_ms']} ms, max {figures['max_ms']} ms")
    click.echo(f"errors:        {during['errors']} {during['first_errors'] or ''}")
    click.echo(f"import:        HTTP {imported.get('status')} in {imported.get('seconds')} s: {imported.get('body')}")
    click.echo(f"load average:  {' '.join(f'{value:.1f}' for value in os.getloadavg())} on {os.cpu_count()} cores")
    failed = not during["requests"] or during["errors"] or corrected["p95_ms"] > target_p95_s * 1000 \
        or imported.get("status") != 201
    click.echo(f"corrected search p95 during the import {'above' if failed else 'within'} the {target_p95_s} s target")
    if failed:
        sys.exit(1)

