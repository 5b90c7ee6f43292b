"""Builds the LLM reranker from Config. Kept apart so the adapter stays free of reranker knobs.

RERANKER_STRATEGY=pointwise (the default) gives OllamaReranker; any other strategy gives a
StrategyReranker running it with its RERANKER_<KNOB> settings. Both use the process-wide judge
(app/services/rerank_resources.py), which /api/rerank shares.
"""

from __future__ import annotations

from graphiti_core.cross_encoder.client import CrossEncoderClient

from app.config import Config


def build_ollama_reranker(config: Config, embedder=None) -> CrossEncoderClient:
    from app.services.rerank_resources import adopt_judge, shared_judge

    if config.reranker_strategy != "pointwise":
        from app.rerank.strategies import strategy_from_config
        from app.services.strategy_reranker import StrategyReranker

        return StrategyReranker(
            strategy_from_config(config, embedder=embedder),
            shared_judge(config),
            deadline_s=config.reranker_deadline_s,
            context_tokens=config.reranker_context_tokens,
            breaker_threshold=config.reranker_breaker_threshold,
            breaker_cooldown_s=config.reranker_breaker_cooldown_s,
        )

    from app.services.ollama_reranker import OllamaReranker

    reranker = OllamaReranker(
        model=config.reranker_model,
        base_url=config.reranker_base_url,
        api_key=config.reranker_api_key,
        score_mode=config.reranker_score_mode,
        max_parallel=config.reranker_max_parallel,
        timeout_s=config.reranker_timeout_s,
        deadline_s=config.reranker_deadline_s,
        cache_size=config.reranker_cache_size,
        max_tokens=config.reranker_max_tokens,
        breaker_threshold=config.reranker_breaker_threshold,
        breaker_cooldown_s=config.reranker_breaker_cooldown_s,
        instructions=config.reranker_instructions,
    )
    adopt_judge(config, reranker.judge)  # /api/rerank shares its bound, cache and counters
    return reranker
