"""The reranker for RERANKER_PROVIDER=none: keeps the first-stage order, costs nothing."""

from __future__ import annotations

from graphiti_llm_rerank.fusion import Judgement
from graphiti_llm_rerank.ollama_reranker import JudgingCrossEncoder


class PassthroughReranker(JudgingCrossEncoder):
    """Judges nothing: Graphiti's `rank` gets the passages in the order given, scored 1.0 descending
    and always above 0, so Graphiti's reranker_min_score (0) drops nothing."""

    async def judge_positions(self, query: str, passages: list[str]) -> Judgement:
        return Judgement(len(passages))

    def stats(self) -> dict:
        return {"provider": "none"}
