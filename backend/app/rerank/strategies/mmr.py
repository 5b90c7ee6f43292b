"""MMR (maximal marginal relevance): relevance from any other strategy, combined with diversity.

Greedy: the next document is the one maximising
    lambda * relevance - (1 - lambda) * max cosine similarity to the documents already chosen,
with relevance the base strategy's scores scaled to [0, 1]. Similarity comes from the embedder
(Graphiti's `EmbedderClient`: `create_batch`). A document at least `duplicate_threshold` similar to
a chosen one is a near-duplicate: it is demoted out of the ranking into the dropped results
(`metadata["dropped"]`, reason `redundant_with:<id>`), listed after the kept ones.

LLM calls are the base strategy's; the embedder is not an LLM call. If embedding fails (lenient),
the base ranking is returned unchanged (counted).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from app.rerank.strategies.base import (
    check_count, estimated_calls, fill_rank_scores, judge_call_for, run_strategy, strategy_name,
)
from app.rerank.types import Document, RerankProviderError, RerankResult, rank_score


class MMRStrategy:
    name = "mmr"

    def __init__(self, *, base: Any, embedder: Any, lambda_: float = 0.7, duplicate_threshold: float = 0.95):
        if embedder is None or not hasattr(embedder, "create_batch"):
            raise ValueError("the mmr strategy needs an embedder with create_batch (Graphiti's EmbedderClient)")
        if not 0.0 <= lambda_ <= 1.0 or not 0.0 < duplicate_threshold <= 1.0:
            raise ValueError("lambda_ must be in [0, 1] and duplicate_threshold in (0, 1]")
        if strategy_name(base) == self.name:
            raise ValueError("the mmr strategy needs a relevance strategy other than mmr as its base")
        self.base = base
        self.embedder = embedder
        self.lambda_ = lambda_
        self.duplicate_threshold = duplicate_threshold
        self.max_documents = getattr(base, "max_documents", None)

    def estimate_calls(self, n_documents: int, top_k: int | None = None) -> int | None:
        """The base strategy ranks every document, whatever top_k (diversity needs them all)."""
        return estimated_calls(self.base, n_documents, None)

    async def rerank(self, query: str, documents: list[Document], provider, top_k: int | None = None) -> list[RerankResult]:
        session = judge_call_for(provider)
        check_count(self, documents)
        ranked = await run_strategy(self.base, query, documents, session, None)
        fill_rank_scores(ranked)
        if len(ranked) <= 1:
            return ranked[:top_k] if top_k is not None else ranked
        try:
            vectors = await self.embedder.create_batch([result.document.text for result in ranked])
            similarity = _cosine_matrix(vectors)
        except Exception as error:  # any embedder failure: keep the relevance ranking
            session.unit_failed(RerankProviderError(f"the embedder failed ({type(error).__name__})"), "mmr similarity")
            return ranked[:top_k] if top_k is not None else ranked
        kept, dropped = self._select(ranked, similarity)
        results = [_renumbered(result, rank, len(kept)) for rank, result in enumerate(kept, start=1)]
        results = results[:top_k] if top_k is not None else results
        for rank, result in enumerate(dropped, start=len(results) + 1):
            result.rank = rank
        return results + dropped

    def _select(self, ranked: list[RerankResult], similarity: np.ndarray) -> tuple[list[RerankResult], list[RerankResult]]:
        relevance = _unit_scale([result.score for result in ranked])
        remaining = list(range(len(ranked)))  # positions in `ranked`, best relevance first
        closest = np.full(len(ranked), -np.inf)  # max similarity to any chosen document
        nearest: list[int | None] = [None] * len(ranked)
        chosen: list[int] = []
        dropped: list[RerankResult] = []
        while remaining:
            penalty = np.where(np.isfinite(closest), closest, 0.0)
            values = {p: self.lambda_ * relevance[p] - (1 - self.lambda_) * penalty[p] for p in remaining}
            best = max(remaining, key=lambda p: values[p])  # max keeps the first of equals: base order
            remaining.remove(best)
            chosen.append(best)
            ranked[best].metadata.update(mmr=round(float(values[best]), 6), relevance=round(float(relevance[best]), 6))
            for p in list(remaining):
                if similarity[p, best] > closest[p]:
                    closest[p], nearest[p] = similarity[p, best], best
                if closest[p] >= self.duplicate_threshold:
                    remaining.remove(p)
                    dropped.append(_dropped(ranked[p], ranked[nearest[p]], float(closest[p])))
        return [ranked[p] for p in chosen], dropped


def _cosine_matrix(vectors: list[list[float]]) -> np.ndarray:
    matrix = np.asarray(vectors, dtype=float)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    matrix = matrix / np.where(norms == 0, 1.0, norms)
    return matrix @ matrix.T


def _unit_scale(scores: list[float]) -> np.ndarray:
    values = np.asarray(scores, dtype=float)
    spread = values.max() - values.min()
    return np.ones_like(values) if spread == 0 else (values - values.min()) / spread


def _renumbered(result: RerankResult, rank: int, total: int) -> RerankResult:
    result.rank, result.score = rank, rank_score(rank, total)
    return result


def _dropped(result: RerankResult, kept: RerankResult, similarity: float) -> RerankResult:
    result.reason = f"redundant_with:{kept.document.id}"
    result.metadata.update(dropped=True, similarity=round(similarity, 6))
    result.score = 0.0
    return result
