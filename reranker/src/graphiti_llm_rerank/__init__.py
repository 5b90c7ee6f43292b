"""LLM reranking for graphiti-core: a `CrossEncoderClient` that asks a chat model on any
OpenAI-compatible server (Ollama, llama.cpp, vLLM) how relevant each passage is.

    from graphiti_llm_rerank import OllamaReranker, RerankerConfig
    graphiti = Graphiti(uri, user, password, llm_client=..., embedder=...,
                        cross_encoder=OllamaReranker(RerankerConfig(base_url=..., model=...)))

What an app needs is here, at the top level; the rest (the judge's prompt, the strategies' parts,
fusion's variants) stays importable from its submodule for benchmarks and tests.

    reranker = build_reranker(config)                         # the config's provider, no I/O
    judgement = await judge_positions(reranker, query, passages)
    judgement.evidence, judgement.judged, judgement.fell_back, judgement.fallback_reason
    order = fuse_judgement(first_stage_scores, judgement, method=config.fusion)

`Judgement` is the one answer of judging passages by position: every model-backed reranker runs inside
the guard of `cross_encoder.py` (budget, deadline, breaker, fallback) and answers with one; Graphiti's
`rank` pairs are made from it at the edge. `rerank(query, documents, provider=judge, strategy=...)`
runs a strategy on documents with ids (`strategy_run.py`). `set_observer` connects an app's metrics.

Importing the package is cheap: each name loads its module on first use, so an app can read
`RerankerConfig.ALLOWED` for its settings without loading graphiti-core or the OpenAI client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from graphiti_llm_rerank.config import RerankerConfig
from graphiti_llm_rerank.observer import RerankObserver, set_observer

__version__ = "0.1.0"

# Each public name, by the module that defines it.
_LAZY = {
    # Building a reranker
    "OllamaReranker": "ollama_reranker", "RerankApiReranker": "rerank_api", "PassthroughReranker": "passthrough",
    "build_reranker": "providers", "provider_for": "providers",
    # The process-wide judge, rerank_api client and breaker a reranker shares with other callers
    "shared_judge": "providers", "shared_rerank_api": "providers", "shared_breaker": "providers",
    "strategy_from_config": "strategies.registry",
    # Judging passages by position, and the orders made from a judgement
    "Judgement": "judgement", "fallback_judgement": "judgement", "judge_positions": "cross_encoder",
    "Fused": "fusion", "fuse_judgement": "fusion", "judge_order": "fusion", "cheap_order": "fusion",
    "cascade_positions": "fusion",
    # The strategy runner on documents with ids, its types and errors
    "rerank": "strategy_run", "RerankOutcome": "strategy_run", "Document": "types", "RerankResult": "types",
    "documents_from_jsonl": "types", "refuse_longer_than": "types",
    "RerankError": "types", "RerankProviderError": "types", "RerankParseError": "types",
    "RerankStrategyError": "types", "InvalidRerankInputError": "types", "DocumentTooLongError": "types",
    "TooManyDocumentsError": "types", "TournamentPlanError": "types",
    # Helpers an app shares: a URL safe to log, a model answer without its reasoning
    "redact_url": "server_connection", "strip_reasoning": "score_parsing",
}

__all__ = ["RerankObserver", "RerankerConfig", "__version__", "set_observer", *_LAZY]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'graphiti_llm_rerank' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"graphiti_llm_rerank.{_LAZY[name]}"), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


if TYPE_CHECKING:  # what type checkers and IDEs see
    from graphiti_llm_rerank.cross_encoder import judge_positions
    from graphiti_llm_rerank.fusion import Fused, cascade_positions, cheap_order, fuse_judgement, judge_order
    from graphiti_llm_rerank.judgement import Judgement, fallback_judgement
    from graphiti_llm_rerank.ollama_reranker import OllamaReranker
    from graphiti_llm_rerank.passthrough import PassthroughReranker
    from graphiti_llm_rerank.providers import (
        build_reranker, provider_for, shared_breaker, shared_judge, shared_rerank_api,
    )
    from graphiti_llm_rerank.rerank_api import RerankApiReranker
    from graphiti_llm_rerank.score_parsing import strip_reasoning
    from graphiti_llm_rerank.server_connection import redact_url
    from graphiti_llm_rerank.strategies.registry import strategy_from_config
    from graphiti_llm_rerank.strategy_run import RerankOutcome, rerank
    from graphiti_llm_rerank.types import (
        Document, DocumentTooLongError, InvalidRerankInputError, RerankError, RerankParseError,
        RerankProviderError, RerankResult, RerankStrategyError, TooManyDocumentsError, TournamentPlanError,
        documents_from_jsonl, refuse_longer_than,
    )
