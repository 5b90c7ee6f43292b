"""`python -m bench temporal`: the fact valid at the asked time first? The temporal set through the product's import
and search, the judge reading each fact's validity or not (bench/temporal.py)."""

from __future__ import annotations

from pathlib import Path

import click
from flask import current_app
from flask.cli import with_appcontext

from bench.rerankers import with_model_options
from bench.cli import DEFAULT_OUTPUT_ROOT, bench_group, command_line, require_judge, run_facts
from app.config import RERANKER_PASSAGE_TIMES


def _choices(allowed: tuple[str, ...], option: str):
    def parse(_ctx, _param, text: str) -> tuple[str, ...]:
        values = tuple(part.strip() for part in text.split(",") if part.strip())
        wrong = [value for value in values if value not in allowed]
        if wrong or not values:
            raise click.BadParameter(f"{text!r}: a comma list of {', '.join(allowed)}", param_hint=option)
        return values
    return parse


@bench_group.command("temporal")
@click.option("--half", type=click.Choice(["tuning", "reported", "all"]), default="reported", show_default=True,
              help="questions at even places of the set (tuning: choose settings here), odd ones (reported), or all")
@click.option("--backends", default="falkordb,neo4j", show_default=True,
              callback=_choices(("falkordb", "neo4j"), "--backends"),
              help="databases, each the app's own under the output folder")
@click.option("--passage-times", default="off,status", show_default=True,
              callback=_choices(RERANKER_PASSAGE_TIMES, "--passage-times"),
              help=f"RERANKER_PASSAGE_TIME modes searched ({', '.join(RERANKER_PASSAGE_TIMES)}); "
                   "the first stage and the cosine rows come from the first")
@click.option("--limit", type=click.IntRange(min=1), default=10, show_default=True, help="facts per search")
@click.option("--per-kind", type=click.IntRange(min=1), default=None,
              help="the half's first N questions of each kind (now, as_of, before, after)")
@click.option("--data", "data_dir", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="folder with temporal_facts.jsonl and temporal_questions.jsonl (default: the shipped set)")
@click.option("--base-url", default=None, help="judge server (default: RERANKER_BASE_URL)")
@click.option("--model", default=None, help="judge model (default: RERANKER_MODEL)")
@click.option("--output", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="results folder (default: bench-out/temporal)")
@with_appcontext
def temporal_command(half, backends, passage_times, limit, per_kind, data_dir, base_url, model, output) -> None:
    """Import the temporal set (no LLM) and search each question with the judge reading each fact's validity
    or not: accuracy@1 and nDCG@10 of the first stage, the cosine and the judge, filters off and on."""
    from bench.temporal import DATA_DIR, TemporalArgs, markdown, run_temporal

    config = with_model_options(current_app.config["APP_CONFIG"], base_url=base_url, model=model)
    require_judge(config.reranker_base_url)
    args = TemporalArgs(config=config, output=(output or DEFAULT_OUTPUT_ROOT / "temporal").resolve(),
                        data_dir=data_dir or DATA_DIR, backends=backends, passage_times=passage_times, half=half,
                        per_kind=per_kind, limit=limit, command=command_line(), extra=run_facts())
    results = run_temporal(args, echo=click.echo)
    click.echo(markdown(results))
    click.echo(f"Wrote {args.output}/results.json, results.md")
