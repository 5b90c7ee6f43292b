"""The graph lifecycle under concurrent requests: create, import and delete of one graph are
ordered, concurrent imports share entities, an import is idempotent per (source, relation, target,
fact). Real app, real embedder, on both databases (the embedded FalkorDB and the real local Neo4j);
concurrency from threads, as the server's threaded workers serve."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.conftest import unique_graph_id
from tests.support.facts import WATER_FACTS


@pytest.fixture
def client(on_both_backends):
    return on_both_backends[1]

# Facts long enough that embedding a few hundred of them keeps an import busy for seconds here
# (and for a good fraction of a second on a fast machine), so a delete sent shortly after lands
# while the import is still running. Callers put the graph id in the prefix: the embedder keeps the
# vectors of texts it has seen, so facts imported before by another test would take no time.
_FILLER = "which the harbor district's quarterly inspection report describes in considerable detail"


def _facts(prefix: str, count: int, names: list[str] | None = None) -> list[dict]:
    facts = []
    for i in range(count):
        source, target = (names[i % len(names)], names[(i + 1) % len(names)]) if names else \
            (f"{prefix} source {i}", f"{prefix} target {i}")
        facts.append({"source": source, "target": target, "relation": "supplies",
                      "fact": f"{source} supplies {target} with part {prefix}-{i}, {_FILLER}"})
    return facts


def _stats(client, gid) -> dict:
    response = client.get(f"/api/graph/{gid}/stats")
    assert response.status_code == 200, response.get_json()
    return response.get_json()


def _create(client, gid):
    response = client.post("/api/graph", json={"graph_id": gid})
    assert response.status_code == 201, response.get_json()


def _import_then_delete_mid_way(client, gid, facts) -> tuple[dict, float, float]:
    """Start the import, delete the graph while it runs, re-create the id; answer the import's
    outcome and when the import and the delete finished."""
    outcome: dict = {}
    # The app's own worker starts at its first task: start it now, since the delete below is timed.
    _create(client, f"{gid}-warm")
    assert client.delete(f"/api/graph/{gid}-warm").status_code == 200

    def run_import():
        response = client.post(f"/api/graph/{gid}/facts", json={"facts": facts})
        outcome.update(status=response.status_code, body=response.get_json(), at=time.monotonic())

    worker = threading.Thread(target=run_import)
    worker.start()
    time.sleep(0.5)
    assert worker.is_alive(), "the import ended before the delete could be sent"
    assert client.delete(f"/api/graph/{gid}").status_code == 200
    deleted_at = time.monotonic()
    _create(client, gid)
    worker.join(timeout=300)
    assert not worker.is_alive()
    return outcome, outcome["at"], deleted_at


def test_a_graph_deleted_during_an_import_is_recreated_empty(client, graph_id):
    facts = _facts(f"new {graph_id}", 150)
    outcome, imported_at, deleted_at = _import_then_delete_mid_way(client, graph_id, facts)

    # Either the import was refused (the graph it was sent to is gone) or the delete waited for it.
    assert outcome["status"] in (201, 409), outcome
    if outcome["status"] == 409:
        assert outcome["body"]["error"]["code"] == "graph_changed"
    else:
        assert imported_at <= deleted_at
    stats = _stats(client, graph_id)
    assert (stats["nodes"], stats["edges"]) == (0, 0), "facts of the deleted graph leaked into its re-creation"


def test_an_import_over_existing_entities_never_claims_facts_it_did_not_store(client, graph_id):
    names = [f"Depot {i}" for i in range(12)]
    seed = client.post(f"/api/graph/{graph_id}/facts", json={"facts": _facts("seed", 12, names)})
    assert seed.status_code == 201
    facts = _facts(f"reuse {graph_id}", 200, names)  # every entity exists: the import writes edges only

    outcome, imported_at, deleted_at = _import_then_delete_mid_way(client, graph_id, facts)

    assert outcome["status"] in (201, 409), outcome
    if outcome["status"] == 201:  # said "imported: N": it must have been stored before the delete
        assert outcome["body"]["imported"] == len(facts) and imported_at <= deleted_at
    stats = _stats(client, graph_id)
    assert (stats["nodes"], stats["edges"]) == (0, 0)


def test_concurrent_imports_over_the_same_names_create_each_entity_once(client, graph_id):
    names = [f"Pump station {i}" for i in range(20)]
    batches = [_facts(f"batch{n}", 20, names) for n in range(6)]

    with ThreadPoolExecutor(len(batches)) as pool:
        responses = list(pool.map(
            lambda facts: client.post(f"/api/graph/{graph_id}/facts", json={"facts": facts}), batches))

    assert [r.status_code for r in responses] == [201] * len(batches), [r.get_json() for r in responses]
    bodies = [r.get_json() for r in responses]
    stats = _stats(client, graph_id)
    assert stats["nodes"] == len(names)
    assert sum(body["entities_created"] for body in bodies) == len(names)
    assert stats["edges"] == sum(body["imported"] for body in bodies) == sum(map(len, batches))


def test_concurrent_creates_of_one_id_give_one_201(client):
    gid = unique_graph_id("race")
    barrier = threading.Barrier(16)

    def create(_):
        barrier.wait()
        return client.post("/api/graph", json={"graph_id": gid})

    with ThreadPoolExecutor(16) as pool:
        responses = list(pool.map(create, range(16)))

    statuses = sorted(r.status_code for r in responses)
    assert statuses == [201] + [409] * 15, statuses
    assert all(r.get_json()["error"]["code"] == "graph_exists" for r in responses if r.status_code == 409)
    graphs = [g["graph_id"] for g in client.get("/api/graph").get_json()["graphs"]]
    assert graphs.count(gid) == 1


def test_an_import_is_idempotent_per_fact_and_counts_what_it_skipped(client, graph_id):
    first = client.post(f"/api/graph/{graph_id}/facts", json={"facts": WATER_FACTS + WATER_FACTS[:3]})
    assert first.status_code == 201
    assert first.get_json()["imported"] == len(WATER_FACTS)
    assert first.get_json()["skipped_duplicates"] == 3

    renamed_relation = dict(WATER_FACTS[0], relation="Directs")  # the same edge name once normalised
    new_fact = dict(WATER_FACTS[0], fact="Mara Lindqvist directs the utility's laboratory too")
    second = client.post(f"/api/graph/{graph_id}/facts",
                         json={"facts": WATER_FACTS + [renamed_relation, new_fact]})
    assert second.status_code == 201
    assert second.get_json()["imported"] == 1
    assert second.get_json()["skipped_duplicates"] == len(WATER_FACTS) + 1
    assert second.get_json()["entities_created"] == 0

    edges = client.get(f"/api/graph/{graph_id}/edges?limit=500").get_json()["items"]
    assert sorted(e["fact"] for e in edges) == sorted([f["fact"] for f in WATER_FACTS] + [new_fact["fact"]])
    # The same fact between other entities, or under another relation, is another fact.
    other = dict(WATER_FACTS[0], relation="founded")
    third = client.post(f"/api/graph/{graph_id}/facts", json={"facts": [other]}).get_json()
    assert (third["imported"], third["skipped_duplicates"]) == (1, 0)
