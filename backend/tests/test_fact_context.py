"""RERANKER_FACT_CONTEXT: what the judge reads of a graph fact. Real FalkorDB, real HTTP to a scripted judge."""

from __future__ import annotations

from app.graph.runtime import GraphitiAdapter
from tests.conftest import unique_graph_id
from tests.support.scripted_llm import judge
from tests.support.scripted_llm_replies import ChatRequest

# The second fact leans on its source entity: alone, it does not say who resigned.
FACTS = [
    {"source": "Harbor Town", "target": "Harbor Reservoir", "relation": "drinks_from",
     "fact": "Harbor Town drinks from the Harbor reservoir"},
    {"source": "Tom Akers", "target": "Harbor Water Board", "relation": "left",
     "fact": "He resigned from the water board in 2019"},
]
QUERY = "who resigned from the Harbor water board"


def _search(backend, scripted_llm, **settings) -> tuple[str, dict, list[str]]:
    gid = unique_graph_id()
    graph = GraphitiAdapter().graph
    graph.create(gid)
    graph.import_facts(gid, FACTS)
    scripted_llm.responder = judge(lambda query, passage: 0.9 if passage.startswith("Tom Akers: ") else 0.1)
    _, api = backend(RERANKER_PROVIDER="ollama", RERANKER_BASE_URL=scripted_llm.base_url, RERANKER_MODEL="judge-model",
                     RERANKER_SCORE_MODE="logprobs", RERANKER_TIMEOUT_S=5, **settings)
    body = api.post(f"/api/graph/{gid}/search", json={"query": QUERY, "limit": 2}).get_json()
    sent = [ChatRequest(index=i, body=request, headers={}).passage for i, request in enumerate(scripted_llm.requests)]
    return gid, body, sent


def test_the_judge_reads_a_fact_after_its_source_entity_and_the_answer_keeps_the_fact(backend, scripted_llm, client):
    gid, body, sent = _search(backend, scripted_llm, RERANKER_FACT_CONTEXT="source")

    assert sorted(sent) == sorted(f"{fact['source']}: {fact['fact']}" for fact in FACTS)
    # The judge's verdict on the named fact leads; the answer holds the facts as stored, with their entities.
    first = body["edges"][0]
    assert body["reranked"] is True and first["fact"] == FACTS[1]["fact"] and first["source"] == "Tom Akers"
    assert {edge["fact"] for edge in body["edges"]} == {fact["fact"] for fact in FACTS}
    # What a benchmark replays from keeps the facts as stored: their cosine is the stored vectors'.
    trace = GraphitiAdapter().graph.search(gid, QUERY, limit=2).trace["edges"]
    assert sorted(trace.passages) == sorted(fact["fact"] for fact in FACTS)


def test_by_default_the_judge_reads_the_fact_alone(backend, scripted_llm, client):
    _, body, sent = _search(backend, scripted_llm)

    assert sorted(sent) == sorted(fact["fact"] for fact in FACTS)
    assert body["reranked"] is True and {edge["rerank_score"] for edge in body["edges"]} == {0.1}
