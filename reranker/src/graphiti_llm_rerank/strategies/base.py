"""The reranking strategy protocol, the per-call view of the judge a strategy receives, and the small
helpers the built-in strategies share.

A strategy is anything with a `rerank` method (no base class needed), sync or async, with the four
arguments by these names, positional or keyword-only:

    def rerank(self, *, query, documents, provider, top_k=None) -> list[RerankResult]   # or async def
    def estimate_calls(self, n_documents, top_k=None) -> int                             # optional

Without `estimate_calls` the estimate is unknown (None). A result may leave `score` out: the strategy
runner (`run_checked`) derives it from the rank. Optional attributes: `name` (str) and
`max_documents` (int | None), read with defaults.

`provider` is a `JudgeCall`: one rerank call's view of the shared `LLMJudge`. The runner makes one
per call; a strategy called directly with a bare judge makes a strict one (`judge_call_for`). It
offers the judge's two request methods, `score()` and `complete()`, so a strategy written against
`LLMJudge` works unchanged, and adds what belongs to one call only:

- counting: LLM calls made (cache hits are not calls), tokens, unusable answers, unit fallbacks,
  permutation repairs, pairwise ties. The judge's own counters are process-wide and shared by
  concurrent calls, so a per-call count cannot be read from them; unusable answers and unit
  fallbacks are also added to the judge's `invalid_outputs` / `unit_fallbacks`, so /health and the
  benchmark see them for every strategy, not only pointwise;
- typed errors: `JudgeError` becomes `RerankProviderError` or `RerankParseError`;
- the failure policy for one unit of work (a window, a group, a pair): with `strict` the error
  propagates (fail fast); otherwise the unit keeps its incoming order and a fallback is counted;
- the context guard: a prompt whose estimated size exceeds the model's window is refused;
- progress: inside a guarded rank call the call carries that call's `JudgedSoFar`, and a strategy
  that scores documents one by one (pointwise) tells it each finished score (`call.report_judged(ids,
  score)`) and each failed document (`call.report_failed(ids)`), so a call that a budget or deadline ends
  keeps its finished work. Documents are numbered by passage position there ("0", "1", ...). Outside
  a rank call (/api/rerank, the benchmark) the call has no accumulator and telling it costs nothing.

The judge's semaphore, cache and counters stay the only ones: nothing here bypasses them.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, NoReturn, Protocol, TypeVar, runtime_checkable

from graphiti_llm_rerank.config import DEFAULT_CONTEXT_TOKENS
from graphiti_llm_rerank.fusion import JudgedSoFar
from graphiti_llm_rerank.judge import JudgeError, LLMJudge, Usage
from graphiti_llm_rerank.request_waves import NOT_SENT, RequestWaves
from graphiti_llm_rerank.strategies.strategy_prompts import clip
from graphiti_llm_rerank.types import (
    Document, DocumentTooLongError, RerankError, RerankParseError, RerankProviderError, RerankResult,
    RerankStrategyError, TooManyDocumentsError, rank_score, refuse_longer_than,
)

logger = logging.getLogger(__name__)

_MESSAGE_OVERHEAD_TOKENS = 8
_DEAD_AFTER = 3  # failed units, none reaching the server, that end a lenient call
T = TypeVar("T")


@runtime_checkable
class RerankStrategy(Protocol):
    async def rerank(
        self, query: str, documents: list[Document], provider: Any, top_k: int | None = None
    ) -> list[RerankResult]: ...

    def estimate_calls(self, n_documents: int, top_k: int | None = None) -> int: ...


def estimate_tokens(text: str) -> int:
    """A deliberately generous estimate: ~3 ASCII characters per token, one token per other character."""
    ascii_chars = sum(1 for char in text if ord(char) < 128)
    return ascii_chars // 3 + (len(text) - ascii_chars) + 1


def typed_error(exc: JudgeError) -> RerankProviderError | RerankParseError:
    if exc.error_class == "InvalidOutput":
        return RerankParseError(f"the model's answer is unusable ({exc.detail})")
    return RerankProviderError(
        f"the model request failed ({exc.error_class}: {exc.detail})" if exc.detail else exc.error_class,
        error_class=exc.error_class,
        call_level=exc.call_level,
    )


class JudgeCall:
    """One rerank call's view of the shared `LLMJudge`: what a strategy receives as `provider`."""

    def __init__(self, judge: LLMJudge, *, strict: bool = True, context_tokens: int | None = None,
                 progress: JudgedSoFar | None = None) -> None:
        self.judge = judge
        self.strict = strict
        self.progress = progress  # the guarded rank call's finished work; None outside one
        self.context_tokens = context_tokens or DEFAULT_CONTEXT_TOKENS
        self.calls = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.fallbacks = 0  # units (window, group, pair, document) answered in incoming order
        self.invalid_outputs = 0  # answers read by a strategy that held nothing usable
        self.repairs = 0  # entries added to or dropped from model permutations / selections
        self.repair_reports: list[dict[str, Any]] = []  # one per repaired listwise answer (permutation.py)
        self.ties = 0  # pairwise comparisons whose two orders disagreed
        self.embedding_calls = 0  # embedder requests (mmr's similarity), not model calls
        self.diversity_note: str | None = None  # set by a diversity strategy (mmr) for the answer
        self.successes = 0
        self.last_error: Exception | None = None

    @property
    def model(self) -> str:
        return self.judge.model

    @property
    def instructions(self) -> str | None:
        return self.judge.instructions

    async def score(self, query: str, passage: str, *, waves: RequestWaves | None = None) -> float:
        """The judge's pointwise relevance in [0, 1]; a cached score costs no call. `waves`: the
        call's RequestWaves (`self.judge.request_waves()`), shared by its concurrent requests."""
        cached = self.judge.cached_score(query, passage)
        if cached is not None:
            return cached
        self.calls += 1
        try:
            return await self.judge.score(query, passage, waves=waves)
        except JudgeError as exc:
            if exc.error_class == NOT_SENT:  # held back by the call's waves: no call was made
                self.calls -= 1
            raise self._typed(exc) from None

    async def complete(
        self, messages: list[dict[str, str]], *, max_tokens: int, json_object: bool = False
    ) -> tuple[str, Usage]:
        self.calls += 1
        try:
            text, usage = await self.judge.complete(messages, max_tokens=max_tokens, json_object=json_object)
        except JudgeError as exc:
            raise self._typed(exc) from None
        self.prompt_tokens += usage.prompt_tokens
        self.completion_tokens += usage.completion_tokens
        return text, usage

    def _typed(self, exc: JudgeError) -> RerankProviderError | RerankParseError:
        if exc.error_class == "InvalidOutput":  # the judge has counted it in its own counters
            self.invalid_outputs += 1
        return typed_error(exc)

    def parsed(self, read: Callable[..., T], text: str, *args: Any, **options: Any) -> T:
        """`read(text, *args, **options)`, counting an unusable answer (RerankParseError) as an invalid output."""
        try:
            return read(text, *args, **options)
        except RerankParseError:
            self.invalid_outputs += 1
            self.judge.counters.add("invalid_outputs")
            self.judge.counters.record_error("InvalidOutput")
            raise

    def check_fits(self, messages: list[dict[str, str]], answer_tokens: int, longest_id: str | None, what: str) -> None:
        """Refuse a prompt that would not fit the model's context window (estimated, before sending)."""
        needed = answer_tokens + sum(
            estimate_tokens(str(message.get("content", ""))) + _MESSAGE_OVERHEAD_TOKENS for message in messages
        )
        if needed > self.context_tokens:
            raise DocumentTooLongError(
                f"the {what} prompt needs about {needed} tokens, more than the model's context of "
                f"{self.context_tokens} (RERANKER_CONTEXT_TOKENS); longest document: {longest_id!r}. "
                "Send fewer or shorter documents, or lower RERANKER_MAX_DOCUMENT_CHARS",
                document_id=longest_id,
            )

    def embedding_requested(self) -> None:
        """An embedder request (mmr): counted apart from model calls, here and in the judge's counters."""
        self.embedding_calls += 1
        self.judge.counters.add("embedding_calls")

    def record_repairs(self, report: Any, what: str) -> None:
        """A listwise answer's PermutationReport: counted, and kept when it needed repairs."""
        self.repairs += report.repairs
        if not report.is_valid:
            self.repair_reports.append({"unit": what, **report.as_dict()})

    def report_judged(self, document_ids: Iterable[str], score: float) -> None:
        """A score has arrived for these documents."""
        if self.progress is not None:
            self.progress.add_scored(document_ids, score)

    def report_failed(self, document_ids: Iterable[str]) -> None:
        """These documents' own request failed."""
        if self.progress is not None:
            self.progress.add_failed(document_ids)

    def unit_succeeded(self) -> None:
        self.successes += 1

    def unit_failed(self, error: Exception, what: str) -> None:
        """Strict: re-raise. Otherwise the unit keeps its incoming order; call-level errors still abort."""
        if self.strict or (isinstance(error, RerankProviderError) and error.call_level):
            raise error
        if self._unreachable(error) and self.fallbacks >= _DEAD_AFTER - 1:
            raise error  # nothing has reached the server so far: it is down, stop spending calls on it
        self.fallbacks += 1
        self.judge.counters.add("unit_fallbacks")
        self.last_error = error
        logger.debug("Rerank %s keeps its incoming order (%s: %s)", what, type(error).__name__, error)

    def _unreachable(self, error: Exception) -> bool:
        # Only connection failures: an HTTP 500 or a bad answer may be about one unit's passages.
        return (
            self.successes == 0
            and isinstance(error, RerankProviderError)
            and error.error_class == "APIConnectionError"
        )

    def raise_if_nothing_worked(self) -> None:
        """Every unit failed: that is a failed call, not a ranking (the caller falls back once, loudly)."""
        if self.successes == 0 and self.last_error is not None:
            raise self.last_error

    def stats(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "fallbacks": self.fallbacks,
            "invalid_outputs": self.invalid_outputs,
            "repairs": self.repairs,
            "repair_reports": list(self.repair_reports),
            "ties": self.ties,
            "embedding_calls": self.embedding_calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
        }


def judge_call_for(provider: Any) -> JudgeCall:
    """The provider as a JudgeCall: strategies called directly with a bare judge get a strict one."""
    if isinstance(provider, JudgeCall):
        return provider
    return JudgeCall(provider, strict=True)

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


async def run_checked(
    strategy: Any, query: str, documents: list[Document], call: JudgeCall, top_k: int | None
) -> tuple[list[RerankResult], list[RerankResult]]:
    """Run `strategy` on one call's view of the judge and check its answer: (kept, dropped), each
    with its rank and a score. Every failure is typed (`raise_typed`); cancellation propagates."""
    name = strategy_name(strategy)
    if not documents:
        return [], []
    check_count(strategy, documents)
    try:
        results = await run_strategy(strategy, query, documents, call, top_k)
    except Exception as error:  # CancelledError is not an Exception
        raise_typed(name, error)
    try:
        return _checked(results, documents, top_k, name)
    except Exception as error:  # e.g. a result whose document is not a Document
        raise_typed(name, error)


def raise_typed(name: str, error: Exception) -> NoReturn:
    """`error`, raised as a RerankError: typed ones as they are, the judge's as provider or parse
    errors, anything else as the strategy's own failure."""
    if isinstance(error, RerankError):
        raise error
    if isinstance(error, JudgeError):  # a strategy that called the bare judge
        raise typed_error(error) from error
    raise RerankStrategyError(f"the {name} strategy failed: {type(error).__name__}: {error}") from error


def _checked(results: Any, docs: list[Document], top_k: int | None, name: str):
    """Kept and dropped results, after checking a (possibly custom) strategy's output is consistent."""
    if not isinstance(results, list) or not all(isinstance(result, RerankResult) for result in results):
        raise RerankStrategyError(f"the {name} strategy did not return a list of RerankResult")
    seen: set[int] = set()
    for result in results:
        index = result.original_index
        if not (isinstance(index, int) and 0 <= index < len(docs)) or index in seen:
            raise RerankStrategyError(f"the {name} strategy returned original_index {index!r} twice or out of range")
        if result.document.id != docs[index].id:
            raise RerankStrategyError(f"the {name} strategy returned an inconsistent result for index {index}")
        if result.score is not None and not _is_score(result.score):
            raise RerankStrategyError(f"the {name} strategy returned score {result.score!r} for index {index}, "
                                      "not a finite number")
        seen.add(index)
    fill_rank_scores(results)
    kept = [result for result in results if not result.dropped]
    dropped = [result for result in results if result.dropped]
    expected = len(docs) - len(dropped) if top_k is None else min(top_k, len(docs) - len(dropped))
    if len(kept) < expected:
        raise RerankStrategyError(f"the {name} strategy ranked {len(kept)} documents, expected {expected}")
    kept = kept[:top_k] if top_k is not None else kept
    for rank, result in enumerate(kept, start=1):
        result.rank = rank
    for rank, result in enumerate(dropped, start=len(kept) + 1):
        result.rank = rank
    return kept, dropped


def _is_score(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


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
