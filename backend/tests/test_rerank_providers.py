"""The provider registry (graphiti_llm_rerank/providers.py) and the edge to Graphiti (graphiti_llm_rerank/cross_encoder.py),
both through the `graphiti_llm_rerank` front door: every RERANKER_PROVIDER value has a builder, callers ask a
provider what it can do, and any cross encoder is judged by position. No network I/O."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from graphiti_core.cross_encoder.client import CrossEncoderClient

from app.config import RERANKER_PROVIDERS, RERANKER_PROVIDERS_WITH_OWN_KEY, Config
from graphiti_llm_rerank import OllamaReranker, build_reranker, judge_positions, provider_for
from graphiti_llm_rerank.passthrough import PassthroughReranker
from graphiti_llm_rerank.rerank_api import RerankApiReranker
from graphiti_llm_rerank.ollama_reranker import rerank_positions

PASSAGES = ["the mill", "the ferry", "the mill", "the harbor"]


def test_every_configured_provider_has_a_builder_and_none_else():
    assert [provider_for(name).name for name in RERANKER_PROVIDERS] == list(RERANKER_PROVIDERS)
    assert provider_for("OLLAMA").name == "ollama"
    assert set(RERANKER_PROVIDERS_WITH_OWN_KEY) <= set(RERANKER_PROVIDERS)
    with pytest.raises(ValueError, match=r"Unknown RERANKER_PROVIDER=cohere; allowed: \('ollama', 'rerank_api', 'none'\)"):
        provider_for("cohere")


@pytest.mark.parametrize("name, kind, judges, runs_strategy", [
    ("ollama", OllamaReranker, True, True),
    ("rerank_api", RerankApiReranker, True, False),
    ("none", PassthroughReranker, False, False),
])
def test_a_provider_says_what_it_builds_and_can_do(name, kind, judges, runs_strategy):
    config = dataclasses.replace(Config(), reranker_provider=name)
    provider = provider_for(config)
    assert isinstance(build_reranker(config), kind)
    assert (provider.judges, provider.runs_strategy) == (judges, runs_strategy)
    if judges:  # the breaker graph search's reranker uses is the one /api/rerank consults
        assert provider.breaker(config) is build_reranker(config).breaker
    else:
        with pytest.raises(ValueError, match="no circuit breaker"):
            provider.breaker(config)


def test_the_passthrough_judges_nothing_and_ranks_in_the_incoming_order():
    reranker = PassthroughReranker()
    judgement = asyncio.run(judge_positions(reranker, "q", PASSAGES))
    assert (judgement.candidates, judgement.judged, judgement.fell_back, judgement.reranked) == (4, 0, False, False)
    ranked = asyncio.run(reranker.rank("q", PASSAGES))
    assert [passage for passage, _ in ranked] == PASSAGES
    scores = [score for _, score in ranked]
    assert all(score > 0 for score in scores) and scores == sorted(scores, reverse=True) and len(set(scores)) == 4


class ReversingEncoder(CrossEncoderClient):
    """Someone else's cross encoder: it answers only (passage, score) pairs."""

    async def rank(self, query: str, passages: list[str]) -> list[tuple[str, float]]:
        return [(passage, float(index + 1)) for index, passage in enumerate(passages)][::-1]


def test_any_cross_encoder_is_judged_by_position_duplicates_kept():
    judgement = asyncio.run(judge_positions(ReversingEncoder(), "q", PASSAGES))
    # A text maps back to its first unclaimed position: both "the mill" candidates, each once.
    assert judgement.evidence == {3: 4.0, 0: 3.0, 1: 2.0, 2: 1.0}
    assert judgement.by_score is False and judgement.judged == 4 and not judgement.fell_back
    assert [position for position, _ in asyncio.run(rerank_positions(ReversingEncoder(), "q", PASSAGES))] == [3, 0, 1, 2]
    assert asyncio.run(rerank_positions(ReversingEncoder(), "q", [])) == []
