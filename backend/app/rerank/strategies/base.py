"""The reranking strategy protocol, and the small helpers the built-in strategies share.

A strategy is anything with a `rerank` method (no base class needed), sync or async, with the four
arguments by these names, positional or keyword-only:

    def rerank(self, *, query, documents, provider, top_k=None) -> list[RerankResult]   # or async def
    def estimate_calls(self, n_documents, top_k=None) -> int                             # optional

`provider` is a `JudgeCall` (see app/rerank/judge_call.py): the shared `LLMJudge`'s `score()` and
`complete()` plus per-call counting and the strict/lenient failure policy. Without `estimate_calls`
the estimate is unknown (None). A result may leave `score` out: the strategy runner
(`strategy_run.rerank`) derives it from the rank. Optional attributes: `name` (str) and
`max_documents` (int | None), read with defaults.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from app.rerank.judge_call import JudgeCall, judge_call_for
from app.rerank.strategies.strategy_prompts import clip
from app.rerank.types import (
    Document, RerankError, RerankResult, TooManyDocumentsError, rank_score, refuse_longer_than,
)


@runtime_checkable
class RerankStrategy(Protocol):
    async def rerank(
        self, query: str, documents: list[Document], provider: Any, top_k: int | None = None
    ) -> list[RerankResult]: ...

    def estimate_calls(self, n_documents: int, top_k: int | None = None) -> int: ...


def estimated_calls(strategy: Any, n_documents: int, top_k: int | None = None) -> int | None:
    """The strategy's own estimate of its model calls, or None (unknown) when it gives none."""
    estimate = getattr(strategy, "estimate_calls", None)
    return estimate(n_documents, top_k) if callable(estimate) else None


def _takes_keywords(method: Any) -> bool:
    try:
        inspect.signature(method).bind(query=None, documents=None, provider=None, top_k=None)
    except (TypeError, ValueError):
        return False
    return True


async def run_strategy(
    strategy: Any, query: str, documents: list[Document], provider: Any, top_k: int | None
) -> Any:
    """`strategy.rerank(...)` called as it is written: keyword-only or positional, sync or async."""
    method = strategy.rerank
    if _takes_keywords(method):
        result = method(query=query, documents=documents, provider=provider, top_k=top_k)
    else:
        result = method(query, documents, provider, top_k)
    return await result if inspect.isawaitable(result) else result


def fill_rank_scores(results: Sequence[RerankResult]) -> None:
    """Results without a score get one from their position (kept ones) or 0.0 (dropped ones)."""
    kept = [result for result in results if not result.dropped]
    for position, result in enumerate(kept, start=1):
        if result.score is None:
            result.score = rank_score(position, len(kept))
    for result in results:
        if result.score is None:
            result.score = 0.0


def strategy_name(strategy: Any) -> str:
    return str(getattr(strategy, "name", None) or type(strategy).__name__)


def check_count(strategy: Any, documents: Sequence[Document]) -> None:
    limit = getattr(strategy, "max_documents", None)
    if limit is not None and len(documents) > limit:
        raise TooManyDocumentsError(
            f"{len(documents)} documents is more than the {strategy_name(strategy)} strategy accepts ({limit})",
            item=len(documents),
        )


def results_in_order(
    documents: Sequence[Document],
    order: Sequence[int],
    top_k: int | None = None,
    *,
    reasons: dict[int, str] | None = None,
    metadata: dict[int, dict[str, Any]] | None = None,
) -> list[RerankResult]:
    """Results for a complete order of document positions, scored from ranks (descending, > 0)."""
    total = len(order)
    results = [
        RerankResult(
            document=documents[index],
            rank=rank,
            original_index=index,
            score=rank_score(rank, total),
            reason=(reasons or {}).get(index),
            metadata=dict((metadata or {}).get(index, {})),
        )
        for rank, index in enumerate(order, start=1)
    ]
    return results[:top_k] if top_k is not None else results


def shown_texts(call: JudgeCall, documents: Sequence[Document], max_chars: int) -> list[str]:
    """The documents as the model will see them, checked before any call.

    Strict (fail fast, no hidden truncation): a document longer than `max_chars` raises
    DocumentTooLongError naming it. Lenient (graph search): it is cut to `max_chars` inside the
    prompt only; results keep the full text."""
    if call.strict:
        refuse_longer_than(documents, max_chars)
    return [clip(document.text, max_chars) for document in documents]


def longest_id(documents: Sequence[Document]) -> str | None:
    return max(documents, key=lambda document: len(document.text)).id if documents else None


T = TypeVar("T")


async def gather_or_fail(awaitables: Sequence[Awaitable[T]]) -> list[T]:
    """All results in order; the first exception cancels the others and is raised as itself."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(awaitable) for awaitable in awaitables]  # type: ignore[arg-type]
    except BaseExceptionGroup as errors:
        raise errors.exceptions[0] from None
    return [task.result() for task in tasks]


def first_failure(outcomes: Sequence[Any]) -> RerankError | None:
    """The first typed error among `asyncio.gather(..., return_exceptions=True)` outcomes; anything
    else raised (a bug, a cancellation) is raised as itself."""
    for outcome in outcomes:
        if isinstance(outcome, BaseException) and not isinstance(outcome, RerankError):
            raise outcome
    return next((outcome for outcome in outcomes if isinstance(outcome, RerankError)), None)
