"""Several app processes on one database, as gunicorn workers or replicas run: on a shared FalkorDB
(FALKORDB_URL) and on the real local Neo4j.

Two `flask serve` processes with their own DATA_DIR share one database. Their imports, deletes and
re-creates of the same graphs interleave; one of them is killed -9 in the middle of an import and
started again. What must hold throughout: every acknowledged fact of a live graph is stored once,
nothing of a deleted graph comes back in its re-creation, a graph's entities are its distinct names,
nothing pending is left behind, and no request gets a 5xx.
"""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import redis
from neo4j import GraphDatabase

from app.graph.embedded_falkordb import EmbeddedFalkorDB
from app.graph.store import REGISTRY_GRAPH
from tests.conftest import unique_graph_id
from tests.support.app_process import AppProcess, call
from tests.support.graph_backends import BACKENDS, neo4j_env

LEASE_S = "4"  # short, so a killed holder's locks free up within the test


@pytest.fixture(scope="module", params=BACKENDS)
def database(request, tmp_path_factory):
    """One database for two app processes, and direct reads of what it holds."""
    if request.param == "neo4j":
        server = request.getfixturevalue("neo4j_server")
        driver = GraphDatabase.driver(server.uri, auth=("neo4j", server.password))

        def rows(query: str, **params) -> list[dict]:
            return [record.data() for record in driver.execute_query(query, params).records]

        def entity_names(gid: str) -> list[str]:
            return [r["name"] for r in rows("MATCH (n:Entity {group_id: $g}) RETURN n.name AS name", g=gid)]

        def pending(gid: str) -> int:
            return rows("MATCH (m:MiroImport {graph_id: $g}) RETURN count(m) AS n", g=gid)[0]["n"]

        yield SimpleNamespace(name="neo4j", env=neo4j_env(server), entity_names=entity_names, pending=pending)
        driver.close()
        return
    server = EmbeddedFalkorDB(tmp_path_factory.mktemp("shared-falkordb"))
    server.start()
    client = redis.Redis(host=server.host, port=server.port, decode_responses=True)

    def query(graph: str, cypher: str, **params) -> list[list]:
        if graph not in client.execute_command("GRAPH.LIST"):
            return []
        header = " ".join(f"{key}={_literal(value)}" for key, value in params.items())
        return client.execute_command("GRAPH.RO_QUERY", graph, f"CYPHER {header} {cypher}" if header else cypher)[1]

    def entity_names(gid: str) -> list[str]:
        return [row[0] for row in query(gid, "MATCH (n:Entity) RETURN n.name")]

    def pending(gid: str) -> int:
        found = query(REGISTRY_GRAPH, "MATCH (m:MiroImport) WHERE m.graph_id = $g RETURN count(m)", g=gid)
        return found[0][0] if found else 0

    yield SimpleNamespace(name="falkordb", env={"GRAPH_BACKEND": "falkordb", "FALKORDB_URL": f"redis://{server.host}:{server.port}"},
                          entity_names=entity_names, pending=pending)
    client.close()
    server.stop()


def _literal(value) -> str:
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


@pytest.fixture
def two_apps(database, tmp_path):
    apps = [AppProcess(tmp_path / name, tmp_path / f"{name}.log", GRAPH_LOCK_LEASE_S=LEASE_S, **database.env)
            for name in ("a", "b")]
    for app in apps:
        app.start(ready_timeout_s=240)
    yield apps
    for app in apps:
        app.stop()


def _facts(tag: str, count: int, names: list[str]) -> list[dict]:
    """Facts whose text names their request (`tag`), over a small shared set of entity names."""
    return [{"source": names[i % len(names)], "target": names[(i + 3) % len(names)], "relation": "supplies",
             "fact": f"{names[i % len(names)]} supplies {names[(i + 3) % len(names)]} part {tag}-{i}"}
            for i in range(count)]


def _edges(app, gid: str) -> list[str]:
    facts: list[str] = []
    while True:
        status, body = call(app.url(f"/api/graph/{gid}/edges?limit=500&offset={len(facts)}"))
        assert status == 200, body
        facts += [edge["fact"] for edge in body["items"]]
        if len(body["items"]) < 500:
            return facts


def _assert_consistent(database, app, gid: str, facts: list[str]) -> None:
    """Stored once each, entities = distinct names of the stored facts, nothing pending."""
    assert len(facts) == len(set(facts)), "a fact is stored twice"
    names = sorted(database.entity_names(gid))
    assert len(names) == len(set(names)), "an entity is stored twice"
    status, stats = call(app.url(f"/api/graph/{gid}/stats"))
    assert status == 200 and stats["edges"] == len(facts) and stats["nodes"] == len(names), stats
    assert database.pending(gid) == 0


def test_concurrent_imports_through_two_processes_keep_each_others_facts(database, two_apps):
    a, b = two_apps
    gid = unique_graph_id("shared")
    assert call(a.url("/api/graph"), "POST", {"graph_id": gid})[0] == 201
    names = [f"Depot {n}" for n in range(12)]
    batches = [(app, _facts(f"{app.port}-{round_}", 120, names)) for round_ in range(3) for app in (a, b)]
    with ThreadPoolExecutor(len(batches)) as pool:
        answers = list(pool.map(lambda job: call(job[0].url(f"/api/graph/{gid}/facts"), "POST",
                                                 {"facts": job[1]}, timeout=300), batches))
    assert [status for status, _ in answers] == [201] * len(batches), answers
    sent = sorted(fact["fact"] for _, facts in batches for fact in facts)
    stored = _edges(b, gid)
    assert sorted(stored) == sent  # no process undid the other's import in flight
    _assert_consistent(database, a, gid, stored)
    assert sorted(database.entity_names(gid)) == sorted(names)


@dataclass
class Call:
    op: str
    gid: str
    tag: str
    sent: float
    answered: float
    status: int


def test_interleaved_lifecycle_through_two_processes_keeps_the_invariants(database, two_apps):
    rng = random.Random(37)
    gids = [unique_graph_id("life") for _ in range(3)]
    names = [f"Pier {n}" for n in range(6)]
    log: list[Call] = []
    log_lock = threading.Lock()

    def client(worker: int) -> None:
        for step in range(14):
            app, gid = rng.choice(two_apps), rng.choice(gids)
            op = rng.choices(["create", "import", "search", "delete"], weights=[3, 5, 2, 2])[0]
            tag = f"w{worker}s{step}"
            sent = time.monotonic()
            if op == "create":
                status, _ = call(app.url("/api/graph"), "POST", {"graph_id": gid})
            elif op == "import":
                status, _ = call(app.url(f"/api/graph/{gid}/facts"), "POST", {"facts": _facts(tag, 15, names)},
                                 timeout=300)
            elif op == "search":
                status, _ = call(app.url(f"/api/graph/{gid}/search"), "POST", {"query": "pier supplies"})
            else:
                status, _ = call(app.url(f"/api/graph/{gid}"), "DELETE")
            with log_lock:
                log.append(Call(op, gid, tag, sent, time.monotonic(), status))

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(client, range(4)))

    assert not [c for c in log if c.status >= 500], [c for c in log if c.status >= 500]
    assert {c.op for c in log if c.status in (200, 201, 202)} >= {"create", "import", "delete"}
    listed = {g["graph_id"] for g in call(two_apps[0].url("/api/graph"))[1]["graphs"]}
    for gid in gids:
        if gid not in listed:
            assert database.entity_names(gid) == [], f"{gid} was deleted but entities remain"
            continue
        created = max((c for c in log if c.gid == gid and c.op == "create" and c.status == 201),
                      key=lambda c: c.answered)
        stored = _edges(two_apps[1], gid)
        tags = {fact.split(" part ")[1].rsplit("-", 1)[0] for fact in stored}
        imports = {c.tag: c for c in log if c.gid == gid and c.op == "import"}
        for tag in tags:  # nothing of an earlier incarnation, nothing unacknowledged-and-failed
            assert imports[tag].status == 201 and imports[tag].answered > created.sent, (tag, imports[tag], created)
        acknowledged = {tag for tag, c in imports.items() if c.status == 201 and c.sent > created.answered}
        assert acknowledged <= tags, "an acknowledged import of the live graph is missing"
        _assert_consistent(database, two_apps[0], gid, stored)


def test_a_process_killed_mid_import_is_cleaned_up_and_the_other_goes_on(database, two_apps, tmp_path):
    a, b = two_apps
    gid = unique_graph_id("kill")
    names = [f"Quay {n}" for n in range(20)]
    assert call(a.url("/api/graph"), "POST", {"graph_id": gid})[0] == 201
    kept = _facts("kept", 30, names)
    assert call(b.url(f"/api/graph/{gid}/facts"), "POST", {"facts": kept})[0] == 201

    # 300 facts and 40 new entities (one query each): the write phase outlasts by far the 10 ms between two
    # looks for its marker, while preparing the import (embedding every fact) takes seconds, not 20.
    doomed = _facts("doomed", 300, names + [f"Crane {n}" for n in range(40)])
    threading.Thread(target=lambda: _quietly(call, a.url(f"/api/graph/{gid}/facts"), "POST",
                                             {"facts": doomed}, timeout=300), daemon=True).start()
    deadline = time.monotonic() + 240
    while database.pending(gid) == 0 and time.monotonic() < deadline:  # A is in its write phase
        time.sleep(0.01)
    assert database.pending(gid) == 1, "the import never reached its write phase"
    a.kill_hard()

    # B goes on while A's lock still has its lease: a read answers, an import waits for the lease.
    assert call(b.url(f"/api/graph/{gid}/search"), "POST", {"query": "quay"})[0] == 200
    late = _facts("late", 10, names)
    status, body = call(b.url(f"/api/graph/{gid}/facts"), "POST", {"facts": late}, timeout=120)
    assert status == 201, body

    a.start(ready_timeout_s=240)  # the same process again, over the same database
    stored = _edges(a, gid)
    doomed_kept = [fact for fact in stored if " part doomed-" in fact]
    assert doomed_kept == [], f"{len(doomed_kept)} facts of the killed import were left"
    assert sorted(stored) == sorted(f["fact"] for f in kept + late)
    _assert_consistent(database, a, gid, stored)
    assert set(database.entity_names(gid)) == {n for f in kept + late for n in (f["source"], f["target"])}


def _quietly(function, *args, **kwargs):
    try:
        function(*args, **kwargs)
    except OSError:  # the process under the request was killed
        pass
