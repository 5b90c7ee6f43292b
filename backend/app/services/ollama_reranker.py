"""Graphiti cross-encoder backed by a chat model on an OpenAI-compatible server (Ollama, llama.cpp).

Pointwise: one yes/no (or JSON score) request per distinct passage, concurrently under the judge's
process-wide bound. `rank` never raises (only cancellation propagates) and never returns a negative
score, because Graphiti drops results below `reranker_min_score` (default 0):

- passage fails (bad answer, 500, its own timeout): it alone is ranked below every scored passage,
  failed passages keeping their incoming order; DEBUG log.
- whole call fails (server down, unknown model, every request failing, deadline passed): passages
  come back in incoming order with descending synthetic scores; exactly one WARNING.
- after `breaker_threshold` whole-call failures in a row the model is skipped for
  `breaker_cooldown_s`; then one call tries again (half-open) and a success closes the breaker.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from contextvars import ContextVar
from typing import Any, Callable

from graphiti_core.cross_encoder.client import CrossEncoderClient

from app.rerank.judge import JudgeError, LLMJudge

logger = logging.getLogger(__name__)

# Real scores are floored here so a failed passage can always sit strictly below them and >= 0.
SCORE_FLOOR = 1e-6


# Set when a rank call in the current task fell back to the incoming order. The cross-encoder
# interface returns only (passage, score), so this is how graph search learns that an order was not
# the model's and stops calling it reranked (see graph_search._order).
RANK_FELL_BACK: ContextVar[bool] = ContextVar("rank_fell_back", default=False)


def fallback_order(passages: list[str]) -> list[tuple[str, float]]:
    """The incoming order as a failed call's answer, flagged in RANK_FELL_BACK."""
    RANK_FELL_BACK.set(True)
    return incoming_order(passages)


def incoming_order(passages: list[str]) -> list[tuple[str, float]]:
    """The incoming order, scores 1.0 descending and always > 0."""
    count = len(passages)
    return [(passage, 1.0 - index / (count + 1)) for index, passage in enumerate(passages)]


def rank_by_scores(passages: list[str], scores: dict[str, float]) -> list[tuple[str, float]]:
    """Every incoming passage (duplicates too) with its score, best first; ties keep incoming order.

    Passages missing from `scores` failed: they share half the lowest real score, so they rank below
    every scored passage, keep their incoming order (stable sort) and stay above 0.
    """
    real = {passage: max(score, SCORE_FLOOR) for passage, score in scores.items()}
    failed_score = min(real.values(), default=2 * SCORE_FLOOR) / 2
    ranked = [(passage, real.get(passage, failed_score)) for passage in passages]
    ranked.sort(key=lambda item: item[1], reverse=True)  # sort is stable, also with reverse=True
    return ranked


def breaker_open_fallback(judge: LLMJudge, breaker: "CircuitBreaker", passages: list[str],
                          log: logging.Logger) -> list[tuple[str, float]]:
    """The answer while the breaker is open: incoming order, counted, one WARNING on `log`."""
    judge.counters.add("breaker_skips")
    log.warning(
        "Reranker circuit breaker is open for model %r: model skipped for %.1fs more; "
        "%d passages keep their incoming order",
        judge.model, breaker.retry_in_s(), len(passages),
    )
    return fallback_order(passages)


class CircuitBreaker:
    """closed --threshold failures in a row--> open --cooldown--> half_open --success--> closed.

    In half_open every call may try the model; one failure re-opens it for another cooldown.
    """

    def __init__(self, threshold: int, cooldown_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if threshold < 1 or cooldown_s < 0:
            raise ValueError("breaker_threshold must be >= 1 and breaker_cooldown_s >= 0")
        self.threshold = threshold
        self.cooldown_s = float(cooldown_s)
        self._clock = clock
        self._lock = threading.Lock()
        self._state = "closed"
        self._consecutive_failures = 0
        self._opened_at = 0.0
        self._times_opened = 0

    def allow(self) -> bool:
        """May a call use the model now? Moves open -> half_open once the cooldown is over."""
        with self._lock:
            if self._state == "open":
                if self._clock() - self._opened_at < self.cooldown_s:
                    return False
                self._state = "half_open"
            return True

    def record_success(self) -> None:
        with self._lock:
            self._state = "closed"
            self._consecutive_failures = 0

    def record_failure(self) -> bool:
        """Count a whole-call failure; True when this failure opened the breaker."""
        with self._lock:
            self._consecutive_failures += 1
            if self._state == "open":
                return False
            if self._state == "half_open" or self._consecutive_failures >= self.threshold:
                self._state = "open"
                self._opened_at = self._clock()
                self._times_opened += 1
                return True
            return False

    def retry_in_s(self) -> float:
        with self._lock:
            if self._state != "open":
                return 0.0
            return max(0.0, self.cooldown_s - (self._clock() - self._opened_at))

    def snapshot(self) -> dict[str, Any]:
        retry_in = self.retry_in_s()
        with self._lock:
            return {
                "state": self._state,
                "consecutive_failures": self._consecutive_failures,
                "threshold": self.threshold,
                "cooldown_s": self.cooldown_s,
                "retry_in_s": round(retry_in, 3),
                "times_opened": self._times_opened,
            }


class OllamaReranker(CrossEncoderClient):
    """LLM-as-judge reranker; see the module docstring for its failure semantics."""

    def __init__(
        self,
        *,
        model: str,
        base_url: str,
        api_key: str | None,
        score_mode: str = "auto",
        max_parallel: int = 4,
        timeout_s: float = 30,
        deadline_s: float = 120,
        cache_size: int = 4096,
        max_tokens: int = 16,
        breaker_threshold: int = 3,
        breaker_cooldown_s: float = 30,
        instructions: str | None = None,
    ) -> None:
        # No network I/O here: the app must boot while the model server is down.
        if deadline_s <= 0:
            raise ValueError(f"deadline_s must be > 0, got {deadline_s}")
        self.judge = LLMJudge(
            model=model,
            base_url=base_url,
            api_key=api_key,
            score_mode=score_mode,
            max_parallel=max_parallel,
            timeout_s=timeout_s,
            cache_size=cache_size,
            max_tokens=max_tokens,
            instructions=instructions,
        )
        self.breaker = CircuitBreaker(breaker_threshold, breaker_cooldown_s)
        self.deadline_s = float(deadline_s)

    def __repr__(self) -> str:
        return f"OllamaReranker({self.judge!r})"

    async def rank(self, query: str, passages: list[str]) -> list[tuple[str, float]]:
        self.judge.counters.add("calls")
        if not passages:
            return []
        passages = list(passages)
        try:
            return await self._rank(query, passages)
        except Exception as exc:  # a bug must degrade the ranking, not break the search
            return self._call_failed(passages, type(exc).__name__, "unexpected error in the reranker", exc)

    def stats(self) -> dict[str, Any]:
        return {
            "provider": "ollama",
            "strategy": "pointwise",
            **self.judge.stats(),
            "deadline_s": self.deadline_s,
            "breaker": self.breaker.snapshot(),
        }

    async def aclose(self) -> None:
        await self.judge.aclose()

    # -- internals --------------------------------------------------------------------------

    async def _rank(self, query: str, passages: list[str]) -> list[tuple[str, float]]:
        distinct = list(dict.fromkeys(passages))  # duplicates are scored once
        scores: dict[str, float] = {}
        for passage in distinct:
            cached = self.judge.cached_score(query, passage)
            if cached is not None:
                scores[passage] = cached
        missing = [passage for passage in distinct if passage not in scores]
        if not missing:  # fully cached: served even while the breaker is open
            return rank_by_scores(passages, scores)

        if not self.breaker.allow():
            return breaker_open_fallback(self.judge, self.breaker, passages, logger)

        try:
            async with asyncio.timeout(self.deadline_s):
                outcomes = await self._score_concurrently(query, missing)
        except TimeoutError:
            return self._call_failed(passages, "RankDeadlineExceeded", f"no result within {self.deadline_s:g}s")
        except JudgeError as exc:  # call-level: the model is unknown or the key rejected
            return self._call_failed(passages, exc.error_class, exc.detail)

        fresh = {passage: outcome for passage, outcome in outcomes.items() if isinstance(outcome, float)}
        if not fresh:
            first = outcomes[missing[0]]
            detail = f"all {len(missing)} requests failed, first: {first}"
            return self._call_failed(passages, getattr(first, "error_class", "Error"), detail)
        self.breaker.record_success()
        self.judge.counters.add("passage_failures", len(missing) - len(fresh))
        return rank_by_scores(passages, {**scores, **fresh})

    async def _score_concurrently(self, query: str, passages: list[str]) -> dict[str, float | JudgeError]:
        """Score each passage; per-passage errors become outcomes, call-level ones abort all."""
        outcomes: dict[str, float | JudgeError] = {}

        async def score_one(index: int, passage: str) -> None:
            try:
                outcomes[passage] = float(await self.judge.score(query, passage))
            except JudgeError as exc:
                if exc.call_level:
                    raise
                outcomes[passage] = exc
                logger.debug("Reranker could not score uncached passage %d of %d (%s)", index + 1, len(passages), exc)

        try:
            async with asyncio.TaskGroup() as group:  # an exception cancels the sibling requests
                for index, passage in enumerate(passages):
                    group.create_task(score_one(index, passage))
        except BaseExceptionGroup as errors:
            raise errors.exceptions[0] from None
        return outcomes

    def _call_failed(
        self, passages: list[str], error_class: str, detail: str, exc: BaseException | None = None
    ) -> list[tuple[str, float]]:
        """The one WARNING of a failed call, breaker bookkeeping, and the incoming-order fallback."""
        self.judge.counters.add("fallbacks")
        if exc is not None or error_class == "RankDeadlineExceeded":
            self.judge.counters.record_error(error_class)
        opened = self.breaker.record_failure()
        logger.warning(
            "Reranker model %r failed (%s: %s); %d passages keep their incoming order%s",
            self.judge.model, error_class, detail, len(passages),
            f"; circuit breaker open for {self.breaker.cooldown_s:g}s" if opened else "",
            exc_info=exc,
        )
        return fallback_order(passages)
