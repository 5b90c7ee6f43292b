"""Queries whose cost must not grow with the size of the graph: each must look its edges up
through the edge index. An import's check that its edges are stored once scanned every entity per
edge (quadratic: 1,000 facts into a 20,000-fact graph took minutes). Read from FalkorDB's own plan
of the query, on the app's real embedded server, so no timing is involved. The same indexed query
finds a keyed graph's stored facts by the uuids their keys give; a graph that also holds facts under
other uuids compares by entities, so it still finds them."""

from __future__ import annotations

import redis

from app.graph.fact_import import STORED_EDGES_QUERY, fact_uuid
from app.graph.loop import run_on_loop
from app.graph.runtime import GraphitiAdapter
from app.graph.search import FACT_VECTORS_QUERY
from app.graph.store import facts_keyed, graph_incarnation, unkey_facts
from tests.support.facts import WATER_FACTS


def plan(runtime, graph_id: str, query: str) -> list[str]:
    server = runtime.embedded_db
    client = redis.Redis(host=server.host, port=server.port)
    try:
        steps = client.execute_command("GRAPH.EXPLAIN", graph_id, 'CYPHER uuids=["a", "b"] ' + query)
    finally:
        client.close()
    return [step.decode().strip() if isinstance(step, bytes) else step.strip() for step in steps]


def test_the_stored_edge_check_reads_the_edge_index_not_every_entity(client, graph_id):
    assert client.post(f"/api/graph/{graph_id}/facts", json={"facts": WATER_FACTS}).status_code == 201
    steps = plan(GraphitiAdapter().runtime, graph_id, STORED_EDGES_QUERY)
    assert any(step.startswith("Edge By Index Scan") for step in steps), steps
    assert not any("Scan" in step and "Index" not in step for step in steps), steps


def test_the_neighbourhood_reads_stored_fact_vectors_through_the_edge_index(client, graph_id):
    # A search's neighbourhood ranks a hub's facts by their stored vectors: one indexed read.
    assert client.post(f"/api/graph/{graph_id}/facts", json={"facts": WATER_FACTS}).status_code == 201
    steps = plan(GraphitiAdapter().runtime, graph_id, FACT_VECTORS_QUERY)
    assert any(step.startswith("Edge By Index Scan") for step in steps), steps
    assert not any("Scan" in step and "Index" not in step for step in steps), steps


def _import(client, graph_id: str) -> dict:
    response = client.post(f"/api/graph/{graph_id}/facts", json={"facts": WATER_FACTS})
    assert response.status_code == 201, response.get_json()
    return response.get_json()


def test_an_import_finds_stored_facts_by_their_key_or_by_their_entities(client, graph_id):
    runtime = GraphitiAdapter().runtime
    assert _import(client, graph_id)["imported"] == len(WATER_FACTS)
    assert run_on_loop(facts_keyed(runtime, graph_id), timeout=30)
    incarnation = run_on_loop(graph_incarnation(runtime, graph_id), timeout=30)
    edges = client.get(f"/api/graph/{graph_id}/edges?limit=100").get_json()["items"]
    assert len(edges) == len(WATER_FACTS)
    for edge in edges:  # each stored under the uuid its key gives
        assert edge["uuid"] == fact_uuid(graph_id, incarnation,
                                         (edge["source"], edge["relation"], edge["target"], edge["fact"]))
    again = _import(client, graph_id)
    assert (again["imported"], again["skipped_duplicates"]) == (0, len(WATER_FACTS))

    # The same facts under other uuids, as text ingestion stores its facts: compared by their entities.
    driver = runtime.driver_for(graph_id)
    run_on_loop(driver.execute_query("MATCH ()-[e:RELATES_TO]->() SET e.uuid = e.uuid + '-other'"), timeout=30)
    run_on_loop(unkey_facts(runtime, graph_id), timeout=30)
    assert not run_on_loop(facts_keyed(runtime, graph_id), timeout=30)
    third = _import(client, graph_id)
    assert (third["imported"], third["skipped_duplicates"]) == (0, len(WATER_FACTS))
    assert client.get(f"/api/graph/{graph_id}/stats").get_json()["edges"] == len(WATER_FACTS)
