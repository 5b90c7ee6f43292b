"""The reranking strategy protocol, and the small helpers the built-in strategies share.

A strategy is anything with these two methods (no base class needed):

    async def rerank(self, query, documents, provider, top_k=None) -> list[RerankResult]
    def estimate_calls(self, n_documents, top_k=None) -> int

`provider` is a `JudgeCall` (see app/rerank/judge_call.py): the shared `LLMJudge`'s `score()` and
`complete()` plus per-call counting and the strict/lenient failure policy. Optional attributes:
`name` (str) and `max_documents` (int | None), read with defaults by the front door.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from app.rerank.judge_call import JudgeCall, judge_call_for
from app.rerank.types import Document, RerankError, RerankResult, TooManyDocumentsError, rank_score


@runtime_checkable
class RerankStrategy(Protocol):
    async def rerank(
        self, query: str, documents: list[Document], provider: Any, top_k: int | None = None
    ) -> list[RerankResult]: ...

    def estimate_calls(self, n_documents: int, top_k: int | None = None) -> int: ...


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
