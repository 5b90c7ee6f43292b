"""Listwise and pairwise with the real local model (llama-server serving Qwen2.5-Coder) on a small set.

Small models rank poorly (FIELD-NOTES), so only the contract is asserted: a valid, complete ranking
whose strict run needed exactly the estimated number of calls (every answer parsed, no fallback).
The request timeout is generous: on a shared 2-core machine one call can wait minutes for a core.
"""

from __future__ import annotations

import asyncio

import pytest

from graphiti_llm_rerank.strategy_run import rerank
from graphiti_llm_rerank.judge import LLMJudge

pytestmark = pytest.mark.local_model

QUERY = "Who directs the town's water utility?"
PASSAGES = [
    "Harbor Bakery sells sourdough bread baked every morning.",
    "Mara Lindqvist directs the Harbor Water Utility since 2019.",
    "The Harbor Ferry connects the town to Harbor Island every hour.",
    "Harbor Water Utility operates the North Reservoir, the town's main drinking water source.",
]


@pytest.mark.parametrize("strategy, options", [("listwise", {}), ("pairwise", {"passes": 1})])
def test_real_model_gives_a_complete_ranking(local_llm, local_llm_config, strategy, options):
    judge = LLMJudge(model=local_llm_config.local_llm_model, base_url=local_llm, api_key=None, timeout_s=600)

    async def go():
        try:
            return await rerank(QUERY, PASSAGES, provider=judge, strategy=strategy, strict=True, **options)
        finally:
            await judge.aclose()

    outcome = asyncio.run(go())
    assert sorted(result.original_index for result in outcome.results) == list(range(len(PASSAGES)))
    assert [result.rank for result in outcome.results] == [1, 2, 3, 4]
    expected_calls = {"listwise": 1, "pairwise": 2 * 3}[strategy]
    assert outcome.calls == outcome.estimated_calls == expected_calls
    assert judge.stats()["model_requests"] == expected_calls
    assert outcome.stats["fallbacks"] == 0 and outcome.stats["completion_tokens"] > 0
