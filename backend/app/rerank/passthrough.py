"""The reranker for RERANKER_PROVIDER=none: keeps the first-stage order, costs nothing."""

from __future__ import annotations

from graphiti_core.cross_encoder.client import CrossEncoderClient


class PassthroughReranker(CrossEncoderClient):
    """Returns the passages in the order given, scored 1.0, 0.99, 0.98, ...

    Scores stay above 0 for any realistic list so Graphiti's reranker_min_score (0) drops nothing.
    """

    async def rank(self, query: str, passages: list[str]) -> list[tuple[str, float]]:
        return [(passage, max(1.0 - 0.01 * index, 1e-6)) for index, passage in enumerate(passages)]

    def stats(self) -> dict:
        return {"provider": "none"}
