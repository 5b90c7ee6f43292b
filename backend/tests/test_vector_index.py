"""The first stage's semantic half from the databases' vector indexes (GRAPH_VECTOR_INDEX=on,
app/graph/vector_index.py), with the in-process embedder: on the embedded FalkorDB the index answers
what the exact cosine answers, and a graph without a built index answers from the exact path; a graph
smaller than GRAPH_VECTOR_INDEX_MIN_FACTS answers exactly and gets no index, one that reaches it gets
one on its next search; on a real Neo4j, where one index holds every graph, another graph's nearer
facts do not push the graph's own out."""

from __future__ import annotations

import time

from graphiti_core.search import search_utils
from graphiti_core.search.search_filters import SearchFilters

from app.graph.loop import run_on_loop
from app.graph.runtime import GraphitiAdapter
from app.graph.search_hook import exact
from app.graph.vector_index import VectorIndexSearch, index_state, nearest_facts
from tests.conftest import unique_graph_id
from tests.support.facts import WATER_FACTS
from tests.support.graph_backends import neo4j_env

QUERY = "who supplies the town's drinking water"
TOPICS = ["the harbor", "the reservoir", "the bakery", "the council", "the school", "the ferry", "the mill",
          "the clinic", "the library", "the market"]


def _facts() -> list[dict]:
    # Distinct texts that share no word with QUERY: the keyword half has no ties to order arbitrarily.
    extra = [{"source": f"Person {i}", "target": TOPICS[i % len(TOPICS)], "relation": "WORKS_AT",
              "fact": f"Person {i} has worked at {TOPICS[i % len(TOPICS)]} since {1950 + i}, mostly on "
                      f"{['repairs', 'accounts', 'deliveries', 'planning', 'inventory'][i % 5]}."}
             for i in range(60)]
    return [*WATER_FACTS, *extra]


def _wait_operational(driver, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while (state := run_on_loop(index_state(driver), timeout=30)) != "ready":
        assert time.monotonic() < deadline, f"index still {state!r}"
        time.sleep(0.2)


def _exact_nearest(driver, vector, limit, group_ids=None):
    edges = run_on_loop(search_utils.edge_similarity_search(exact(driver), vector, None, None, SearchFilters(),
                                                            group_ids, limit, search_utils.DEFAULT_MIN_SCORE),
                        timeout=60)
    return [edge.uuid for edge in edges]


def test_the_index_is_made_with_the_graph_and_answers_the_exact_nearest_facts(backend):
    app, client = backend(GRAPH_VECTOR_INDEX="on", GRAPH_VECTOR_INDEX_MIN_FACTS=0, RERANKER_PROVIDER="none")
    adapter = GraphitiAdapter(app.config["APP_CONFIG"])
    gid = unique_graph_id("vec")
    assert client.post("/api/graph", json={"graph_id": gid}).status_code == 201
    driver = adapter.runtime.driver_for(gid)
    assert isinstance(driver.search_interface, VectorIndexSearch) and driver.search_interface.dimension == 384
    assert run_on_loop(index_state(driver), timeout=30) is not None  # created with the graph
    adapter.graph.import_facts(gid, _facts())
    _wait_operational(driver)

    vector = run_on_loop(adapter.runtime.graphiti.embedder.create(input_data=[QUERY]), timeout=60)
    by_index = [edge.uuid for edge in run_on_loop(nearest_facts(exact(driver), vector, 10,
                                                                search_utils.DEFAULT_MIN_SCORE), timeout=60)]
    exact_top = _exact_nearest(driver, vector, 10)
    assert len(by_index) == 10 and by_index == exact_top
    for k in (20, 40):  # deeper, as the hybrid first stage asks
        deeper = run_on_loop(nearest_facts(exact(driver), vector, k, search_utils.DEFAULT_MIN_SCORE), timeout=60)
        assert [edge.uuid for edge in deeper] == _exact_nearest(driver, vector, k)

    # Graphiti's min_score reads the cosine mapped onto [0, 1]; a floor that cuts the top 20 in two keeps
    # the same facts on both paths.
    rows = run_on_loop(exact(driver).execute_query(
        "MATCH ()-[e:RELATES_TO]->() RETURN e.uuid AS uuid, (2 - vec.cosineDistance(e.fact_embedding, vecf32($v))) / 2 "
        "AS score ORDER BY score DESC LIMIT 20", v=vector), timeout=30)[0]
    floor = (rows[9]["score"] + rows[10]["score"]) / 2
    cut = run_on_loop(nearest_facts(exact(driver), vector, 20, floor), timeout=60)
    assert [edge.uuid for edge in cut] == [row["uuid"] for row in rows[:10]]

    # Graph search through the hook gives the same first stage as without the index. Each runs on a
    # restarted database: right after an import the full-text index still holds replaced postings.
    _, plain_client = backend(GRAPH_VECTOR_INDEX="off", RERANKER_PROVIDER="none")
    without = [hit["uuid"] for hit in plain_client.post(f"/api/graph/{gid}/search",
                                                        json={"query": QUERY, "limit": 10}).get_json()["edges"]]
    app, client = backend(GRAPH_VECTOR_INDEX="on", GRAPH_VECTOR_INDEX_MIN_FACTS=0, RERANKER_PROVIDER="none")
    driver = GraphitiAdapter(app.config["APP_CONFIG"]).runtime.driver_for(gid)
    _wait_operational(driver)
    # The database rebuilt the index while loading the graph: FalkorDB's rebuilt index answers each
    # fact twice, and the nearest facts must still be the exact ones, as many as asked.
    for k in (10, 20, 40):
        reloaded = run_on_loop(nearest_facts(exact(driver), vector, k, search_utils.DEFAULT_MIN_SCORE), timeout=60)
        assert [edge.uuid for edge in reloaded] == _exact_nearest(driver, vector, k)
    with_index = [hit["uuid"] for hit in client.post(f"/api/graph/{gid}/search",
                                                     json={"query": QUERY, "limit": 10}).get_json()["edges"]]
    assert driver.search_interface.ready
    assert with_index == without and len(without) == 10


def test_a_graph_without_a_built_index_answers_from_the_exact_path_and_gets_one(backend):
    # A graph made with the index off (as every graph before the setting), searched with it on.
    app, client = backend(GRAPH_VECTOR_INDEX="off", RERANKER_PROVIDER="none")
    gid = unique_graph_id("vec")
    assert client.post("/api/graph", json={"graph_id": gid}).status_code == 201
    GraphitiAdapter(app.config["APP_CONFIG"]).graph.import_facts(gid, _facts())
    backend(GRAPH_VECTOR_INDEX="off", RERANKER_PROVIDER="none", RERANKER_CANDIDATES=3)  # a restart (see above)
    app, client = backend(GRAPH_VECTOR_INDEX="off", RERANKER_PROVIDER="none")
    before = [hit["uuid"] for hit in client.post(f"/api/graph/{gid}/search",
                                                 json={"query": QUERY, "limit": 10}).get_json()["edges"]]

    app, client = backend(GRAPH_VECTOR_INDEX="on", GRAPH_VECTOR_INDEX_MIN_FACTS=0, RERANKER_PROVIDER="none")
    driver = GraphitiAdapter(app.config["APP_CONFIG"]).runtime.driver_for(gid)
    assert run_on_loop(index_state(driver), timeout=30) is None
    first = [hit["uuid"] for hit in client.post(f"/api/graph/{gid}/search",
                                                json={"query": QUERY, "limit": 10}).get_json()["edges"]]
    assert first == before and not driver.search_interface.ready  # exact, while the index is made
    assert run_on_loop(index_state(driver), timeout=30) is not None
    _wait_operational(driver)
    again = [hit["uuid"] for hit in client.post(f"/api/graph/{gid}/search",
                                                json={"query": QUERY, "limit": 10}).get_json()["edges"]]
    assert driver.search_interface.ready and set(again) == set(before)
    # The same order as the exact path now, not as before the index: making it can reorder the keyword
    # half (seen here: two of its hits swapped, and stayed swapped after a restart).
    _, plain = backend(GRAPH_VECTOR_INDEX="off", RERANKER_PROVIDER="none")
    assert again == [hit["uuid"] for hit in plain.post(f"/api/graph/{gid}/search",
                                                       json={"query": QUERY, "limit": 10}).get_json()["edges"]]


def test_a_graph_below_the_threshold_answers_exactly_without_an_index_and_one_above_gets_one(backend):
    facts = _facts()  # 60 and some
    app, client = backend(GRAPH_VECTOR_INDEX="on", GRAPH_VECTOR_INDEX_MIN_FACTS=len(facts), RERANKER_PROVIDER="none")
    adapter = GraphitiAdapter(app.config["APP_CONFIG"])
    small, large = unique_graph_id("small"), unique_graph_id("large")
    for graph_id, count in ((small, len(facts) - 1), (large, len(facts))):
        assert client.post("/api/graph", json={"graph_id": graph_id}).status_code == 201
        adapter.graph.import_facts(graph_id, facts[:count])
        assert run_on_loop(index_state(adapter.runtime.driver_for(graph_id)), timeout=30) is None

    for graph_id, reads_index in ((small, False), (large, True)):
        driver = adapter.runtime.driver_for(graph_id)
        response = client.post(f"/api/graph/{graph_id}/search", json={"query": QUERY, "limit": 10})
        assert response.status_code == 200 and len(response.get_json()["edges"]) == 10
        # The first search past the threshold makes the index; below it, none is ever made.
        assert (run_on_loop(index_state(driver), timeout=30) is not None) is reads_index, graph_id
        if reads_index:
            _wait_operational(driver)
            again = client.post(f"/api/graph/{graph_id}/search", json={"query": QUERY, "limit": 10})
            assert again.status_code == 200 and len(again.get_json()["edges"]) == 10
        hook = driver.search_interface
        assert hook.min_facts == len(facts) and hook.ready is reads_index, graph_id


def test_on_neo4j_other_graphs_nearer_facts_do_not_crowd_out_the_graphs_own(backend, neo4j_server):
    app, client = backend(**neo4j_env(neo4j_server, GRAPH_VECTOR_INDEX="on", GRAPH_VECTOR_INDEX_MIN_FACTS=0, RERANKER_PROVIDER="none"))
    adapter = GraphitiAdapter(app.config["APP_CONFIG"])
    gid, crowd = unique_graph_id("vec"), unique_graph_id("crowd")
    for graph_id in (gid, crowd):
        assert client.post("/api/graph", json={"graph_id": graph_id}).status_code == 201
    adapter.graph.import_facts(gid, _facts())
    # Another graph full of facts about the query's own subject: nearer than most of the graph's.
    adapter.graph.import_facts(crowd, [
        {"source": f"Supplier {i}", "target": "the town", "relation": "SUPPLIES",
         "fact": f"Supplier {i} supplies the town's drinking water from well number {i}."} for i in range(120)])
    driver = adapter.runtime.driver_for(gid)
    assert isinstance(driver.search_interface, VectorIndexSearch)
    _wait_operational(driver)

    vector = run_on_loop(adapter.runtime.graphiti.embedder.create(input_data=[QUERY]), timeout=60)
    crowded = _exact_nearest(driver, vector, 40)  # every graph: the crowd fills the top
    own = _exact_nearest(driver, vector, 10, [gid])
    assert len(own) == 10 and not set(crowded[:10]) & set(own)
    # Neo4j's index ranks its quantized vectors: the hits it finds are scored again with the stored ones, and
    # it is asked for more while a fact it left out could still score above the cut, so the cut falls where
    # the exact path puts it: the same facts, not near-ties swapped at the cut (without the second rule the
    # limit of 40 lost one of them for each of these queries).
    for text in (QUERY, "planning at the council", "well number 7", "deliveries to the bakery"):
        query_vector = run_on_loop(adapter.runtime.graphiti.embedder.create(input_data=[text]), timeout=60)
        for limit in (10, 20, 40):
            found = run_on_loop(nearest_facts(exact(driver), query_vector, limit, search_utils.DEFAULT_MIN_SCORE,
                                              [gid]), timeout=60)
            expected = _exact_nearest(driver, query_vector, limit, [gid])
            assert len(found) == limit and {edge.uuid for edge in found} == set(expected), (text, limit)
    body = client.post(f"/api/graph/{gid}/search", json={"query": QUERY, "limit": 10}).get_json()
    assert driver.search_interface.ready and all(edge["uuid"] not in crowded for edge in body["edges"])
