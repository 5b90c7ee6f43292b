"""/api/rerank and the model's circuit breaker: the breaker is the model's, shared with graph search.
While it is open /api/rerank answers 503 with Retry-After at once and sends no model request; its
own failures open it too, for graph search as well. Real HTTP to the scripted model, real FalkorDB."""

from __future__ import annotations

import uuid

import pytest

from app.graph.runtime import GraphitiAdapter
from tests.conftest import unique_graph_id
from tests.support.facts import WATER_FACTS
from tests.support.scripted_llm import ScriptedLLMServer, always, judge, server_error
from tests.support.scripted_rerank_api import ScriptedRerankApi

QUERY = "harbor water utility reservoir town"
DOCS = ["Harbor Water Utility runs the North Reservoir", "Harbor Bakery sells bread", "The ferry runs hourly"]
COOLDOWN_S = 600  # never over during a test: the open state is what is checked


def breaker_settings(provider: str, base_url: str) -> dict:
    # A model name of its own per test: the process-wide judge, client and breaker are keyed by settings.
    # One request at a time: a failed call leaves no request of its own still on the way to the
    # server, so the server's count says exactly what each call sent.
    return dict(RERANKER_PROVIDER=provider, RERANKER_BASE_URL=base_url, RERANKER_MODEL=f"m-{uuid.uuid4().hex[:8]}",
                RERANKER_SCORE_MODE="logprobs", RERANKER_TIMEOUT_S=5, RERANKER_BREAKER_THRESHOLD=2,
                RERANKER_BREAKER_COOLDOWN_S=COOLDOWN_S, RERANKER_MAX_PARALLEL=1)


def rerank(client):
    return client.post("/api/rerank", json={"query": QUERY, "documents": DOCS})


def assert_breaker_open(response):
    assert response.status_code == 503, response.get_json()
    error = response.get_json()["error"]
    assert error["code"] == "reranker_unavailable" and "circuit breaker open" in error["message"]
    retry_after = int(response.headers["Retry-After"])
    assert 1 <= retry_after <= COOLDOWN_S and error["retry_after_s"] == retry_after


@pytest.fixture(scope="module")
def water_graph() -> dict:
    return {}


def water(client, stored) -> str:
    if "gid" not in stored:
        gid = unique_graph_id("brk")
        graph = GraphitiAdapter().graph
        graph.create(gid)
        graph.import_facts(gid, WATER_FACTS)
        stored["gid"] = gid
    return stored["gid"]


def test_failed_calls_open_the_breaker_and_then_no_request_reaches_the_model(backend):
    with ScriptedLLMServer(always(server_error())) as llm:
        _, client = backend(**breaker_settings("ollama", llm.base_url))
        assert [rerank(client).status_code for _ in range(2)] == [502, 502]
        sent = llm.count
        assert sent >= 2
        assert_breaker_open(rerank(client))
        assert_breaker_open(client.post("/api/rerank", json={"query": QUERY, "documents": DOCS, "strict": False}))
        assert llm.count == sent  # no model request while open
        assert client.get("/api/graph").status_code == 200  # starts the graph runtime and its reranker
        health = client.get("/health").get_json()["reranker"]["stats"]["breaker"]
        assert health["state"] == "open"  # the breaker graph search uses is the same one


def test_bad_requests_still_get_their_4xx_while_the_breaker_is_open(backend):
    with ScriptedLLMServer(always(server_error())) as llm:
        _, client = backend(**breaker_settings("ollama", llm.base_url))
        for _ in range(2):
            rerank(client)
        assert client.post("/api/rerank", json={"query": QUERY}).status_code == 400
        assert client.post("/api/rerank", json={"query": QUERY, "documents": DOCS, "strategy": "x"}).status_code == 422


def test_graph_search_failures_open_the_breaker_for_api_rerank(backend, water_graph):
    with ScriptedLLMServer(always(server_error())) as llm:
        _, client = backend(**breaker_settings("ollama", llm.base_url))
        gid = water(client, water_graph)
        for query in (QUERY, "bakery bread"):
            body = client.post(f"/api/graph/{gid}/search", json={"query": query, "limit": 3}).get_json()
            assert body["reranked"] is False  # the search fell back to the first stage
        sent = llm.count
        assert_breaker_open(rerank(client))
        assert llm.count == sent


def test_api_rerank_failures_open_the_breaker_for_graph_search(backend, water_graph):
    with ScriptedLLMServer(always(server_error())) as llm:
        _, client = backend(**breaker_settings("ollama", llm.base_url))
        gid = water(client, water_graph)
        assert [rerank(client).status_code for _ in range(2)] == [502, 502]
        sent = llm.count
        body = client.post(f"/api/graph/{gid}/search", json={"query": QUERY, "limit": 3}).get_json()
        assert body["reranked"] is False and llm.count == sent  # skipped: the breaker was already open
        assert client.get("/health").get_json()["reranker"]["stats"]["breaker_skips"] >= 1


def test_a_successful_call_closes_the_count_of_failures(backend):
    with ScriptedLLMServer(always(server_error())) as llm:
        _, client = backend(**breaker_settings("ollama", llm.base_url))
        assert rerank(client).status_code == 502
        llm.responder = judge(lambda query, passage: 0.9 if "Reservoir" in passage else 0.1)
        assert rerank(client).status_code == 200
        llm.responder = always(server_error())
        fresh = client.post("/api/rerank", json={"query": "another query", "documents": DOCS})  # not cached
        assert fresh.status_code == 502  # one failure after a success: still closed
        assert client.get("/api/graph").status_code == 200  # starts the graph runtime and its reranker
        breaker = client.get("/health").get_json()["reranker"]["stats"]["breaker"]
        assert breaker["state"] == "closed" and breaker["consecutive_failures"] == 1


def test_the_rerank_api_provider_answers_503_while_its_breaker_is_open(backend):
    with ScriptedRerankApi("cohere", responder=lambda request: server_error()) as api:
        _, client = backend(**breaker_settings("rerank_api", api.base_url))
        assert [rerank(client).status_code for _ in range(2)] == [502, 502]
        sent = api.count
        assert_breaker_open(rerank(client))
        assert api.count == sent
