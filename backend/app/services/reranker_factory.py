"""Builds the LLM reranker from Config. Kept apart so the adapter stays free of reranker knobs."""

from __future__ import annotations

from graphiti_core.cross_encoder.client import CrossEncoderClient

from app.config import Config


def build_ollama_reranker(config: Config, embedder=None) -> CrossEncoderClient:
    from app.services.ollama_reranker import OllamaReranker

    return OllamaReranker(
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
