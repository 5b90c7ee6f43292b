"""`python -m bench question-pool`: where a report set's gold facts sit in a section question's deep pool,
by the first stage and by the cheap order the cascade reads; no model call (bench/question_pool.py)."""

from __future__ import annotations

from pathlib import Path

import click
from flask import current_app
from flask.cli import with_appcontext

from bench.datasets import DatasetError
from bench.report_sets import load_set, select
from bench.cli import bench_group, require_bench_extras, require_embedder
from app.config import MAX_JUDGED_CANDIDATES


@bench_group.command("question-pool")
@click.option("--requirements", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="a sample-graph set file (default: the shipped one)")
@click.option("--only", default=None, help="comma-separated requirement ids")
@click.option("--pool", type=click.IntRange(1, MAX_JUDGED_CANDIDATES), default=None,
              help="first-stage candidates per question [default: REPORT_QUESTION_CANDIDATES]")
@with_appcontext
def question_pool_command(requirements, only, pool) -> None:
    """Per requirement, its gold facts within each depth of the pool (first stage / cheap order), then
    the pooled shares as JSON."""
    require_bench_extras("question-pool")
    from bench.question_pool import report, run

    config = current_app.config["APP_CONFIG"]
    pool = pool or config.report_question_candidates
    if not pool:
        raise click.BadParameter("REPORT_QUESTION_CANDIDATES is 0 (no deep pool): give the pool's size",
                                 param_hint="--pool")
    requirement_set = load_set("sample", requirements)
    try:
        chosen = select(requirement_set.requirements, only.split(",") if only else None)
    except DatasetError as error:
        raise click.BadParameter(str(error), param_hint="--only") from None
    require_embedder(config)
    click.echo(report(run(config, requirement_set, chosen, pool, echo=click.echo), pool))
