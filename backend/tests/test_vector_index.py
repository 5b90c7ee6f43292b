"""The first stage's semantic half from FalkorDB's vector index (GRAPH_VECTOR_INDEX=on,
app/graph/vector_index.py), on the embedded FalkorDB with the in-process embedder: the index is made
with the graph, answers what the exact cosine answers, and a graph without a built index answers from
the exact path."""

from __future__ import annotations

import time

from graphiti_core.search import search_utils
from graphiti_core.search.search_filters import SearchFilters

from app.graph.loop import run_on_loop
from app.graph.runtime import GraphitiAdapter
from app.graph.vector_index import OPERATIONAL, VectorIndexSearch, exact, index_state, nearest_facts
from tests.conftest import unique_graph_id
from tests.support.facts import WATER_FACTS

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
    while (state := run_on_loop(index_state(driver), timeout=30)) != OPERATIONAL:
        assert time.monotonic() < deadline, f"index still {state!r}"
        time.sleep(0.2)


def _exact_nearest(driver, vector, limit):
    edges = run_on_loop(search_utils.edge_similarity_search(exact(driver), vector, None, None, SearchFilters(),
                                                            None, limit, search_utils.DEFAULT_MIN_SCORE), timeout=60)
    return [edge.uuid for edge in edges]


def test_the_index_is_made_with_the_graph_and_answers_the_exact_nearest_facts(backend):
    app, client = backend(GRAPH_VECTOR_INDEX="on", RERANKER_PROVIDER="none")
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
    app, client = backend(GRAPH_VECTOR_INDEX="on", RERANKER_PROVIDER="none")
    driver = GraphitiAdapter(app.config["APP_CONFIG"]).runtime.driver_for(gid)
    _wait_operational(driver)
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

    app, client = backend(GRAPH_VECTOR_INDEX="on", RERANKER_PROVIDER="none")
    driver = GraphitiAdapter(app.config["APP_CONFIG"]).runtime.driver_for(gid)
    assert run_on_loop(index_state(driver), timeout=30) is None
    first = [hit["uuid"] for hit in client.post(f"/api/graph/{gid}/search",
                                                json={"query": QUERY, "limit": 10}).get_json()["edges"]]
    assert first == before and not driver.search_interface.ready  # exact, while the index is made
    assert run_on_loop(index_state(driver), timeout=30) is not None
    _wait_operational(driver)
    again = [hit["uuid"] for hit in client.post(f"/api/graph/{gid}/search",
                                                json={"query": QUERY, "limit": 10}).get_json()["edges"]]
    assert again == before and driver.search_interface.ready
