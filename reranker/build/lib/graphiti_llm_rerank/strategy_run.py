"""`rerank()`: a strategy run on documents with ids, for /api/rerank and the benchmarks.

It validates the request (query, top_k, documents), resolves a strategy name through the registry,
wraps the shared judge in this call's own `JudgeCall` and runs the strategy with
`strategies.base.run_checked`, which graph search's `OllamaReranker` uses too (per-call counts,
typed errors, the strict/lenient unit policy, the context guard, the check of the strategy's answer).

    outcome = await rerank("where is the tower?", ["Paris ...", "Berlin ..."], provider=judge,
                           strategy="listwise", top_k=5)
    outcome.results  # RerankResult, best first;  outcome.dropped (mmr);  outcome.calls

`strict=True` (the default, used by /api/rerank) fails fast: the first unusable answer raises
`RerankParseError`, a failed request `RerankProviderError`, an oversized prompt `DocumentTooLongError`,
and anything else a strategy raises is wrapped in `RerankStrategyError`, as is a strategy that is not
one or answers with something other than consistent results. Custom strategies may be sync or async,
keyword-only or positional, with or without `estimate_calls` (then `estimated_calls` is None). With
`strict=False` a failed window/group/pair keeps its incoming order and is counted; only a failure of
the whole call raises. Input guards apply in both modes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from graphiti_llm_rerank.strategies.base import JudgeCall, estimated_calls, raise_typed, run_checked, strategy_name
from graphiti_llm_rerank.strategies.registry import get_strategy
from graphiti_llm_rerank.types import (
    Document, InvalidRerankInputError, RerankResult, RerankStrategyError, as_documents, check_documents,
)


@dataclass
class RerankOutcome:
    results: list[RerankResult]
    dropped: list[RerankResult]
    strategy: str
    model: str
    calls: int
    estimated_calls: int | None  # None: the strategy gives no estimate
    stats: dict[str, Any] = field(default_factory=dict)  # the JudgeCall's counters and elapsed_ms
    diversity_note: str | None = None  # what a diversity strategy (mmr) dropped and why


def resolve_strategy(strategy: Any, knobs: dict[str, Any]) -> Any:
    if isinstance(strategy, str):
        return get_strategy(strategy, **knobs)
    if knobs:
        raise ValueError("options can only be given with a strategy name, not with a strategy instance")
    if not callable(getattr(strategy, "rerank", None)):
        raise RerankStrategyError(f"{strategy!r} is not a rerank strategy (it needs a rerank() method)")
    return strategy


def check_request(query: Any, top_k: Any) -> None:
    if not isinstance(query, str) or not query.strip():
        raise InvalidRerankInputError("the query must be a non-empty string", item="query")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise InvalidRerankInputError(f"top_k must be a positive integer, got {top_k!r}", item="top_k")


async def rerank(
    query: str,
    documents: list[Document | str | dict],
    *,
    provider: Any,
    strategy: Any = "pointwise",
    top_k: int | None = None,
    strict: bool = True,
    context_tokens: int | None = None,
    **knobs: Any,
) -> RerankOutcome:
    """Rerank `documents` for `query` with `strategy` (a name or an instance) on `provider` (the LLMJudge)."""
    started = time.perf_counter()
    chosen = resolve_strategy(strategy, knobs)
    name = strategy_name(chosen)
    check_request(query, top_k)
    if top_k is None:  # a strategy may cap its answer by default (mmr: 5)
        top_k = getattr(chosen, "default_top_k", None)
    docs = as_documents(documents)
    check_documents(docs)
    judge = provider.judge if isinstance(provider, JudgeCall) else provider
    call = JudgeCall(judge, strict=strict, context_tokens=context_tokens)
    estimated = _estimate(name, chosen, len(docs), top_k) if docs else 0
    kept, dropped = await run_checked(chosen, query, docs, call, top_k)
    stats = {**call.stats(), "elapsed_ms": round((time.perf_counter() - started) * 1000, 1)}
    return RerankOutcome(kept, dropped, name, call.model, call.calls, estimated, stats, call.diversity_note)


def _estimate(name: str, strategy: Any, n_documents: int, top_k: int | None) -> int | None:
    try:
        estimate = estimated_calls(strategy, n_documents, top_k)
    except Exception as error:
        raise_typed(name, error)
    if estimate is not None and (isinstance(estimate, bool) or not isinstance(estimate, int) or estimate < 0):
        raise RerankStrategyError(f"the {name} strategy estimated {estimate!r} calls, not a count")
    return estimate
