"""LLM reranking: the one way in for the rest of the app (`graph/`, `api/`, `bench/`, `cli/`,
`demo/`, `report/` import from `graphiti_llm_rerank` only; tests/test_structure.py keeps it so).

    reranker = build_reranker(config)                         # RERANKER_PROVIDER's cross encoder, no I/O
    judgement = await judge_positions(reranker, query, passages)
    judgement.evidence, judgement.judged, judgement.fell_back, judgement.fallback_reason
    order = fuse_judgement(first_stage_scores, judgement, method=config.reranker_fusion)

The path beneath: `providers.py` maps each RERANKER_PROVIDER to what it builds (`ollama`:
`OllamaReranker`, the LLM judge running RERANKER_STRATEGY on the shared `judge.LLMJudge`;
`rerank_api`: `RerankApiReranker`, a dedicated reranker behind POST /rerank; `none`:
`PassthroughReranker`), from the process-wide pieces it keeps beside them. Every model-backed reranker
runs inside the guard of `cross_encoder.py` (`GuardedReranker`: budget, deadline, breaker, fallback)
and answers by position with a `Judgement` (`judgement.py`); Graphiti's `CrossEncoderClient.rank` is
a thin adapter on top, in the same module. Every order made from a judgement is made in `fusion.py`.

/api/rerank runs the strategies on documents with ids: `rerank(query, documents, provider=judge,
strategy=...)` answers a `RerankOutcome` of `RerankResult`s (`strategy_run.py`).
"""

from graphiti_llm_rerank.circuit_breaker import CircuitBreaker
from graphiti_llm_rerank.cross_encoder import judge_positions, rerank_positions
from graphiti_llm_rerank.providers import build_judge, shared_judge, shared_rerank_api
from graphiti_llm_rerank.fusion import (
    Fused, cascade_positions, cheap_order, check_fusion, fuse, fuse_judgement, judge_order,
)
from graphiti_llm_rerank.judge import TOP_LOGPROBS, LLMJudge
from graphiti_llm_rerank.judge_prompt import (
    PASSAGE_CLOSE, PASSAGE_OPEN, PROMPT_VERSION, QUERY_CLOSE, QUERY_OPEN, build_judge_messages, escape_field,
    parse_judge_prompt,
)
from graphiti_llm_rerank.judgement import Judgement, fallback_judgement
from graphiti_llm_rerank.ollama_reranker import OllamaReranker
from graphiti_llm_rerank.passthrough import PassthroughReranker
from graphiti_llm_rerank.providers import Provider, build_reranker, provider_for, shared_breaker
from graphiti_llm_rerank.rerank_api import RerankApiReranker
from graphiti_llm_rerank.score_parsing import strip_reasoning, yes_no_from_text, yes_probability
from graphiti_llm_rerank.server_connection import redact_url
from graphiti_llm_rerank.similarity import PASSAGE_KIND, QUERY_KIND, STORED_TEXT_KIND, cosines, embed_query, query_cosines
from graphiti_llm_rerank.strategies.registry import strategy_from_config, strategy_settings
from graphiti_llm_rerank.strategies.strategy_prompts import STRATEGY_PROMPT_VERSION
from graphiti_llm_rerank.strategy_run import RerankOutcome, rerank
from graphiti_llm_rerank.types import (
    Document, DocumentTooLongError, InvalidRerankInputError, RerankError, RerankParseError, RerankProviderError,
    RerankResult, RerankStrategyError, TooManyDocumentsError, TournamentPlanError, documents_from_jsonl,
    refuse_longer_than,
)

__all__ = [
    # Building a reranker from the settings, and the process-wide pieces it shares with /api/rerank.
    "CircuitBreaker", "LLMJudge", "OllamaReranker", "PassthroughReranker", "Provider",
    "RerankApiReranker", "build_judge", "build_reranker", "provider_for", "shared_breaker", "shared_judge",
    "shared_rerank_api", "strategy_from_config", "strategy_settings",
    # Judging passages by position, and the orders made from a judgement.
    "Fused", "Judgement", "cascade_positions", "cheap_order", "check_fusion", "fallback_judgement", "fuse",
    "fuse_judgement", "judge_order", "judge_positions", "rerank_positions",
    # The strategy runner on documents with ids (/api/rerank), its types and errors.
    "Document", "DocumentTooLongError", "InvalidRerankInputError", "RerankError", "RerankOutcome",
    "RerankParseError", "RerankProviderError", "RerankResult", "RerankStrategyError", "TooManyDocumentsError",
    "TournamentPlanError", "documents_from_jsonl", "refuse_longer_than", "rerank",
    # Shared helpers: embedder cosines, a URL safe to log, a model answer without its reasoning.
    "cosines", "query_cosines", "redact_url", "strip_reasoning",
    # What an embedder embeds a text as: a query, or a stored text (e5's two prefixes).
    "PASSAGE_KIND", "QUERY_KIND", "STORED_TEXT_KIND", "embed_query",
    # The judge's prompt and its versions, for the benchmarks that measure them.
    "PASSAGE_CLOSE", "PASSAGE_OPEN", "PROMPT_VERSION", "QUERY_CLOSE", "QUERY_OPEN", "STRATEGY_PROMPT_VERSION",
    "TOP_LOGPROBS", "build_judge_messages", "escape_field", "parse_judge_prompt",
    "yes_no_from_text", "yes_probability",
]
