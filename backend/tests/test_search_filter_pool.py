"""A filter narrows the first stage before it cuts to its limit: the judge reads as many candidates of the
filtered set as it would of the whole graph, however far down the unfiltered order they lie. On both
databases, over real HTTP to the scripted judge; and the centre search's candidates, judged."""

from __future__ import annotations

import time

import pytest
from graphiti_core.search import search_utils

from app.graph.loop import run_on_loop
from app.graph.runtime import GraphitiAdapter, embedding_dimension
from app.graph.search_filters import SearchFilter, graphiti_filters, parse_filter, resolve_entity
from app.graph.search_hook import exact
from app.graph.vector_index import ensure_vector_index, index_state, nearest_passing_facts
from tests.conftest import unique_graph_id
from tests.support.scripted_llm import judge

QUERY = "inspector checks the pump station water pressure gauge"
# Thirty facts share most of the query's words; eight repairs share few, so on the whole graph they
# rank below all thirty.
NOISE = [{"source": f"Inspector {n}", "target": "Pump Station", "relation": "inspects",
          "fact": f"Inspector {n} checks the pump station water pressure gauge every week"} for n in range(1, 31)]
REPAIRS = [{"source": f"Crew {n}", "target": "Pump Station", "relation": "repairs",
            "fact": f"Crew {n} repaired a valve at the pump station"} for n in range(1, 9)]
REPAIR_TEXTS = {item["fact"] for item in REPAIRS}


@pytest.fixture(scope="module")
def pump_graphs():
    return {}


@pytest.fixture
def pump(on_both_backends, graph_backend, pump_graphs):
    app, client = on_both_backends
    key = graph_backend["GRAPH_BACKEND"]
    if key not in pump_graphs:
        graph_id = unique_graph_id("pump")
        graph = GraphitiAdapter(app.config["APP_CONFIG"]).graph
        graph.create(graph_id)
        graph.import_facts(graph_id, NOISE + REPAIRS)
        pump_graphs[key] = graph_id
    return app, pump_graphs[key]


def test_each_half_of_the_first_stage_gives_its_limit_of_the_filtered_set(pump):
    app, graph_id = pump
    adapter = GraphitiAdapter(app.config["APP_CONFIG"])
    driver = adapter.runtime.driver_for(graph_id)
    filters = graphiti_filters(parse_filter({"relation_types": ["repairs"]}), now=None)
    keyword = run_on_loop(search_utils.edge_fulltext_search(driver, QUERY, filters, [graph_id], 5), 60)
    assert len(keyword) == 5 and {edge.fact for edge in keyword} <= REPAIR_TEXTS
    vector = run_on_loop(search_utils.edge_similarity_search(
        driver, run_on_loop(adapter.runtime.graphiti.embedder.create(QUERY), 60), None, None, filters, [graph_id], 5,
    ), 60)
    assert len(vector) == 5 and {edge.fact for edge in vector} <= REPAIR_TEXTS
    if driver.provider.value == "neo4j":  # Graphiti's own keyword search filters the index's top 5: none pass
        assert run_on_loop(search_utils.edge_fulltext_search(exact(driver), QUERY, filters, [graph_id], 5), 60) == []


def judge_settings(llm) -> dict:
    llm.responder = judge(lambda query, passage: 0.9 if "valve" in passage else 0.1)
    return dict(RERANKER_PROVIDER="ollama", RERANKER_BASE_URL=llm.base_url, RERANKER_MODEL="judge-model",
                RERANKER_SCORE_MODE="logprobs", RERANKER_TIMEOUT_S=5, RERANKER_CACHE_SIZE=0, RERANKER_CANDIDATES=3)


def judged(llm) -> list[str]:
    return [body["messages"][-1]["content"] for body in llm.requests]


def test_a_filter_leaves_the_judge_as_many_candidates_as_the_whole_graph(backend, graph_backend, scripted_llm, pump):
    _, graph_id = pump
    app, client = backend(**graph_backend, **judge_settings(scripted_llm))
    whole = client.post(f"/api/graph/{graph_id}/search", json={"query": QUERY, "limit": 2}).get_json()
    assert whole["candidates"] == whole["judged"] == 6 == scripted_llm.count  # limit 2 x RERANKER_CANDIDATES 3
    assert not any(text in REPAIR_TEXTS for text in judged(scripted_llm))  # repairs rank below the inspections

    scripted_llm.reset()
    narrowed = client.post(f"/api/graph/{graph_id}/search",
                           json={"query": QUERY, "limit": 2, "relation_types": ["repairs"]}).get_json()
    assert narrowed["candidates"] == narrowed["judged"] == 6 == scripted_llm.count
    assert all(any(text in passage for text in REPAIR_TEXTS) for passage in judged(scripted_llm))
    assert [edge["relation"] for edge in narrowed["edges"]] == ["REPAIRS", "REPAIRS"]
    assert all(edge["rerank_score"] == pytest.approx(0.9, abs=1e-6) for edge in narrowed["edges"])

    # The neighbourhood's facts are filtered too: every fact of the pump station joins, the repairs only.
    scripted_llm.reset()
    around = client.post(f"/api/graph/{graph_id}/search", json={"query": QUERY, "limit": 2, "neighbourhood": 1,
                                                                "relation_types": ["repairs"]}).get_json()
    assert around["judged"] == scripted_llm.count == len(REPAIRS)  # 6 of the first stage, the other 2 around
    assert {text for text in REPAIR_TEXTS if any(text in passage for passage in judged(scripted_llm))} == REPAIR_TEXTS


def test_the_judge_weighs_the_facts_around_the_centre(backend, graph_backend, scripted_llm, pump):
    _, graph_id = pump
    app, client = backend(**graph_backend, **judge_settings(scripted_llm))
    answer = client.post(f"/api/graph/{graph_id}/search",
                         json={"query": QUERY, "limit": 3, "center": "Crew 4"}).get_json()
    # Crew 4's own fact is the only fact at the centre; the judge read it with facts one step away
    # (of the pump station), and every answer touches Crew 4 or its neighbour.
    assert answer["reranked"] and answer["judged"] == answer["candidates"] == scripted_llm.count > 1
    assert all("Pump Station" in (edge["source"], edge["target"]) for edge in answer["edges"])
    assert answer["edges"][0]["fact"] == "Crew 4 repaired a valve at the pump station"
    assert answer["edges"][0]["first_stage_rank"] == 1 and answer["edges"][0]["rerank_score"] > 0.5


def test_the_vector_index_answers_a_filtered_search_with_the_nearest_facts_that_pass(pump):
    app, graph_id = pump
    adapter = GraphitiAdapter(app.config["APP_CONFIG"])
    driver = exact(adapter.runtime.driver_for(graph_id))
    run_on_loop(ensure_vector_index(driver, embedding_dimension(app.config["APP_CONFIG"])), 60)
    vector = run_on_loop(adapter.runtime.graphiti.embedder.create(QUERY), 60)
    # A filter on a fact's ends takes the exact path (None), which reaches that entity's few facts through it.
    by_source = graphiti_filters(SearchFilter(), now=None, source_uuids=[_entity_uuid(driver, graph_id, "Crew 3")])
    assert run_on_loop(nearest_passing_facts(driver, vector, 5, 0.0, [graph_id], by_source), 60) is None
    for fields, expected in (({"relation_types": ["repairs"]}, 5),):
        filters = graphiti_filters(parse_filter({key: value for key, value in fields.items() if key != "source"}),
                                   now=None, source_uuids=[_entity_uuid(driver, graph_id, fields["source"])]
                                   if "source" in fields else None)
        exact_nearest = run_on_loop(search_utils.edge_similarity_search(driver, vector, None, None, filters,
                                                                        [graph_id], 5, 0.0), 60)
        for _ in range(300):  # the database builds the index in the background
            if run_on_loop(index_state(driver), 60) == "ready":
                break
            time.sleep(0.2)
        found = run_on_loop(nearest_passing_facts(driver, vector, 5, 0.0, [graph_id], filters), 60)
        assert [edge.uuid for edge in found] == [edge.uuid for edge in exact_nearest] and len(found) == expected


def _entity_uuid(driver, graph_id: str, name: str) -> str:
    return run_on_loop(resolve_entity(driver, graph_id, "source", name), 60)[0]
