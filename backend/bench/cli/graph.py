"""`python -m bench graph`: the product's own path, facts imported without an LLM and searched with the reranker
off and on (bench/graph_bench.py)."""

from __future__ import annotations

from pathlib import Path

import click
from flask import current_app
from flask.cli import with_appcontext

from bench.cli import (
    DEFAULT_OUTPUT_ROOT, ask, bench_group, command_line, judge_and_strategies, model_options, print_summary,
    require_bench_extras, require_embedder, require_judge, resumable, run_facts,
)


@bench_group.command("graph")
@click.option("--dataset", required=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="BEIR-style folder with corpus.jsonl, queries.tsv, qrels.txt, candidates*.jsonl (SciFact), "
                   "or a TREC candidate folder without corpus.jsonl (DL19: one fact per candidate passage)")
@click.option("--strategy", default="pointwise", show_default=True,
              help="the reranker when on: strategy[:score_mode], e.g. pointwise:logprobs")
@click.option("--limit", type=click.IntRange(min=1), default=10, show_default=True, help="facts per search")
@click.option("--candidates-factor", type=click.IntRange(min=1), default=None,
              help="first-stage facts per result when reranking (default: RERANKER_CANDIDATES)")
@click.option("--corpus", type=click.Choice(["candidates", "all"]), default="candidates", show_default=True,
              help="abstracts to import: the claims' first-stage candidates, or the whole corpus")
@click.option("--queries", "query_range", default=None, metavar="FIRST-LAST",
              help="queries by position in the dataset, 1-based and inclusive (e.g. 21-43: DL19 development)")
@click.option("--replay", "replays", default="none,rrf,linear", show_default=True,
              help="fusions replayed from the stored judge scores, no model call: "
                   "METHOD[:WEIGHT[+COSINE_WEIGHT]][#[cut]DEPTH][@BUDGET_S],... (weight default "
                   "RERANKER_FUSION_WEIGHT; #10: the judge reads the cheap order's first 10, #cut10 the 10 around "
                   "the cut; @30: only the scores that had arrived after 30 s)")
@click.option("--budgets", default="", help="RERANKER_BUDGET_S values (seconds, comma list) replayed with the "
                                            "configured fusion from when each judge score arrived")
@model_options
@with_appcontext
def graph_command(dataset, strategy, limit, candidates_factor, corpus, query_range, replays, budgets, base_url, model,
                  score_mode, concurrency, timeout_s, deadline_s, max_queries, output, yes, report_only,
                  confirm_above) -> None:
    """Import SciFact abstracts or TREC passages as facts (no LLM) and search each query with the reranker off
    and on; fusions, budgets and the embedder's cosine are replayed from the stored scores."""
    require_bench_extras("graph")
    from bench.graph_bench import GraphBenchArgs, run_graph_bench
    from bench.replay import parse_replays
    from bench.runner import BenchInterrupted

    config = current_app.config["APP_CONFIG"]
    model_config, specs = judge_and_strategies(config, strategy, score_mode, "--strategy", base_url=base_url,
                                               model=model, concurrency=concurrency, timeout_s=timeout_s,
                                               deadline_s=deadline_s)
    if len(specs) != 1 or not specs[0].uses_model:
        raise click.BadParameter("give exactly one model strategy", param_hint="--strategy")
    try:
        replay_list = parse_replays(replays, config.reranker_fusion_weight)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--replay") from None
    args = GraphBenchArgs(
        dataset=dataset.resolve(), output=output or stored_graph_output(dataset),
        strategy=specs[0], config=model_config, max_queries=max_queries or (None if query_range else 50), limit=limit,
        candidates_factor=candidates_factor, corpus=corpus, query_range=parse_query_range(query_range),
        replays=replay_list, budgets=_seconds_list(budgets), report_only=report_only, yes=yes,
        confirm_above=confirm_above, command=command_line(), extra=run_facts(),
    )
    if not report_only:
        require_embedder(model_config)
        require_judge(model_config.reranker_base_url)
    with resumable(args.output, "claims", (BenchInterrupted,)):
        results = run_graph_bench(args, echo=click.echo, ask=ask)
    print_summary(results, args.output)


def stored_graph_output(dataset: Path) -> Path:
    """Where `bench graph` keeps a dataset's results and stored graph unless --output says otherwise."""
    return DEFAULT_OUTPUT_ROOT / f"{dataset.resolve().name}-graph"


def parse_query_range(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    first, sep, last = text.partition("-")
    try:
        bounds = (int(first), int(last if sep else first))
    except ValueError:
        raise click.BadParameter(f"{text!r} is not FIRST-LAST, e.g. 21-43", param_hint="--queries") from None
    if not 1 <= bounds[0] <= bounds[1]:
        raise click.BadParameter(f"{text!r}: positions start at 1 and FIRST <= LAST", param_hint="--queries")
    return bounds


def _seconds_list(text: str) -> list[float]:
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a comma list of seconds", param_hint="--budgets") from None
    if any(value <= 0 for value in values):
        raise click.BadParameter("budgets are seconds > 0", param_hint="--budgets")
    return values
