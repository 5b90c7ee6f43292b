"""The graph API over a real embedded FalkorDB and the real local embedder."""

from __future__ import annotations

import io
import json

import pytest

from app.graph.loop import run_on_loop
from app.graph.runtime import GraphitiAdapter
from app.graph.store import facts_keyed
from tests.conftest import unique_graph_id
from tests.support.facts import WATER_FACTS


def _import(client, graph_id, facts=WATER_FACTS):
    response = client.post(f"/api/graph/{graph_id}/facts", json={"facts": facts})
    assert response.status_code == 201, response.get_json()
    return response.get_json()


def _search(client, graph_id, query, **extra):
    response = client.post(f"/api/graph/{graph_id}/search", json={"query": query, **extra})
    assert response.status_code == 200, response.get_json()
    return response.get_json()


def test_health_reports_the_wiring(client):
    body = client.get("/health").get_json()
    assert body["status"] == "ok"
    assert body["graph_backend"] == "falkordb" and body["graph_embedded"] is True
    assert body["embedder"] == "local"
    assert body["reranker"]["provider"] == "none"


def test_create_list_delete(client):
    gid = unique_graph_id()
    created = client.post("/api/graph", json={"graph_id": gid, "name": "Water"})
    assert created.status_code == 201 and created.get_json()["name"] == "Water"
    assert gid in [g["graph_id"] for g in client.get("/api/graph").get_json()["graphs"]]
    assert client.post("/api/graph", json={"graph_id": gid}).status_code == 409
    generated = client.post("/api/graph", json={}).get_json()["graph_id"]
    assert generated.startswith("g_")
    assert client.delete(f"/api/graph/{gid}").status_code == 200
    assert gid not in [g["graph_id"] for g in client.get("/api/graph").get_json()["graphs"]]
    assert client.get(f"/api/graph/{gid}/stats").status_code == 404


def test_import_answers_counts_and_stats_agree(client, graph_id):
    result = _import(client, graph_id)
    assert result["imported"] == len(WATER_FACTS)
    names = {f[k] for f in WATER_FACTS for k in ("source", "target")}
    assert result["entities"] == len(names) == result["entities_created"]
    stats = client.get(f"/api/graph/{graph_id}/stats").get_json()
    assert (stats["nodes"], stats["edges"]) == (len(names), len(WATER_FACTS))
    assert stats["historical_edges"] == 1  # the algae bloom has an invalid_at


def test_entities_are_matched_by_name_across_imports(client, graph_id):
    _import(client, graph_id, WATER_FACTS[:2])
    again = _import(client, graph_id, [WATER_FACTS[5]])  # Town Council -> Harbor Water Utility
    assert again["entities_created"] == 1  # only the Town Council is new
    stats = client.get(f"/api/graph/{graph_id}/stats").get_json()
    assert stats["nodes"] == 4


def test_search_finds_a_fact_by_keyword_and_by_meaning(client, graph_id):
    _import(client, graph_id)
    by_keyword = _search(client, graph_id, "sourdough", limit=3)
    assert by_keyword["edges"][0]["fact"] == "Harbor Bakery sells sourdough bread baked every morning"
    by_meaning = _search(client, graph_id, "who is in charge of drinking water supply?", limit=3)
    facts = [edge["fact"] for edge in by_meaning["edges"]]
    assert "Mara Lindqvist directs the Harbor Water Utility since 2019" in facts
    top = by_meaning["edges"][0]
    assert set(top) >= {"uuid", "fact", "score", "rank", "source", "target", "relation", "valid_at", "invalid_at"}
    assert [edge["rank"] for edge in by_meaning["edges"]] == [1, 2, 3]
    assert by_meaning["error"] is None


def test_search_nodes_and_both_scopes(client, graph_id):
    _import(client, graph_id)
    nodes = _search(client, graph_id, "Mara Lindqvist", scope="nodes", limit=2)
    assert nodes["edges"] == [] and nodes["nodes"][0]["name"] == "Mara Lindqvist"
    assert nodes["nodes"][0]["summary"].startswith("Engineer")
    both = _search(client, graph_id, "bakery", scope="both", limit=2)
    assert both["edges"] and both["nodes"]


def test_search_is_scoped_to_one_graph(client, graph_id):
    _import(client, graph_id)
    other = unique_graph_id()
    client.post("/api/graph", json={"graph_id": other})
    _import(client, other, [{"source": "Zed", "target": "Sourdough", "relation": "hates",
                             "fact": "Zed hates sourdough bread from any bakery"}])
    hits = _search(client, graph_id, "sourdough bread bakery", limit=20)["edges"]
    assert hits and all("Zed" not in hit["fact"] for hit in hits)
    other_hits = _search(client, other, "sourdough bread bakery", limit=20)["edges"]
    assert [hit["fact"] for hit in other_hits] == ["Zed hates sourdough bread from any bakery"]


def test_paged_reads_cover_everything_once(client, graph_id):
    _import(client, graph_id)
    seen = []
    for offset in range(0, 10, 3):
        page = client.get(f"/api/graph/{graph_id}/edges?offset={offset}&limit=3").get_json()
        assert page["total"] == len(WATER_FACTS)
        seen += [edge["uuid"] for edge in page["items"]]
    assert len(seen) == len(set(seen)) == len(WATER_FACTS)
    nodes = client.get(f"/api/graph/{graph_id}/nodes?limit=500").get_json()
    assert nodes["total"] == len(nodes["items"])


def test_one_node_with_its_edges(client, graph_id):
    _import(client, graph_id)
    nodes = client.get(f"/api/graph/{graph_id}/nodes?limit=100").get_json()["items"]
    utility = next(n for n in nodes if n["name"] == "Harbor Water Utility")
    body = client.get(f"/api/graph/{graph_id}/nodes/{utility['uuid']}").get_json()
    assert len(body["edges"]) == 3  # directs, operates, funds
    assert client.get(f"/api/graph/{graph_id}/nodes/no-such-node").status_code == 404


def test_jsonl_upload(client, graph_id):
    lines = "\n".join(json.dumps(fact) for fact in WATER_FACTS[:3]) + "\n\n"
    data = {"file": (io.BytesIO(lines.encode()), "facts.jsonl")}
    response = client.post(f"/api/graph/{graph_id}/facts", data=data, content_type="multipart/form-data")
    assert response.status_code == 201 and response.get_json()["imported"] == 3


def _error(response, status):
    assert response.status_code == status, (response.status_code, response.get_data(as_text=True))
    error = response.get_json()["error"]
    assert error["code"] and error["message"]
    return error


def test_a_broken_jsonl_line_is_named_and_nothing_is_stored(client, graph_id):
    lines = [json.dumps(WATER_FACTS[0]), "{not json", json.dumps(WATER_FACTS[1])]
    data = {"file": (io.BytesIO("\n".join(lines).encode()), "facts.jsonl")}
    error = _error(client.post(f"/api/graph/{graph_id}/facts", data=data, content_type="multipart/form-data"), 400)
    assert error["line"] == 2 and "line 2" in error["message"]
    assert client.get(f"/api/graph/{graph_id}/stats").get_json()["edges"] == 0


def test_an_invalid_fact_stores_nothing(client, graph_id):
    facts = [WATER_FACTS[0], WATER_FACTS[1], {"source": "A", "target": "B", "relation": "r", "fact": "  "}]
    error = _error(client.post(f"/api/graph/{graph_id}/facts", json={"facts": facts}), 422)
    assert error["position"] == 3 and "'fact' must not be empty" in error["message"]
    assert client.get(f"/api/graph/{graph_id}/stats").get_json()["edges"] == 0


@pytest.mark.parametrize(
    "body, status, fragment",
    [
        ({}, 400, "'query' is required"),
        ({"query": 42}, 400, "'query' must be a string"),
        ({"query": ""}, 400, "must not be empty"),
        ({"query": "   \n"}, 400, "must not be empty"),
        ({"query": "x" * 5000}, 413, "longer than"),
        ({"query": "water", "limit": -1}, 422, "'limit' must be between"),
        ({"query": "water", "limit": 10**6}, 422, "'limit' must be between"),
        ({"query": "water", "limit": "ten"}, 400, "'limit' must be an integer"),
        ({"query": "water", "limit": True}, 400, "'limit' must be an integer"),
        ({"query": "water", "scope": "everything"}, 422, "'scope' must be one of"),
        ([1, 2], 400, "must be an object"),
    ],
)
def test_bad_search_input(client, graph_id, body, status, fragment):
    error = _error(client.post(f"/api/graph/{graph_id}/search", json=body), status)
    assert fragment in error["message"]


@pytest.mark.parametrize(
    "facts, status, fragment",
    [
        (None, 400, "'facts' is required"),
        ("abc", 400, "must be a non-empty list"),
        ([], 400, "must be a non-empty list"),
        (["just text"], 422, "fact 1: must be a JSON object"),
        ([{"source": "A", "target": "B", "relation": "r"}], 422, "'fact' is required"),
        ([{"source": 1, "target": "B", "relation": "r", "fact": "f"}], 422, "'source' must be a string"),
        ([{"source": "A", "target": "B", "relation": "r", "fact": "f", "valid_at": "yesterday"}], 422, "ISO-8601"),
        ([{"source": "A", "target": "B", "relation": "r", "fact": "f", "source_labels": ["bad label"]}], 422,
         "identifiers"),
        ([{"source": "A", "target": "B", "relation": "r", "fact": "f\x00"}], 422, "NUL"),
    ],
)
def test_bad_fact_input(client, graph_id, facts, status, fragment):
    body = {} if facts is None else {"facts": facts}
    error = _error(client.post(f"/api/graph/{graph_id}/facts", json=body), status)
    assert fragment in error["message"]


def test_bad_requests_in_general(client, graph_id):
    assert _error(client.post("/api/graph/no_such_graph/search", json={"query": "x"}), 404)["code"] == "graph_not_found"
    # A path separator never reaches a graph id: the route itself does not match.
    assert _error(client.post("/api/graph/bad%2Fid/search", json={"query": "x"}), 404)["code"] == "not_found"
    assert _error(client.post("/api/graph/bad%20id/search", json={"query": "x"}), 400)["code"] == "invalid_graph_id"
    assert _error(client.post("/api/graph/a'b/facts", json={"facts": []}), 400)["code"] == "invalid_graph_id"
    _error(client.post(f"/api/graph/{graph_id}/search", data="query=x"), 415)
    _error(client.post(f"/api/graph/{graph_id}/search", data="{bad", content_type="application/json"), 400)
    nested = "[" * 100_000 + "]" * 100_000
    _error(client.post(f"/api/graph/{graph_id}/search", data=nested, content_type="application/json"), 400)
    _error(client.get(f"/api/graph/{graph_id}/edges?limit=0"), 422)
    _error(client.get(f"/api/graph/{graph_id}/edges?offset=-3"), 422)
    _error(client.get("/api/tasks/t_nothing"), 404)
    _error(client.get("/api/nothing-here"), 404)


def test_oversized_body_is_refused(backend, graph_id):
    _, client = backend(MAX_REQUEST_BYTES=4096)
    error = _error(client.post(f"/api/graph/{graph_id}/facts", json={"facts": [{"fact": "x" * 10_000}]}), 413)
    assert "larger than 4096 bytes" in error["message"]


def test_invalid_utf8_upload(client, graph_id):
    data = {"file": (io.BytesIO(b'{"source": "\xff\xfe"}'), "facts.jsonl")}
    error = _error(client.post(f"/api/graph/{graph_id}/facts", data=data, content_type="multipart/form-data"), 400)
    assert error["code"] == "invalid_utf8"


def test_episode_ingestion_reports_a_dead_llm_as_task_errors(backend, graph_id):
    import time

    _, client = backend(LLM_BASE_URL="http://127.0.0.1:9/v1", LLM_TIMEOUT_S=2)
    response = client.post(f"/api/graph/{graph_id}/episodes", json={"text": "Mara runs the water utility."})
    assert response.status_code == 202
    task_id = response.get_json()["task_id"]
    for _ in range(300):
        task = client.get(f"/api/tasks/{task_id}").get_json()
        if task["state"] in ("done", "failed"):
            break
        time.sleep(0.2)
    assert task["state"] == "failed"
    assert task["progress"] == {"chunks_done": 1, "chunks_total": 1}
    assert task["errors"] and task["errors"][0].startswith("chunk 1:")
    # Text ingestion gives facts random uuids: from its first attempt on, imports compare by entities.
    assert not run_on_loop(facts_keyed(GraphitiAdapter().runtime, graph_id), timeout=30)
