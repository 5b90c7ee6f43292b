"""MMR (maximal marginal relevance): relevance from any other strategy, combined with diversity.

Greedy: the next document is the one maximising
    lambda * relevance - (1 - lambda) * max cosine similarity to the documents already chosen,
with relevance the base strategy's scores scaled to [0, 1]. Similarity comes from the embedder
(Graphiti's `EmbedderClient`: `create_batch`): **embeddings, not the model, decide what is
redundant**. A document at least `duplicate_threshold` similar to the one just chosen is its
near-duplicate; of such a group the more concise (shortest) document is kept in the chosen one's
place and the others are dropped (`metadata["dropped"]`, reason `redundant_with:<id>`).

As in the chunk-reranker contract: without a top_k the answer holds at most `default_top_k` (5)
documents; documents whose relevance is below `min_relevance` (0.2) are dropped (reason
`below_min_relevance`); every kept document's reason cites its text (the sentence sharing most
words with the query); and the call's `diversity_note` (on the JudgeCall, copied to the outcome)
says what was dropped and why. The relevance threshold applies where the base gives relevance
(`scores_are_relevance`, pointwise) and to a listwise rejection (relevance 0); a rank-derived
score is no relevance estimate, so other bases drop nothing for relevance.

LLM calls are the base strategy's; embedder requests are counted apart (`embedding_calls`). If
embedding fails (lenient), the base ranking is returned unchanged (counted as a unit fallback).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from graphiti_llm_rerank.strategies.base import (
    check_count, estimated_calls, fill_rank_scores, judge_call_for, run_strategy, strategy_name,
)
from graphiti_llm_rerank.strategies.pointwise import UNSCORED
from graphiti_llm_rerank.types import Document, RerankProviderError, RerankResult, rank_score

DEFAULT_TOP_K = 5
DEFAULT_MIN_RELEVANCE = 0.2
_EXCERPT_CHARS = 100
_SENTENCE = re.compile(r"[^.!?\n]+[.!?]?")
_WORD = re.compile(r"\w+")


class MMRStrategy:
    name = "mmr"
    default_top_k = DEFAULT_TOP_K  # strategy_run.rerank applies it when the caller gives no top_k

    def __init__(
        self,
        *,
        base: Any,
        embedder: Any,
        lambda_: float = 0.7,
        duplicate_threshold: float = 0.95,
        min_relevance: float = DEFAULT_MIN_RELEVANCE,
    ):
        if embedder is None or not hasattr(embedder, "create_batch"):
            raise ValueError("the mmr strategy needs an embedder with create_batch (Graphiti's EmbedderClient)")
        if not 0.0 <= lambda_ <= 1.0 or not 0.0 < duplicate_threshold <= 1.0 or not 0.0 <= min_relevance <= 1.0:
            raise ValueError("lambda_ and min_relevance must be in [0, 1] and duplicate_threshold in (0, 1]")
        if strategy_name(base) == self.name:
            raise ValueError("the mmr strategy needs a relevance strategy other than mmr as its base")
        self.base = base
        self.embedder = embedder
        self.lambda_ = lambda_
        self.duplicate_threshold = duplicate_threshold
        self.min_relevance = min_relevance
        self.max_documents = getattr(base, "max_documents", None)

    def estimate_calls(self, n_documents: int, top_k: int | None = None) -> int | None:
        """The base strategy ranks every document, whatever top_k (diversity needs them all)."""
        return estimated_calls(self.base, n_documents, None)

    async def rerank(self, query: str, documents: list[Document], provider, top_k: int | None = None) -> list[RerankResult]:
        call = judge_call_for(provider)
        check_count(self, documents)
        ranked = await run_strategy(self.base, query, documents, call, None)
        fill_rank_scores(ranked)
        for position, result in enumerate(ranked, start=1):
            result.metadata.update(base_rank=position, base_score=round(float(result.score), 6))
        relevant, weak = self._split_by_relevance(ranked)
        kept, redundant, embedded = relevant, [], True
        if len(relevant) > 1:
            similarity = await self._similarity(call, relevant)
            embedded = similarity is not None  # the embedder failed: the relevance ranking stands
            if embedded:
                kept, redundant = self._select(relevant, similarity)
        kept = [_renumbered(result, rank, len(kept)) for rank, result in enumerate(kept, start=1)]
        kept = kept[:top_k] if top_k is not None else kept
        for result in kept:
            result.reason = self._cited_reason(query, result)
        dropped = redundant + weak
        for rank, result in enumerate(dropped, start=len(kept) + 1):
            result.rank = rank
        call.diversity_note = self._note(len(relevant), redundant, weak, embedded=embedded)
        return kept + dropped

    def _cited_reason(self, query: str, result: RerankResult) -> str:
        """A short reason that quotes the document: its sentence sharing most words with the query."""
        if getattr(self.base, "scores_are_relevance", False) and not result.metadata.get(UNSCORED):
            lead = f"relevance {result.metadata['base_score']:.2f}"
        else:
            lead = f"{strategy_name(self.base)} rank {result.metadata['base_rank']}"
        return f'{lead}: "{cited_excerpt(query, result.document.text)}"'

    def _split_by_relevance(self, ranked: list[RerankResult]) -> tuple[list[RerankResult], list[RerankResult]]:
        """(relevant enough, dropped below min_relevance), both in the base's order."""
        scores_are_relevance = bool(getattr(self.base, "scores_are_relevance", False))
        relevant, weak = [], []
        for result in ranked:
            relevance = 0.0 if result.metadata.get("rejected") else result.score
            measured = scores_are_relevance or result.metadata.get("rejected")
            if measured and not result.metadata.get(UNSCORED) and relevance < self.min_relevance:
                result.reason = f"below_min_relevance:{self.min_relevance:g}"
                result.metadata.update(dropped=True, relevance=round(float(relevance), 6))
                result.score = 0.0
                weak.append(result)
            else:
                relevant.append(result)
        return relevant, weak

    async def _similarity(self, call, ranked: list[RerankResult]) -> np.ndarray | None:
        call.embedding_requested()
        try:
            return _cosine_matrix(await self.embedder.create_batch([result.document.text for result in ranked]))
        except Exception as error:  # any embedder failure: keep the relevance ranking
            call.unit_failed(RerankProviderError(f"the embedder failed ({type(error).__name__})"), "mmr similarity")
            return None

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
            twins = [p for p in remaining if p != best and similarity[p, best] >= self.duplicate_threshold]
            keeper = min([best, *twins], key=lambda p: len(ranked[p].document.text))  # ties: the best
            for p in [best, *twins]:
                remaining.remove(p)
                if p != keeper:
                    dropped.append(_dropped(ranked[p], ranked[keeper], float(similarity[p, keeper])))
            chosen.append(keeper)
            ranked[keeper].metadata.update(mmr=round(float(values[best]), 6),
                                           relevance=round(float(relevance[keeper]), 6))
            for p in list(remaining):
                if similarity[p, keeper] > closest[p]:
                    closest[p], nearest[p] = similarity[p, keeper], keeper
                if closest[p] >= self.duplicate_threshold:
                    remaining.remove(p)
                    dropped.append(_dropped(ranked[p], ranked[nearest[p]], float(closest[p])))
        return [ranked[p] for p in chosen], dropped

    def _note(self, compared: int, redundant: list[RerankResult], weak: list[RerankResult], *, embedded: bool) -> str:
        if not embedded:
            parts = ["the embedder failed: the relevance ranking is kept without a diversity check"]
        elif redundant:
            pairs = ", ".join(f"{r.document.id} ~ {r.reason.split(':', 1)[1]}" for r in redundant)
            parts = [f"{len(redundant)} near-duplicate(s) dropped, the more concise of each kept ({pairs}); "
                     f"redundancy is decided by embedding cosine similarity >= {self.duplicate_threshold:g}"]
        else:
            parts = [f"no near-duplicates among {compared} document(s) (embedding cosine similarity "
                     f"< {self.duplicate_threshold:g})"]
        if weak:
            parts.append(f"{len(weak)} dropped below relevance {self.min_relevance:g} "
                         f"({', '.join(str(r.document.id) for r in weak)})")
        return "; ".join(parts)


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


def cited_excerpt(query: str, text: str) -> str:
    """The sentence of `text` with the most words in common with `query` (the first of equals), cut short."""
    wanted = {word.lower() for word in _WORD.findall(query)}
    sentences = [match.group(0).strip() for match in _SENTENCE.finditer(text) if match.group(0).strip()] or [text]
    best = max(sentences, key=lambda s: len(wanted & {word.lower() for word in _WORD.findall(s)}))
    return best if len(best) <= _EXCERPT_CHARS else best[: _EXCERPT_CHARS - 1].rstrip() + "…"
