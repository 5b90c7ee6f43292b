"""Queries whose cost must not grow with the size of the graph: each must look its edges up
through the edge index. An import's check that its edges are stored once scanned every entity per
edge (quadratic: 1,000 facts into a 20,000-fact graph took minutes). Read from FalkorDB's own plan
of the query, on the app's real embedded server, so no timing is involved."""

from __future__ import annotations

import redis

from app.graph.fact_import import STORED_EDGES_QUERY
from app.graph.runtime import GraphitiAdapter
from app.graph.search import FACT_VECTORS_QUERY
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
