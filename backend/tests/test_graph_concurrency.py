"""A bounded randomized concurrency test of the graph lifecycle: several clients interleave
create, import, re-import, search, delete and re-create on a few graph ids, against the real app on
each database (the embedded FalkorDB and the real local Neo4j), for a fixed number of steps. The operations are drawn from a seeded random
generator (the interleaving is the machine's); the seed is in the test id and the failure message.

Checked after every delete and at the end:
- no answer is a 5xx, and every answer is one the API documents for that operation;
- nothing of a deleted graph survives into its re-creation: every edge of a live graph was written
  after that graph was created;
- every fact is stored at most once; an acknowledged import's facts are all present or all absent
  (each batch of facts is stored whole or not at all), and all present when the import was sent
  after the live graph's creation had been acknowledged;
- nodes are exactly the distinct entity names the stored facts use.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

import pytest

from tests.conftest import unique_graph_id

SEEDS = (1313, 2024, 3)
CLIENTS = 5
STEPS = 30
GRAPHS = 3
NAMES = [f"Well {n}" for n in range(8)]  # few names: imports into one graph share entities
BATCH = 5
# A create for every delete, so that about as many graphs are re-created as deleted and imports
# mostly find a live graph; with fewer creates the graphs stay deleted and most imports answer 404.
OPERATIONS = ("create", "create", "import", "import", "reimport", "search", "search", "delete", "stats")
ALLOWED = {"create": {201, 409}, "import": {201, 404, 409}, "reimport": {201, 404, 409},
           "search": {200, 404}, "delete": {200, 202, 404}, "stats": {200, 404}}  # 202: a delete still running


@dataclass
class Batch:
    graph_id: str
    facts: list[dict]


@dataclass
class Import:
    batch: Batch
    sent_at: float
    status: int


@dataclass
class History:
    """What the clients were told, with when (monotonic clock) they asked and were answered."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    batches: list[Batch] = field(default_factory=list)
    imports: list[Import] = field(default_factory=list)
    creates: dict[str, list[float]] = field(default_factory=dict)  # graph id -> 201 answer times
    answers: list[tuple[str, int, dict]] = field(default_factory=list)


def _new_batch(rng: random.Random, graph_id: str, tag: str) -> Batch:
    facts = []
    for index in range(BATCH):
        source, target = rng.sample(NAMES, 2)
        facts.append({"source": source, "target": target, "relation": rng.choice(["feeds", "drains"]),
                      "fact": f"{graph_id}: {source} is linked to {target} ({tag}-{index})"})
    return Batch(graph_id, facts)


def _client_run(client, graph_ids: list[str], seed: int, history: History, name: str) -> None:
    rng = random.Random(seed)
    for step in range(STEPS):
        graph_id, operation = rng.choice(graph_ids), rng.choice(OPERATIONS)
        sent_at = time.monotonic()
        if operation == "create":
            response = client.post("/api/graph", json={"graph_id": graph_id})
            if response.status_code == 201:
                with history.lock:
                    history.creates.setdefault(graph_id, []).append(time.monotonic())
        elif operation in ("import", "reimport"):
            with history.lock:
                earlier = [b for b in history.batches if b.graph_id == graph_id]
            batch = rng.choice(earlier) if operation == "reimport" and earlier else \
                _new_batch(rng, graph_id, f"{name}-{step}")
            response = client.post(f"/api/graph/{graph_id}/facts", json={"facts": batch.facts})
            with history.lock:
                if batch not in history.batches:
                    history.batches.append(batch)
                history.imports.append(Import(batch, sent_at, response.status_code))
        elif operation == "search":
            response = client.post(f"/api/graph/{graph_id}/search", json={"query": rng.choice(NAMES), "limit": 5})
            if response.status_code == 200:  # only this graph's facts, never another's
                body = response.get_json()
                assert all(hit["fact"].startswith(f"{graph_id}: ") for hit in body["edges"]), body
        elif operation == "delete":
            response = client.delete(f"/api/graph/{graph_id}")
            if response.status_code == 200:
                _check_no_leftovers(client, graph_id)
        else:
            response = client.get(f"/api/graph/{graph_id}/stats")
        body = response.get_json()
        with history.lock:
            history.answers.append((operation, response.status_code, body))
        assert body is not None and response.status_code in ALLOWED[operation], (operation, response.status_code, body)


def _graph_created_at(client, graph_id: str) -> datetime | None:
    graphs = client.get("/api/graph").get_json()["graphs"]
    found = [g["created_at"] for g in graphs if g["graph_id"] == graph_id]
    assert len(found) <= 1, graphs
    return datetime.fromisoformat(found[0]) if found else None


def _edges(client, graph_id: str) -> list[dict] | None:
    response = client.get(f"/api/graph/{graph_id}/edges?limit=500")
    if response.status_code == 404:
        return None
    assert response.status_code == 200, response.get_json()
    return response.get_json()["items"]


def _check_no_leftovers(client, graph_id: str) -> None:
    """Right after a delete: the id is gone, or re-created holding only facts written since."""
    created_at = _graph_created_at(client, graph_id)
    edges = _edges(client, graph_id)
    if created_at is None or edges is None:
        return
    old = [e["fact"] for e in edges if datetime.fromisoformat(e["created_at"]) < created_at]
    assert old == [], f"facts of a deleted {graph_id} survived into its re-creation"


def _check_final(client, graph_id: str, history: History) -> None:
    created_at = _graph_created_at(client, graph_id)
    edges = _edges(client, graph_id)
    if created_at is None or edges is None:
        return
    _check_no_leftovers(client, graph_id)
    stored = Counter(e["fact"] for e in edges)
    assert [fact for fact, count in stored.items() if count > 1] == [], "a fact is stored twice"

    live_since = max(history.creates[graph_id])  # the acknowledged creation of the live graph
    for done in (i for i in history.imports if i.batch.graph_id == graph_id and i.status == 201):
        present = [f["fact"] in stored for f in done.batch.facts]
        assert all(present) or not any(present), f"a batch of {graph_id} is stored in part: {present}"
        if done.sent_at > live_since:
            assert all(present), f"an import acknowledged by the live {graph_id} lost facts"
    sent = {f["fact"] for b in history.batches if b.graph_id == graph_id for f in b.facts}
    assert set(stored) <= sent

    nodes = client.get(f"/api/graph/{graph_id}/nodes?limit=500").get_json()["items"]
    names_used = {e[key] for e in edges for key in ("source", "target")}
    assert sorted(n["name"] for n in nodes) == sorted(names_used), "nodes are not the distinct entity names"


@pytest.fixture
def client(on_both_backends):
    return on_both_backends[1]


@pytest.mark.parametrize("seed", SEEDS)
def test_interleaved_lifecycle_keeps_the_invariants(client, seed):
    graph_ids = [unique_graph_id(f"mix{n}") for n in range(GRAPHS)]
    history = History()
    for graph_id in graph_ids[:2]:  # two graphs start out existing, one does not
        assert client.post("/api/graph", json={"graph_id": graph_id}).status_code == 201
        history.creates[graph_id] = [time.monotonic()]
    errors: list[BaseException] = []

    def run(index: int):
        try:
            _client_run(client, graph_ids, seed * 100 + index, history, f"c{index}")
        except BaseException as error:  # reported below with the seed
            errors.append(error)

    workers = [threading.Thread(target=run, args=(index,)) for index in range(CLIENTS)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=600)
    assert not any(worker.is_alive() for worker in workers), f"seed {seed}: a client hangs"
    assert not errors, f"seed {seed}: {errors[0]!r}"
    assert all(status < 500 for _, status, _ in history.answers)
    for graph_id in graph_ids:
        _check_final(client, graph_id, history)
    # The run did exercise the lifecycle: facts stored and graphs deleted (and created again).
    statuses = Counter((operation, status) for operation, status, _ in history.answers)
    assert statuses[("import", 201)] + statuses[("reimport", 201)] >= 5, statuses
    assert statuses[("delete", 200)] >= 2 and statuses[("create", 201)] >= 1, statuses
