"""Graphiti cross encoder that reranks with any strategy (listwise, sliding_window, pairwise, ...).

Passages in, (passage, score) out, every incoming passage exactly once (duplicates too). Scores come
from ranks: 1.0 for the best, strictly descending, always > 0, so Graphiti's score threshold
(`reranker_min_score`, 0) drops nothing. mmr's near-duplicates are appended after the ranking.

`rank` never raises (only cancellation propagates). The strategy runs lenient: a window, group or
pair whose answer is unusable keeps its incoming order (counted in `stats()`). A failure of the
whole call (server down, unknown model, every unit failing, deadline passed, input refused) returns
the first-stage order with exactly one WARNING, and feeds the same circuit breaker as OllamaReranker.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import Counter
from typing import Any

from graphiti_core.cross_encoder.client import CrossEncoderClient

from app.rerank.front_door import rerank
from app.rerank.judge import LLMJudge
from app.rerank.strategies.base import strategy_name
from app.rerank.strategies.prompts import STRATEGY_PROMPT_VERSION
from app.rerank.types import Document, RerankError, RerankStrategyError, rank_score
from app.services.ollama_reranker import CircuitBreaker, breaker_open_fallback, fallback_order

logger = logging.getLogger(__name__)


class StrategyReranker(CrossEncoderClient):
    def __init__(
        self,
        strategy: Any,
        judge: LLMJudge,
        *,
        deadline_s: float = 120.0,
        context_tokens: int | None = None,
        breaker_threshold: int = 3,
        breaker_cooldown_s: float = 30.0,
    ) -> None:
        if deadline_s <= 0:
            raise ValueError(f"deadline_s must be > 0, got {deadline_s}")
        self.strategy = strategy
        self.judge = judge  # shared: its bound on concurrent requests is process-wide
        self.deadline_s = float(deadline_s)
        self.context_tokens = context_tokens
        self.breaker = CircuitBreaker(breaker_threshold, breaker_cooldown_s)
        self._counts: Counter[str] = Counter()
        self._counts_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"StrategyReranker({strategy_name(self.strategy)!r}, {self.judge!r})"

    async def rank(self, query: str, passages: list[str]) -> list[tuple[str, float]]:
        self.judge.counters.add("calls")
        passages = list(passages)
        if not passages:
            return []
        if not self.breaker.allow():
            return breaker_open_fallback(self.judge, self.breaker, passages, logger)
        try:
            async with asyncio.timeout(self.deadline_s):
                ranked = await self._rank(query, passages)
        except TimeoutError:
            return self._call_failed(passages, "RankDeadlineExceeded", f"no result within {self.deadline_s:g}s")
        except Exception as exc:  # typed rerank errors and bugs alike: the search must still answer
            bug = isinstance(exc, RerankStrategyError) or not isinstance(exc, RerankError)
            return self._call_failed(passages, type(exc).__name__, str(exc), exc if bug else None)
        self.breaker.record_success()
        return ranked

    def stats(self) -> dict[str, Any]:
        with self._counts_lock:
            counts = dict(self._counts)
        return {
            "provider": "ollama",
            "strategy": strategy_name(self.strategy),
            **self.judge.stats(),
            "strategy_prompt_version": STRATEGY_PROMPT_VERSION,
            "strategy_counters": {name: counts.get(name, 0) for name in ("unit_fallbacks", "repairs", "ties")},
            "deadline_s": self.deadline_s,
            "breaker": self.breaker.snapshot(),
        }

    async def aclose(self) -> None:
        await self.judge.aclose()

    # -- internals --------------------------------------------------------------------------

    async def _rank(self, query: str, passages: list[str]) -> list[tuple[str, float]]:
        # Empty passages cannot be judged (the input guard refuses them): they go last, in order.
        rankable = [index for index, passage in enumerate(passages) if passage.strip()]
        documents = [Document(id=str(index), text=passages[index]) for index in rankable]
        outcome = await rerank(
            query, documents, provider=self.judge, strategy=self.strategy, strict=False,
            context_tokens=self.context_tokens,
        )
        with self._counts_lock:
            self._counts.update(
                unit_fallbacks=outcome.stats["fallbacks"], repairs=outcome.stats["repairs"], ties=outcome.stats["ties"]
            )
        order = [rankable[result.original_index] for result in outcome.results + outcome.dropped]
        placed = set(order)
        order += [index for index in range(len(passages)) if index not in placed]
        return [(passages[index], rank_score(rank, len(order))) for rank, index in enumerate(order, start=1)]

    def _call_failed(
        self, passages: list[str], error_class: str, detail: str, exc: BaseException | None = None
    ) -> list[tuple[str, float]]:
        """The one WARNING of a failed call, breaker bookkeeping, and the first-stage order."""
        self.judge.counters.add("fallbacks")
        self.judge.counters.record_error(error_class)
        opened = self.breaker.record_failure()
        logger.warning(
            "Reranker %s with model %r failed (%s: %s); %d passages keep their first-stage order%s",
            strategy_name(self.strategy), self.judge.model, error_class, detail, len(passages),
            f"; circuit breaker open for {self.breaker.cooldown_s:g}s" if opened else "",
            exc_info=exc,
        )
        return fallback_order(passages)
