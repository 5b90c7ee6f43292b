"""Graphiti cross encoder backed by a dedicated reranker model behind `POST {base}/rerank`
(RERANKER_PROVIDER=rerank_api: llama.cpp's server with --reranking, TEI, vLLM, Infinity, Cohere, Jina).

One request per rank call scores every passage (more when RERANKER_API_MAX_DOCUMENTS or the server
caps a batch; see graphiti_llm_rerank/rerank_api_client.py), inside the deadline / breaker / fallback guard
of ollama_reranker.py. Passages come back byte for byte, each exactly once (duplicates too),
best first, every score > 0.

Scores: servers answer with probabilities (TEI, vLLM, Infinity, Cohere, Jina) or raw logits
(llama.cpp's server: bge-reranker gives about -11..+8). Graphiti drops results scored below 0, so
raw scores are taken as probabilities until one falls outside [0, 1]; from then on every score
(cached ones too: the cache holds raw scores) goes through a sigmoid, which keeps the order.
A passage the server did not score (left out of its answer, its batch's request failed, blank text)
sits below every scored one, in incoming order. A call where no passage could be scored because
requests failed, or where the server refused the key, the model or the dialect (401/403/404), falls
back to the incoming order with one WARNING.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Any, Literal

from graphiti_llm_rerank.config import DEFAULT_MAX_DOCUMENT_CHARS
from graphiti_llm_rerank.observer import score_cache_lookup
from graphiti_llm_rerank.fusion import SCORE_FLOOR, JudgedSoFar
from graphiti_llm_rerank.judge import redact_url
from graphiti_llm_rerank.ollama_reranker import GuardedReranker
from graphiti_llm_rerank.rerank_api_client import RerankApiClient, ScoredTexts
from graphiti_llm_rerank.score_cache import ScoreCache, ScoreKey, score_key
from graphiti_llm_rerank.types import Document, RerankError, refuse_longer_than

CACHE_VERSION = "rerank_api/1"  # part of the cache key: raw server scores, not mapped ones
ScoreScale = Literal["probability", "logit"]

# Why a passage has no score of its own (RerankApiRanking.order's third field).
NOT_IN_ANSWER = "not_in_answer"
REQUEST_FAILED = "request_failed"
EMPTY_TEXT = "empty_text"


@dataclass
class RerankApiRanking:
    """Every position once, best first: (position, score > 0, why unscored or None)."""

    order: list[tuple[int, float, str | None]]
    requests: int = 0
    ignored: int = 0  # answer entries out of range, repeated or unreadable
    tokens: int = 0
    errors: list[RerankError] = field(default_factory=list)

    @property
    def scored(self) -> int:
        return sum(1 for _, _, why in self.order if why is None)


class RerankApiReranker(GuardedReranker):
    """Dedicated-reranker cross encoder; see the module docstring for scores and failures."""

    # Its scores are relevance (as pointwise judging gives), not ranks: fusion may read them by value.
    scores_are_relevance = True
    # Each scored passage is reported as its batch's answer arrives, so "judged" counts only passages
    # the server really scored, and a budget or deadline that ends a split call keeps finished batches.
    reports_progress = True

    def __init__(
        self,
        client: RerankApiClient,
        *,
        cache_size: int = 4096,
        max_document_chars: int = DEFAULT_MAX_DOCUMENT_CHARS,
        deadline_s: float = 120.0,
        budget_s: float = 0.0,
        breaker_threshold: int = 3,
        breaker_cooldown_s: float = 30.0,
    ) -> None:
        # No network I/O here: the app must boot while the reranker server is down.
        super().__init__(counters=client.counters, deadline_s=deadline_s, budget_s=budget_s,
                         breaker_threshold=breaker_threshold, breaker_cooldown_s=breaker_cooldown_s)
        self.client = client
        self.max_document_chars = max_document_chars
        self._cache = ScoreCache(cache_size)
        self._scale: ScoreScale = "probability"
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RerankApiReranker({self.client!r})"

    def describe(self) -> str:
        return f"rerank API model {self.client.model!r} at {redact_url(self.client.url)}"

    @property
    def score_scale(self) -> ScoreScale:
        return self._scale

    def stats(self) -> dict[str, Any]:
        return {
            "provider": "rerank_api",
            **self.client.stats(),
            "score_scale": self._scale,
            "max_document_chars": self.max_document_chars,
            "cache_entries": len(self._cache),
            **self.counters.snapshot(),
            **self.guard_stats(),
        }

    async def aclose(self) -> None:
        await self.client.aclose()

    def refuse_too_long(self, documents: list[Document]) -> None:
        """Strict callers never have a document cut: the first longer than `max_document_chars` raises
        DocumentTooLongError (the judge's strategies follow the same rule)."""
        refuse_longer_than(documents, self.max_document_chars)

    async def rank_positions(self, query: str, passages: list[str], *, strict: bool,
                             progress: JudgedSoFar | None = None) -> RerankApiRanking:
        """Score and order `passages`. strict (the /api/rerank default): the first failed request or
        unusable answer raises. Otherwise failures only leave their passages unscored. `progress`
        (a guarded rank call's): told each score as its batch arrives, and each failed passage."""
        progress = progress if progress is not None else JudgedSoFar()
        raw, to_send = self._from_cache(query, passages)
        texts = list(to_send)
        for position, score in raw.items():  # cached scores count as judged, for free
            progress.add_scored([str(position)], self._mapped(score))

        def arrived(batch: dict[int, float]) -> None:  # what a cut-short call keeps
            self._note_scale(batch.values())
            for index, score in batch.items():
                progress.add_scored(map(str, to_send[texts[index]]), self._mapped(score))

        scored = await self.client.score(query, [text[: self.max_document_chars] for text in texts],
                                         arrived) if texts else ScoredTexts()
        for index, score in scored.scores.items():
            self._cache.put(self._key(query, texts[index]), score)
            raw.update(dict.fromkeys(to_send[texts[index]], score))
        if scored.call_error is not None:  # the whole call fails, in lenient mode too
            raise scored.call_error
        if strict and scored.errors:
            raise scored.errors[0]
        failed = {position for index in scored.failed for position in to_send[texts[index]]}
        progress.add_failed(map(str, failed))  # every score already went through _note_scale as its batch arrived
        ranking = RerankApiRanking(self._order(passages, raw, failed), scored.requests, scored.ignored,
                                   scored.tokens, scored.errors)
        self._count(ranking)
        return ranking

    # -- internals --------------------------------------------------------------------------

    def _needs_model(self, query: str, passages: list[str]) -> bool:
        return any(self._key(query, text) not in self._cache for text in passages if text.strip())

    async def _rank(self, query: str, passages: list[str], progress: JudgedSoFar) -> dict[int, float]:
        ranking = await self.rank_positions(query, passages, strict=False, progress=progress)
        if ranking.errors and not ranking.scored:
            raise ranking.errors[0]  # nothing scored: the wrapper falls back with one WARNING
        return {position: score for position, score, _ in ranking.order}

    def _key(self, query: str, passage: str) -> ScoreKey:
        return score_key(self.client.model, f"{CACHE_VERSION}:{self.max_document_chars}", "raw", query, passage)

    def _from_cache(self, query: str, passages: list[str]) -> tuple[dict[int, float], dict[str, list[int]]]:
        """Raw scores of cached passages by position, and the distinct uncached texts -> positions."""
        raw: dict[int, float] = {}
        to_send: dict[str, list[int]] = {}
        for position, text in enumerate(passages):
            if not text.strip():
                continue
            cached = self._cache.get(self._key(query, text))
            if cached is None:
                to_send.setdefault(text, []).append(position)
            else:
                raw[position] = cached
                self.counters.add("cache_hits")
        score_cache_lookup(hit=True, count=len(raw))
        if self._cache.enabled:
            score_cache_lookup(hit=False, count=sum(map(len, to_send.values())))
        return raw, to_send

    def _note_scale(self, fresh: Any) -> None:
        if self._scale == "logit" or all(0.0 <= score <= 1.0 for score in fresh):
            return
        with self._lock:
            if self._scale == "logit":
                return
            self._scale = "logit"
        self.counters.add("score_scale_switches")
        self.logger.info("Reranker %s answers with raw logits; mapping scores through a sigmoid from now on",
                         self.describe())

    def _mapped(self, raw: float) -> float:
        return max(_sigmoid(raw) if self._scale == "logit" else raw, SCORE_FLOOR)

    def _order(self, passages: list[str], raw: dict[int, float], failed: set[int]):
        scores = {position: self._mapped(score) for position, score in raw.items()}
        ranked = sorted(scores, key=lambda position: (-scores[position], position))
        rest = [position for position in range(len(passages)) if position not in scores]
        lowest = min(scores.values(), default=2.0) / 2
        below = [lowest * (1 - index / (len(rest) + 1)) for index in range(len(rest))]
        return ([(position, scores[position], None) for position in ranked]
                + [(position, score, _why(passages[position], position in failed))
                   for position, score in zip(rest, below)])

    def _count(self, ranking: RerankApiRanking) -> None:
        reasons = [why for _, _, why in ranking.order if why is not None]
        self.counters.add("unscored", reasons.count(NOT_IN_ANSWER))
        if ranking.scored:  # with nothing scored the whole call fails and counts as a fallback
            self.counters.add("passage_failures", reasons.count(REQUEST_FAILED))


def _why(text: str, failed: bool) -> str:
    if not text.strip():
        return EMPTY_TEXT
    return REQUEST_FAILED if failed else NOT_IN_ANSWER


def _sigmoid(value: float) -> float:
    """Logistic function, stable for large |value| (exp never overflows)."""
    if value >= 0:
        return 1.0 / (1.0 + math.exp(-value))
    exp = math.exp(value)
    return exp / (1.0 + exp)
