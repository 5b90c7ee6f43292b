"""The default graph search (pointwise OllamaReranker) honours the same size limits as the pointwise
strategy on /api/rerank: passages cut to RERANKER_MAX_DOCUMENT_CHARS inside the prompt, and a prompt
larger than RERANKER_CONTEXT_TOKENS refused before any model request. Real FalkorDB, real HTTP."""

from __future__ import annotations

import logging

from app.graph.runtime import GraphitiAdapter
from tests.conftest import unique_graph_id
from tests.support.scripted_llm import judge
from tests.support.scripted_llm_replies import ChatRequest

LONG_FACT = "The Harbor reservoir dam " + "was inspected and found sound after the storm, " * 40
FACTS = [
    {"source": "Harbor Reservoir", "target": "Harbor Dam", "relation": "held_by", "fact": LONG_FACT.strip()},
    {"source": "Harbor Town", "target": "Harbor Reservoir", "relation": "drinks_from",
     "fact": "Harbor Town drinks from the Harbor reservoir"},
]
QUERY = "harbor reservoir dam"


def _graph() -> str:
    gid = unique_graph_id()
    graph = GraphitiAdapter().graph
    graph.create(gid)
    graph.import_facts(gid, FACTS)
    return gid


def _backend(backend, llm, **settings):
    return backend(RERANKER_PROVIDER="ollama", RERANKER_BASE_URL=llm.base_url, RERANKER_MODEL="judge-model",
                   RERANKER_SCORE_MODE="logprobs", RERANKER_TIMEOUT_S=5, **settings)


def test_graph_search_cuts_passages_to_max_document_chars(backend, scripted_llm, client):
    gid = _graph()
    scripted_llm.responder = judge(lambda query, passage: 0.9 if passage.startswith("The Harbor reservoir") else 0.2)
    _, api = _backend(backend, scripted_llm, RERANKER_MAX_DOCUMENT_CHARS=60)
    body = api.post(f"/api/graph/{gid}/search", json={"query": QUERY, "limit": 2}).get_json()

    sent = [ChatRequest(index=i, body=body, headers={}).passage for i, body in enumerate(scripted_llm.requests)]
    assert LONG_FACT.strip()[:60] in sent and all(len(passage) <= 60 for passage in sent)
    # The caller still gets the whole fact, byte for byte, ranked by the judge's score of its cut text.
    assert body["reranked"] is True and body["edges"][0]["fact"] == LONG_FACT.strip()


def test_graph_search_refuses_a_prompt_larger_than_the_context(backend, scripted_llm, client, caplog):
    gid = _graph()
    scripted_llm.responder = judge(lambda query, passage: 0.5)
    _, api = _backend(backend, scripted_llm, RERANKER_CONTEXT_TOKENS=256, RERANKER_MAX_DOCUMENT_CHARS=5000)
    with caplog.at_level(logging.WARNING):
        body = api.post(f"/api/graph/{gid}/search", json={"query": QUERY, "limit": 2}).get_json()

    assert scripted_llm.count == 0  # refused before any model request
    assert body["reranked"] is False and body["error"] is None and len(body["edges"]) == 2
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and r.name.startswith("graphiti_llm_rerank")]
    assert len(warnings) == 1 and "DocumentTooLongError" in warnings[0].getMessage()
