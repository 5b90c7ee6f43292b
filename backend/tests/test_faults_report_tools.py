"""Faults under the report tools, over HTTP (`POST /api/report/<graph>/tools/<tool>`), with the
scripted server as both the judge and the chat LLM: each tool still answers within its deadline,
keeps the first-stage order where the reranker failed, loses and duplicates nothing, logs one
reranker WARNING per failed rank call, and /health counts the fallbacks. When the server comes back
the same runtime reranks again."""

from __future__ import annotations

import logging
import time

import pytest

from app.graph import runtime as graphiti_adapter
from app.report.results import DONT_KNOW
from tests.conftest import unique_graph_id
from tests.support.facts import WATER_FACTS
from tests.support.scripted_llm import ScriptedLLMServer, always, hang, judge, server_error, when

QUERY = "harbor water utility reservoir town"
TIMEOUT_S, DEADLINE_S, LLM_TIMEOUT_S = 1, 3, 1
MARGIN_S = 2.0
JUDGE_ORDER = sorted(fact["fact"] for fact in WATER_FACTS)

# arguments, searches made, rank calls made (scope "both" ranks edges and nodes), chat LLM calls
TOOLS = {
    "search_graph": ({"query": QUERY, "limit": 4}, 1, 2, 0),
    "insight_forge": ({"question": QUERY, "limit": 4}, 1, 1, 1),  # the failed split searches the question alone
    "panorama_search": ({"query": QUERY, "limit": 4}, 1, 2, 0),
    "interview_entities": ({"topic": QUERY, "questions": ["What do you look after?"], "max_entities": 2,
                            "limit": 4}, 1, 2, 2),
}


@pytest.fixture(scope="module")
def llm():
    with ScriptedLLMServer() as server:
        yield server


@pytest.fixture(scope="module")
def water_graph():
    return {}


@pytest.fixture
def faulty_client(backend, llm, water_graph):
    app, client = backend(
        RERANKER_PROVIDER="ollama", RERANKER_BASE_URL=llm.base_url, RERANKER_MODEL="judge-model",
        RERANKER_SCORE_MODE="logprobs", RERANKER_TIMEOUT_S=TIMEOUT_S, RERANKER_DEADLINE_S=DEADLINE_S,
        RERANKER_BREAKER_THRESHOLD=1000, RERANKER_CACHE_SIZE=0,
        RERANKER_FUSION="none",  # the judge's own order: these tests check failure handling, not fusion
        RERANKER_PASSAGE_TIME="off",  # the scripted judge knows the facts by their text
        LLM_BASE_URL=llm.base_url, LLM_MODEL_NAME="chat-model", LLM_TIMEOUT_S=LLM_TIMEOUT_S,
    )
    graphiti_adapter.GraphitiAdapter(app.config["APP_CONFIG"]).runtime  # /health shows stats once built
    if "id" not in water_graph:
        gid = unique_graph_id("rfaults")
        assert client.post("/api/graph", json={"graph_id": gid}).status_code == 201
        assert client.post(f"/api/graph/{gid}/facts", json={"facts": WATER_FACTS}).status_code == 201
        water_graph["id"] = gid
    return client, water_graph["id"]


def _fallbacks(client) -> int:
    return client.get("/health").get_json()["reranker"]["stats"]["fallbacks"]


def _ranked_items(tool: str, result: dict) -> list[dict]:
    """Every fact and entity of the result that came from a search (has a rank)."""
    if tool == "panorama_search":
        items = result["current_facts"] + result["historical_facts"] + result["entities"]
    elif tool == "interview_entities":
        items = [fact for interview in result["interviews"] for fact in interview["facts"]]
    else:
        items = result["facts"] + result.get("entities", [])
    return [item for item in items if item.get("rank") is not None]


def _assert_nothing_lost_or_doubled(tool: str, result: dict) -> None:
    if tool == "panorama_search":
        facts = [fact["fact"] for fact in result["current_facts"] + result["historical_facts"]]
        assert sorted(facts) == JUDGE_ORDER  # every stored fact, once
        names = [entity["name"] for entity in result["entities"]]
        assert len(names) == len(set(names)) == result["total_nodes"]
    elif tool == "interview_entities":
        for interview in result["interviews"]:
            uuids = [fact["uuid"] for fact in interview["facts"]]
            assert len(uuids) == len(set(uuids)) and uuids
    else:
        uuids = [fact["uuid"] for fact in result["facts"]]
        assert len(uuids) == len(set(uuids)) and uuids


@pytest.mark.parametrize("fault", ["server_error", "hang"])
@pytest.mark.parametrize("tool", list(TOOLS))
def test_report_tool_answers_in_first_stage_order_when_the_model_fails(faulty_client, llm, caplog, tool, fault):
    client, gid = faulty_client
    arguments, searches, rank_calls, llm_calls = TOOLS[tool]
    llm.responder = always({"server_error": server_error(), "hang": hang()}[fault])
    before = _fallbacks(client)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING):
        response = client.post(f"/api/report/{gid}/tools/{tool}", json=arguments)
    elapsed = time.monotonic() - started

    assert response.status_code == 200, response.get_data(as_text=True)
    result = response.get_json()["result"]
    assert elapsed < searches * DEADLINE_S + llm_calls * LLM_TIMEOUT_S + MARGIN_S
    ranked = _ranked_items(tool, result)
    assert ranked and all(item["rank"] == item["first_stage_rank"] for item in ranked)
    _assert_nothing_lost_or_doubled(tool, result)
    reranker_warnings = [r for r in caplog.records
                         if r.levelno == logging.WARNING and r.name == "graphiti_llm_rerank.ollama_reranker"]
    assert len(reranker_warnings) == rank_calls
    assert _fallbacks(client) - before == rank_calls
    if tool == "insight_forge":
        assert result["sub_queries"] == [QUERY] and "split failed" in result["errors"][0]
    if tool == "interview_entities":
        assert result["interviews"] and all(i["error"] and i["answers"][0]["answer"] == DONT_KNOW
                                            for i in result["interviews"])


def _recovered_judge(query: str, passage: str) -> float:
    return 0.9 - 0.1 * JUDGE_ORDER.index(passage) if passage in JUDGE_ORDER else 0.05


def test_report_tools_rerank_again_once_the_server_recovers(faulty_client, llm):
    client, gid = faulty_client
    llm.responder = always(server_error())
    failed = client.post(f"/api/report/{gid}/tools/search_graph", json={"query": QUERY, "limit": 8}).get_json()
    assert all(f["rank"] == f["first_stage_rank"] for f in failed["result"]["facts"])
    assert failed["result"]["reranked"] is False  # the judge failed: the order is the first stage's

    llm.responder = when(lambda request: request.judge_fields is None, '{"sub_queries": []}',
                         otherwise=judge(_recovered_judge))
    body = client.post(f"/api/report/{gid}/tools/search_graph", json={"query": QUERY, "limit": 8}).get_json()
    facts = [fact["fact"] for fact in body["result"]["facts"]]
    assert facts == JUDGE_ORDER  # the judge's order, not the first stage's
    assert body["result"]["reranked"] is True
