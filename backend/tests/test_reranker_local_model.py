"""The real local model as the judge, through the full adapter search (config -> factory ->
OllamaReranker -> graph search), in both score modes."""

from __future__ import annotations

import pytest

from app.config import Config
from app.graph.runtime import GraphitiAdapter
from tests.conftest import unique_graph_id

RELEVANT = "Mara Lindqvist directs the Harbor Water Utility, which supplies the town's drinking water"
# Irrelevant to the question, but sharing its words, so the first stage ranks them high.
DISTRACTORS = [
    "The Harbor Water Polo Club trains in the town pool on Tuesdays",
    "Water Street Bakery sells bread to the town's cafes",
    "The town's drinking fountain on Harbor Square was painted green",
]
QUESTION = "Who runs the town's drinking water utility?"


@pytest.fixture
def distractor_graph(client):
    graph = GraphitiAdapter().graph
    gid = unique_graph_id("lm")
    graph.create(gid)
    facts = [{"source": "Mara Lindqvist", "target": "Harbor Water Utility", "relation": "directs", "fact": RELEVANT}]
    facts += [{"source": f"Thing {i}", "target": "Town", "relation": "near", "fact": text}
              for i, text in enumerate(DISTRACTORS)]
    graph.import_facts(gid, facts)
    return gid


@pytest.mark.parametrize("score_mode", ["logprobs", "graded", "json"])
def test_the_relevant_fact_outranks_keyword_distractors(backend, local_llm, local_llm_config, distractor_graph,
                                                        score_mode):
    backend(RERANKER_PROVIDER="ollama", RERANKER_BASE_URL=local_llm, RERANKER_MODEL=local_llm_config.local_llm_model,
            RERANKER_SCORE_MODE=score_mode,
            # Margins for a shared 2-core CPU: under load the server evaluated 2-6 prompt tokens/s (a loaded
            # suite run saw a 120 s request time out); on a quiet machine a request takes about a second.
            RERANKER_TIMEOUT_S=900, RERANKER_DEADLINE_S=1800, SEARCH_TIMEOUT_S=2000)
    outcome = GraphitiAdapter().graph.search(distractor_graph, QUESTION, limit=2)
    stats = GraphitiAdapter().runtime.reranker.stats()
    assert outcome.error is None and outcome.reranked
    assert outcome.edges[0].fact == RELEVANT, [(hit.fact, hit.rerank_score) for hit in outcome.edges]
    # The default fusion put it first, and on the judge's own evidence too, not only the first stage's.
    assert outcome.fusion == Config().reranker_fusion
    assert outcome.edges[0].rerank_score > outcome.edges[1].rerank_score
    # Real model answers, no fallback: every candidate was scored by the model in the asked mode.
    assert stats["fallbacks"] == 0 and stats["passage_failures"] == 0
    assert stats["score_mode_in_use"] == score_mode and stats["model_requests"] == 4
