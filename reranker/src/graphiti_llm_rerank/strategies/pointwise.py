"""Pointwise: the judge scores each document on its own (yes/no logprobs, a grade or a JSON score),
concurrently under the judge's process-wide bound; documents are ordered by score, ties keep their
incoming order. The only pointwise implementation: graph search (OllamaReranker), /api/rerank and
the benchmark all run this.

Documents are cut to `max_document_chars` inside the prompt and a prompt that would not fit the
model's context is refused before any request. Identical (cut) texts are scored once. A document
whose own request fails is ranked below every scored one (lenient) or fails the call (strict); an
error that would hit every request alike (unknown model, rejected key) always fails the call. Once
every request in flight timed out with nothing answered (a server that accepts and never answers),
the documents not yet sent are not sent and fail as their requests would have, so a call that
judged nothing falls back after one timeout instead of one per wave of requests.

Each finished score (and each failed document) is told to the call as it arrives (`JudgeCall.report_judged`,
strategies/base.py): inside graph search's guarded rank call that is what survives a budget or
deadline that ends the call; elsewhere the call keeps no progress. Documents are sent in their incoming order, so under the
judge's request bound the first-stage best are judged first.
"""

from __future__ import annotations

from graphiti_llm_rerank.config import DEFAULT_MAX_DOCUMENT_CHARS
from graphiti_llm_rerank.judge_prompt import build_judge_messages
from graphiti_llm_rerank.strategies.base import check_count, gather_or_fail, judge_call_for, shown_texts
from graphiti_llm_rerank.strategies.strategy_prompts import clip
from graphiti_llm_rerank.types import Document, RerankError, RerankResult

_ANSWER_TOKENS = 16
UNSCORED = "unscored"  # metadata key of a document whose own request failed


class PointwiseStrategy:
    name = "pointwise"
    scores_are_relevance = True  # result scores are the judge's, not derived from ranks

    def __init__(self, *, max_document_chars: int = DEFAULT_MAX_DOCUMENT_CHARS, max_documents: int | None = 1000):
        if max_document_chars < 1:
            raise ValueError(f"max_document_chars must be >= 1, got {max_document_chars}")
        self.max_document_chars = max_document_chars
        self.max_documents = max_documents

    def estimate_calls(self, n_documents: int, top_k: int | None = None) -> int:
        """One call per document (fewer when texts repeat or scores are cached)."""
        return n_documents

    def all_cached(self, judge, query: str, texts: list[str]) -> bool:
        """Would ranking these texts need no model request? (Asked before the breaker is consulted.)"""
        return all(judge.is_cached(query, clip(text, self.max_document_chars)) for text in texts)

    async def rerank(self, query: str, documents: list[Document], provider, top_k: int | None = None) -> list[RerankResult]:
        call = judge_call_for(provider)
        check_count(self, documents)
        texts = shown_texts(call, documents, self.max_document_chars)
        for document, text in zip(documents, texts):  # fail before spending any call
            messages = build_judge_messages(query, text, mode="json", instructions=call.instructions)
            call.check_fits(messages, _ANSWER_TOKENS, document.id, "pointwise")
        ids_of: dict[str, list[str]] = {}  # distinct shown text -> the documents showing it, in order
        for document, text in zip(documents, texts):
            ids_of.setdefault(text, []).append(document.id)
        scores = await self._score_all(call, query, ids_of)
        call.raise_if_nothing_worked()

        def key(index: int) -> tuple[bool, float]:
            score = scores.get(texts[index])
            return (score is None, -(score or 0.0))

        order = sorted(range(len(documents)), key=key)  # stable: ties keep their incoming order
        results = [self._result(documents[index], rank, index, scores.get(texts[index]))
                   for rank, index in enumerate(order, start=1)]
        return results[:top_k] if top_k is not None else results

    @staticmethod
    def _result(document: Document, rank: int, index: int, score: float | None) -> RerankResult:
        if score is not None:
            return RerankResult(document=document, rank=rank, original_index=index, score=score)
        return RerankResult(document=document, rank=rank, original_index=index, score=0.0,
                            reason="unscored: the model's answer was unusable", metadata={UNSCORED: True})

    async def _score_all(self, call, query: str, ids_of: dict[str, list[str]]) -> dict[str, float]:
        scores: dict[str, float] = {}
        # More documents than the judge's request bound go out in waves as slots free up. Against a
        # server that accepts requests and never answers, each wave would pay the whole timeout again:
        # once every request in flight timed out with nothing answered, the rest are not sent, and
        # fail like any failed request (graphiti_llm_rerank/request_waves.py).
        waves = call.judge.request_waves()

        async def score_one(text: str) -> None:
            try:
                scores[text] = float(await call.score(query, text, waves=waves))
                call.unit_succeeded()
            except RerankError as error:
                call.unit_failed(error, "document")  # raises when strict or when every request would fail
                call.report_failed(ids_of[text])
                return
            call.report_judged(ids_of[text], scores[text])

        await gather_or_fail([score_one(text) for text in ids_of])  # an error cancels the sibling requests
        return scores
