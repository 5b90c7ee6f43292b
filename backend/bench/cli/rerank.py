"""`python -m bench rerank`: first-stage candidates of a TREC-style folder reranked with each strategy (bench/runner.py)."""

from __future__ import annotations

from pathlib import Path

import click
from flask import current_app
from flask.cli import with_appcontext

from bench.estimate import TokenPrices
from bench.cli import (
    DEFAULT_OUTPUT_ROOT, ask, bench_group, command_line, judge_and_strategies, model_options, print_summary,
    require_bench_extras, require_judge, resumable, run_facts,
)


@bench_group.command("rerank")
@click.option("--dataset", required=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="folder with queries.tsv, qrels.txt, candidates*.jsonl")
@click.option("--candidates", type=click.IntRange(min=1), default=20, show_default=True,
              help="first-stage candidates reranked per query")
@click.option("--strategies", default="original,pointwise", show_default=True,
              help="comma list of original and strategy[:score_mode], e.g. original,pointwise:logprobs,pointwise:json")
@click.option("--seed", type=int, default=0, show_default=True, help="seed for --shuffle")
@click.option("--shuffle", is_flag=True, help="shuffle each query's candidates first (order sensitivity)")
@click.option("--no-repeat-check", is_flag=True, help="skip re-ranking each pointwise query from the cache")
@click.option("--price-prompt", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="price per million prompt tokens, for cost/q (0: a local model)")
@click.option("--price-completion", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="price per million completion tokens, for cost/q (0: a local model)")
@model_options
@with_appcontext
def rerank_command(dataset, candidates, strategies, seed, shuffle, no_repeat_check, price_prompt, price_completion,
                   base_url, model, score_mode, concurrency, timeout_s, deadline_s, max_queries, output, yes,
                   report_only, confirm_above) -> None:
    """Rerank first-stage candidates with each strategy; nDCG@10, MRR@10, MAP, R@10, latency, cost."""
    require_bench_extras("rerank")
    from bench.runner import BenchInterrupted, RerankBenchArgs, run_rerank_bench

    config = current_app.config["APP_CONFIG"]
    model_config, specs = judge_and_strategies(config, strategies, score_mode, "--strategies",
                                               base_url=base_url, model=model, concurrency=concurrency,
                                               timeout_s=timeout_s, deadline_s=deadline_s)
    if not report_only and any(spec.uses_model for spec in specs):
        require_judge(model_config.reranker_base_url)
    args = RerankBenchArgs(
        dataset=dataset.resolve(), output=(output or DEFAULT_OUTPUT_ROOT / f"{dataset.resolve().name}-rerank"),
        strategies=specs,
        max_queries=max_queries, candidates=candidates, seed=seed, shuffle=shuffle, yes=yes,
        confirm_above=confirm_above, repeat_check=not no_repeat_check, config=model_config, report_only=report_only,
        prices=TokenPrices(price_prompt, price_completion), command=command_line(), extra=run_facts(),
    )
    with resumable(args.output, "queries", (BenchInterrupted,)):
        results = run_rerank_bench(args, echo=click.echo, ask=ask)
    print_summary(results, args.output)
