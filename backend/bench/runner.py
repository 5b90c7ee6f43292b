"""`python -m bench rerank`: rerank each query's first-stage candidates with each strategy and measure.

Queries run one after another (so each query's latency is its own); within a query a strategy may
have up to `concurrency` model requests in flight. Strategies are interleaved per query, so an
interruption leaves every strategy with the same finished queries, and slow periods of a shared
machine hit all strategies alike. Finished queries are stored at once (store.py) and reused by a
rerun with the same arguments.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.datasets import Dataset, Query, load_dataset
from bench.estimate import DEFAULT_CONFIRM_ABOVE, TokenPrices, confirm_estimate, describe_estimate
from bench.progress import ProgressBar
from bench.rerankers import BenchReranker, StrategySpec
from bench.report import write_reports
from bench.store import ResultStore, run_key
from bench.summary import counter_delta, fell_back, summarize
from app.config import Config
from graphiti_llm_rerank import redact_url
from graphiti_llm_rerank.judge_prompt import PROMPT_VERSION
from graphiti_llm_rerank.strategies.strategy_prompts import STRATEGY_PROMPT_VERSION
from graphiti_llm_rerank.strategies.registry import strategy_settings

logger = logging.getLogger(__name__)


@dataclass
class RerankBenchArgs:
    dataset: Path
    output: Path
    strategies: list[StrategySpec]
    config: Config  # RERANKER_* (model, server, knobs) and the mmr embedder
    max_queries: int | None = None
    candidates: int = 20
    seed: int = 0
    shuffle: bool = False
    yes: bool = False
    confirm_above: int = DEFAULT_CONFIRM_ABOVE
    repeat_check: bool = True  # re-rank each pointwise query once more: served from the score cache?
    report_only: bool = False  # no model call: report the queries every strategy has finished
    prices: TokenPrices = field(default_factory=TokenPrices)  # cost per query from the tokens spent
    command: str = ""
    extra: dict = field(default_factory=dict)


class BenchInterrupted(Exception):
    """Ctrl-C during a run: what finished is stored and reported."""

    def __init__(self, results: dict) -> None:
        super().__init__("interrupted")
        self.results = results


def select_queries(dataset: Dataset, max_queries: int | None) -> list[Query]:
    return dataset.queries[:max_queries] if max_queries else list(dataset.queries)


def query_candidates(query: Query, count: int, shuffle: bool, seed: int):
    """The first `count` first-stage candidates, optionally shuffled (reproducibly per query)."""
    candidates = list(query.candidates[:count])
    if shuffle:
        random.Random(f"{seed}:{query.qid}").shuffle(candidates)
    return candidates


def store_key(args: RerankBenchArgs, spec: StrategySpec) -> str:
    model_part = (
        {"model": args.config.reranker_model, "concurrency": args.config.reranker_max_parallel, "prompt": PROMPT_VERSION,
         "instructions": args.config.reranker_instructions, "max_tokens": args.config.reranker_max_tokens}
        if spec.uses_model else {}
    )
    if spec.uses_model and spec.name != "pointwise":  # pointwise keys predate these fields: kept as they were
        model_part.update(strategy_prompt=STRATEGY_PROMPT_VERSION, knobs=strategy_settings(args.config or Config(), spec.name))
    if spec.name == "mmr":  # the embedder decides what is redundant: another embedder is another result
        config = args.config or Config()
        model_part.update(embedder=(config.embedding_provider, config.embedding_model))
    return run_key(dataset=str(args.dataset), label=spec.label, candidates=args.candidates,
                   shuffle=args.shuffle, seed=args.seed if args.shuffle else None, **model_part)


async def measure_query(reranker: BenchReranker, query: Query, candidates, repeat_check: bool) -> dict:
    """Rank one query's candidates; latency, ranking and the judge counters it spent."""
    passages = [candidate.text for candidate in candidates]
    before, wait_before = reranker.counters(), reranker.wait_clock.total_s
    started = time.perf_counter()
    positions = await reranker.order(query.text, passages)
    latency = time.perf_counter() - started
    after = reranker.counters()
    record = {
        "qid": query.qid,
        "ranking": [candidates[position].docid for position in positions],
        "latency_s": round(latency, 4),
        "model_wait_s": round(reranker.wait_clock.total_s - wait_before, 4),
        "estimated_calls": reranker.estimate_calls(passages),
        **counter_delta(before, after),
    }
    # Only a fully scored query can come back from the cache (failures are never cached).
    fully_scored = not (record["fallbacks"] or record["passage_failures"] or record["breaker_skips"])
    if repeat_check and reranker.spec.name == "pointwise" and fully_scored:
        started = time.perf_counter()
        await reranker.order(query.text, passages)
        record["repeat_latency_s"] = round(time.perf_counter() - started, 6)
        record["repeat_calls"] = counter_delta(after, reranker.counters())["calls"]
    return record


def run_rerank_bench(
    args: RerankBenchArgs,
    echo: Callable[[str], None] = print,
    ask: Callable[[str], bool] | None = None,
    stdin_is_tty: bool | None = None,
) -> dict:
    """Estimate, confirm, run what is not stored yet, write the reports; returns results.json's dict."""
    dataset = load_dataset(args.dataset)
    queries = select_queries(dataset, args.max_queries)
    rerankers = {spec.label: BenchReranker(spec, args.config)
                 for spec in args.strategies}
    stores = {spec.label: ResultStore(args.output, spec.label, store_key(args, spec)) for spec in args.strategies}
    work = {query.qid: query_candidates(query, args.candidates, args.shuffle, args.seed) for query in queries}

    estimate = {}
    for label, reranker in rerankers.items():
        pending = [q for q in queries if q.qid not in stores[label].done]
        calls = sum(reranker.estimate_calls([c.text for c in work[q.qid]]) for q in pending)
        estimate[label] = (calls, len(pending), len(queries) - len(pending))
    for line in describe_estimate(estimate):
        echo(line)
    total_calls = sum(calls for calls, _, _ in estimate.values())
    if args.report_only:
        finished = finished_by_all(queries, stores)
        echo(f"Report only: {len(finished)} of {len(queries)} queries are finished for every strategy; no model call.")
        results = build_results(args, dataset, finished, stores, estimate)
        write_reports(results, args.output)
        return results
    confirm_estimate(total_calls, threshold=args.confirm_above, yes=args.yes, ask=ask, stdin_is_tty=stdin_is_tty)

    interrupted = False
    progress = ProgressBar(total_calls + sum(n for _, n, _ in estimate.values()),
                           sum(n for _, n, _ in estimate.values()))
    with asyncio.Runner() as loop:
        try:
            for query in queries:
                for label, reranker in rerankers.items():
                    if query.qid in stores[label].done:
                        continue
                    record = loop.run(measure_query(reranker, query, work[query.qid], args.repeat_check))
                    stores[label].add(record, persist=not fell_back(record))
                    step = f"{label} query {query.qid} {record['latency_s']:.1f}s"
                    progress.advance(record["estimated_calls"] + 1, step)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            progress.close()
            for reranker in rerankers.values():
                try:
                    loop.run(reranker.aclose())
                except (Exception, KeyboardInterrupt):
                    pass

    results = build_results(args, dataset, queries, stores, estimate)
    write_reports(results, args.output)
    if interrupted:
        raise BenchInterrupted(results)
    return results


def finished_by_all(queries, stores) -> list:
    """The queries every strategy has a stored result for: a like-for-like comparison."""
    return [query for query in queries if all(query.qid in store.done for store in stores.values())]


def build_results(args: RerankBenchArgs, dataset: Dataset, queries, stores, estimate) -> dict:
    wanted = [query.qid for query in queries]
    strategies, per_query = {}, {}
    for label, store in stores.items():
        records = [store.done[qid] for qid in wanted if qid in store.done]
        strategies[label], per_query[label] = summarize(records, dataset.qrels, dataset.relevance_level, args.prices)
        strategies[label]["estimated_calls_run"] = estimate[label][0]
    return {
        "benchmark": "rerank",
        "dataset": dataset.name,
        "relevance_level": dataset.relevance_level,
        "queries_selected": len(queries),
        "candidates": args.candidates,
        "shuffle": args.shuffle,
        "seed": args.seed,
        "model": args.config.reranker_model,
        "base_url": redact_url(args.config.reranker_base_url),
        "concurrency": args.config.reranker_max_parallel,
        "prompt_version": PROMPT_VERSION,
        "token_prices_per_mtok": {"prompt": args.prices.prompt_per_mtok, "completion": args.prices.completion_per_mtok},
        "command": args.command,
        "strategies": strategies,
        "per_query": per_query,
        **args.extra,
    }
