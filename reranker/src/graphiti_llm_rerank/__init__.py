"""LLM reranking for graphiti-core: a `CrossEncoderClient` that asks a chat model on any
OpenAI-compatible server (Ollama, llama.cpp, vLLM) how relevant each passage is.

    from graphiti_llm_rerank import OllamaReranker, RerankerConfig
    graphiti = Graphiti(uri, user, password, llm_client=..., embedder=...,
                        cross_encoder=OllamaReranker(RerankerConfig(base_url=..., model=...)))

What an app needs is here, at the top level (`__all__`, each name typed); the rest (the judge's
prompt, the strategies' parts, fusion's variants, each error subclass) stays importable from its
submodule for benchmarks and tests.

    reranker = build_reranker(config)                  # the config's provider, no I/O
    judgement = await rank_candidates(reranker, query, passages, first_scores, method=config.fusion, ...)
    for placed in judgement.order: placed.position, placed.score, placed.judge_score, placed.first_stage_score
    judgement.judged, judgement.fell_back, judgement.fallback_reason

`Judgement` is the one answer of judging passages by position, and once fused it carries the answer's
order; Graphiti's `rank` pairs are made from it at the edge. `rerank(query, documents, provider=judge,
strategy=...)` runs a strategy on documents with ids and answers a `RerankOutcome`; its failures are
`RerankError`s whose `code` says which. `Reranking.shared(config)` holds what an app shares between
graph search and a rerank endpoint (the judge, the breaker, the rerank-API client). `set_observer`
connects an app's metrics.

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
    # Building a reranker, and the process-wide pieces an app shares
    "OllamaReranker": "ollama_reranker", "build_reranker": "providers", "provider_for": "providers",
    "Reranking": "providers",
    # Judging first-stage candidates by position: the one result and how it is asked for
    "Judgement": "fusion", "Placed": "fusion", "judge_positions": "ollama_reranker",
    "rank_candidates": "ollama_reranker",
    # The strategy runner on documents with ids, its types and its one error type
    "rerank": "strategy_run", "RerankOutcome": "strategy_run", "Document": "types", "RerankResult": "types",
    "RerankError": "types",
    # Helpers an app shares: a URL safe to log, a model answer without its reasoning
    "redact_url": "judge", "strip_reasoning": "score_parsing",
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
    from graphiti_llm_rerank.fusion import Judgement, Placed
    from graphiti_llm_rerank.judge import redact_url
    from graphiti_llm_rerank.ollama_reranker import OllamaReranker, judge_positions, rank_candidates
    from graphiti_llm_rerank.providers import Reranking, build_reranker, provider_for
    from graphiti_llm_rerank.score_parsing import strip_reasoning
    from graphiti_llm_rerank.strategy_run import RerankOutcome, rerank
    from graphiti_llm_rerank.types import Document, RerankError, RerankResult
