"""`python -m bench choose-fusion`: the fusion and cascade depth picked from stored development runs by
the rule in docs/bench/FUSION.md (bench/fusion_choice.py). No model call."""

from __future__ import annotations

from pathlib import Path

import click
from flask.cli import with_appcontext

from bench.cli import bench_group, require_bench_extras


@bench_group.command("choose-fusion")
@click.option("--run", "runs", multiple=True, required=True, metavar="OUTPUT=DATASET",
              help="a `bench graph --output` folder and its dataset folder; repeat for each development set")
@click.option("--baseline-run", "baseline_runs", multiple=True, metavar="OUTPUT",
              help="per --run, in the same order: a run of the same queries judged as today's default judges, "
                   "from which the baseline is replayed (rule step 10: another score mode)")
@click.option("--judge-depth", type=click.IntRange(min=0), default=0, show_default=True,
              help="every setting judges only the cheap order's first N candidates (RERANKER_JUDGE_DEPTH; rule "
                   "step 12: runs that judged a wider pool whole); 0: every candidate")
@click.option("--judge-log-odds", is_flag=True,
              help="read each --run's judge probabilities as log-odds, log(p / (1 - p)) (rule step 13); "
                   "the --baseline-run's stay as stored")
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True, help="settings shown")
@with_appcontext
def choose_fusion_command(runs, baseline_runs, judge_depth, judge_log_odds, top) -> None:
    """Replay a grid of three-signal fusions and cascade depths over stored runs and apply the rule."""
    require_bench_extras("choose-fusion")
    from bench.fusion_choice import BaselineRunError, load_run, report

    if baseline_runs and len(baseline_runs) != len(runs):
        raise click.BadParameter(f"{len(baseline_runs)} given for {len(runs)} --run: one per --run, in order",
                                 param_hint="--baseline-run")
    loaded = []
    for spec, baseline in zip(runs, baseline_runs or [None] * len(runs)):
        output, separator, dataset = spec.partition("=")
        if not separator or not Path(output).is_dir() or not Path(dataset).is_dir():
            raise click.BadParameter(f"{spec!r}: expected OUTPUT_FOLDER=DATASET_FOLDER, both existing",
                                     param_hint="--run")
        if baseline and not Path(baseline).is_dir():
            raise click.BadParameter(f"{baseline!r}: no such folder", param_hint="--baseline-run")
        try:
            loaded.append(load_run(Path(output), Path(dataset), Path(baseline) if baseline else None,
                                   log_odds=judge_log_odds))
        except BaselineRunError as error:
            raise click.BadParameter(str(error), param_hint="--baseline-run") from None
        except ValueError as error:
            raise click.BadParameter(str(error), param_hint="--run") from None
    click.echo(report(loaded, top, judge_depth))
