"""LLM reranking; the strategy runner `strategy_run.rerank`, exported here:

    from app.rerank import rerank
    outcome = await rerank(query, ["Paris ...", "Berlin ..."], provider=judge, strategy="listwise", top_k=5)
    outcome.results  # RerankResult(document, rank, original_index, score), best first

The path from settings to Graphiti: `factory.build_reranker(config)` -> `OllamaReranker` (a Graphiti
`CrossEncoderClient` running a strategy on the shared `judge.LLMJudge`, inside `guarded.GuardedReranker`),
`rerank_api.RerankApiReranker` for RERANKER_PROVIDER=rerank_api (a dedicated reranker behind POST /rerank,
in the same wrapper), or `PassthroughReranker` for RERANKER_PROVIDER=none.
"""

from app.rerank.strategy_run import RerankOutcome, rerank
from app.rerank.types import Document, RerankResult

__all__ = ["Document", "RerankOutcome", "RerankResult", "rerank"]
