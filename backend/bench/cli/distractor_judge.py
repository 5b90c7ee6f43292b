"""`python -m bench distractor-judge`: does the judge score a report set's planted distractors under its gold
facts? (bench/distractor_judge.py)"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import click
from flask import current_app
from flask.cli import with_appcontext

from bench.datasets import DatasetError
from bench.distractor_judge import report, run
from bench.report_sets import load_set, select
from bench.rerankers import with_model_options
from bench.cli import bench_group, require_judge, server_options
from app.config import RERANKER_SCORE_MODES


@bench_group.command("distractor-judge")
@server_options("judge", required=False, default_note="RERANKER_BASE_URL, RERANKER_MODEL")
@click.option("--score-mode", type=click.Choice(RERANKER_SCORE_MODES), default="logprobs", show_default=True)
@click.option("--requirements", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="a sample-graph set file (default: the shipped one)")
@click.option("--only", default=None, help="comma-separated requirement ids")
@with_appcontext
def distractor_judge_command(base_url, model, score_mode, requirements, only) -> None:
    """Every gold fact and distractor of the sample set judged against its requirement: a table per
    requirement, then the pooled figures as JSON."""
    config = with_model_options(current_app.config["APP_CONFIG"], base_url=base_url, model=model)
    config = replace(config, reranker_provider="ollama", reranker_strategy="pointwise", reranker_score_mode=score_mode)
    requirement_set = load_set("sample", requirements)
    try:
        chosen = select(requirement_set.requirements, only.split(",") if only else None)
    except DatasetError as error:
        raise click.BadParameter(str(error), param_hint="--only") from None
    require_judge(config.reranker_base_url)
    click.echo(report(asyncio.run(run(config, chosen))))
