"""Pointwise: the judge scores each document on its own (yes/no logprobs or a JSON score), concurrently
under the judge's process-wide bound; documents are ordered by score, ties keep their incoming order.

What OllamaReranker does for graph search, behind the strategy protocol. A document whose own
request fails is ranked below every scored one (lenient) or fails the call (strict); an error that
would hit every request alike (unknown model, rejected key) always fails the call.
"""

from __future__ import annotations

from app.rerank.prompts import build_judge_messages
from app.rerank.strategies.base import DEFAULT_MAX_DOCUMENT_CHARS, check_count, ensure_session, gather_or_fail
from app.rerank.strategies.prompts import clip
from app.rerank.types import Document, RerankError, RerankResult

_ANSWER_TOKENS = 16


class PointwiseStrategy:
    name = "pointwise"

    def __init__(self, *, max_document_chars: int = DEFAULT_MAX_DOCUMENT_CHARS, max_documents: int | None = 1000):
        if max_document_chars < 1:
            raise ValueError(f"max_document_chars must be >= 1, got {max_document_chars}")
        self.max_document_chars = max_document_chars
        self.max_documents = max_documents

    def estimate_calls(self, n_documents: int, top_k: int | None = None) -> int:
        """One call per document (fewer when texts repeat or scores are cached)."""
        return n_documents

    async def rerank(self, query: str, documents: list[Document], provider, top_k: int | None = None) -> list[RerankResult]:
        session = ensure_session(provider)
        check_count(self, documents)
        texts = [clip(document.text, self.max_document_chars) for document in documents]
        for document, text in zip(documents, texts):  # fail before spending any call
            messages = build_judge_messages(query, text, mode="json", instructions=session.instructions)
            session.check_fits(messages, _ANSWER_TOKENS, document.id, "pointwise")
        scores = await self._score_all(session, query, list(dict.fromkeys(texts)))
        session.raise_if_nothing_worked()

        def key(index: int) -> tuple[bool, float]:
            score = scores.get(texts[index])
            return (score is None, -(score or 0.0))

        order = sorted(range(len(documents)), key=key)  # stable: ties keep their incoming order
        results = [
            RerankResult(
                document=documents[index],
                rank=rank,
                original_index=index,
                score=scores.get(texts[index]) or 0.0,
                reason=None if texts[index] in scores else "unscored: the model's answer was unusable",
            )
            for rank, index in enumerate(order, start=1)
        ]
        return results[:top_k] if top_k is not None else results

    async def _score_all(self, session, query: str, texts: list[str]) -> dict[str, float]:
        scores: dict[str, float] = {}

        async def score_one(text: str) -> None:
            try:
                scores[text] = float(await session.score(query, text))
                session.unit_succeeded()
            except RerankError as error:
                session.unit_failed(error, "document")

        await gather_or_fail([score_one(text) for text in texts])  # an error cancels the sibling requests
        return scores
