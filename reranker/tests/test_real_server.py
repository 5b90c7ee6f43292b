"""One real model: OllamaReranker, built from a RerankerConfig alone, reorders passages through
Graphiti's `rank` and keeps every one byte for byte."""

from __future__ import annotations

import asyncio

from graphiti_llm_rerank import OllamaReranker, RerankerConfig

QUERY = "Why was the drinking water of the town contaminated?"
PASSAGES = [
    "The town council meets on the first Monday of each month.",
    "Floodwater entered Well 4 through its cracked seal and contaminated the town's drinking water.",
    "  The bakery on Main Street sells rye bread.  ",
]


def test_the_local_model_puts_the_answer_first(local_llm, local_llm_config):
    reranker = OllamaReranker(RerankerConfig(base_url=local_llm, model=local_llm_config.local_llm_model,
                                             timeout_s=120.0, deadline_s=300.0))
    ranked = asyncio.run(reranker.rank(QUERY, PASSAGES))
    assert sorted(passage for passage, _ in ranked) == sorted(PASSAGES)  # byte for byte, each once
    assert ranked[0][0] == PASSAGES[1] and all(score > 0 for _, score in ranked)
    assert reranker.stats()["fallbacks"] == 0
