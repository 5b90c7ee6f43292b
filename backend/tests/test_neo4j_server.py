"""The Neo4j branches of the graph code on a real Neo4j 5.26 server (app/graph/local_neo4j.py).

Every query here is graphiti's or ours as the server runs it: indexes and the registry constraint,
create / list / delete in batches, the import's one transaction, search scoped by graph through the
shared full-text index, timestamps as neo4j.time values, NEO4J_DATABASE, and refusals at start.
"""

from __future__ import annotations

import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest
from neo4j import GraphDatabase

from app.config import Config
from app.graph import local_neo4j, neo4j_delete
from app.graph import runtime as graph_runtime
from tests.conftest import unique_graph_id
from tests.support.facts import WATER_FACTS
from tests.support.in_process_worker import in_process_worker
from tests.support.graph_backends import neo4j_env

ISO_MICROSECONDS = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00$"


@pytest.fixture
def neo4j(neo4j_server, backend):
    """The app on the session's Neo4j, and a direct session to check what the server holds."""
    _, client = backend(**neo4j_env(neo4j_server))
    assert client.get("/api/graph").status_code == 200  # starts the runtime: indexes, constraint
    with GraphDatabase.driver(neo4j_server.uri, auth=("neo4j", neo4j_server.password)) as driver:
        def rows(query: str, **params) -> list[dict]:
            return [record.data() for record in driver.execute_query(query, params).records]

        yield SimpleNamespace(client=client, rows=rows, server=neo4j_server)


def _create(neo4j, graph_id: str | None = None) -> str:
    graph_id = graph_id or unique_graph_id("n")
    answer = neo4j.client.post("/api/graph", json={"graph_id": graph_id})
    assert answer.status_code == 201, answer.get_json()
    return graph_id


def _import(neo4j, graph_id: str, facts: list[dict]) -> dict:
    answer = neo4j.client.post(f"/api/graph/{graph_id}/facts", json={"facts": facts})
    assert answer.status_code == 201, answer.get_json()
    return answer.get_json()


def _stored(neo4j, graph_id: str) -> dict[str, int]:
    """What the server holds for the graph, counted directly."""
    return {
        "entities": neo4j.rows("MATCH (n:Entity {group_id: $g}) RETURN count(n) AS n", g=graph_id)[0]["n"],
        "facts": neo4j.rows("MATCH ()-[e:RELATES_TO {group_id: $g}]->() RETURN count(e) AS n", g=graph_id)[0]["n"],
        "registry": neo4j.rows("MATCH (r:MiroGraph {graph_id: $g}) RETURN count(r) AS n", g=graph_id)[0]["n"],
    }


def test_the_server_is_neo4j_5_26_community(neo4j):
    component = neo4j.rows("CALL dbms.components() YIELD versions, edition RETURN versions[0] AS v, edition")[0]
    assert component == {"v": local_neo4j.NEO4J_VERSION, "edition": "community"}
    pom = (local_neo4j.SERVER_SOURCES / "pom.xml").read_text()
    assert f"<version>{local_neo4j.NEO4J_VERSION}</version>" in pom  # one version, in both places


def test_start_builds_graphitis_indexes_and_the_registry_constraint(neo4j):
    indexes = {row["name"]: row for row in neo4j.rows("SHOW INDEXES YIELD name, type, state")}
    assert {"edge_name_and_fact", "node_name_and_summary"} <= set(indexes)
    assert all(row["state"] == "ONLINE" for row in indexes.values())
    constraints = neo4j.rows("SHOW CONSTRAINTS YIELD name, type, labelsOrTypes, properties")
    assert {"name": "mirograph_graph_id", "type": "UNIQUENESS", "labelsOrTypes": ["MiroGraph"],
            "properties": ["graph_id"]} in constraints


def test_create_list_and_conflict(neo4j):
    graph_id = _create(neo4j)
    assert neo4j.client.post("/api/graph", json={"graph_id": graph_id}).status_code == 409
    listed = {g["graph_id"]: g for g in neo4j.client.get("/api/graph").get_json()["graphs"]}
    assert graph_id in listed
    assert _stored(neo4j, graph_id)["registry"] == 1


def test_sixteen_concurrent_creates_of_one_id_give_one_201_and_one_registry_node(neo4j):
    graph_id = unique_graph_id("race")
    barrier = threading.Barrier(16)

    def create(_):
        barrier.wait(timeout=30)
        return neo4j.client.post("/api/graph", json={"graph_id": graph_id}).status_code

    with ThreadPoolExecutor(16) as pool:
        statuses = sorted(pool.map(create, range(16)))
    assert statuses == [201] + [409] * 15
    assert _stored(neo4j, graph_id)["registry"] == 1


def test_an_import_is_stored_exactly_and_counted_by_stats(neo4j):
    graph_id = _create(neo4j)
    answer = _import(neo4j, graph_id, WATER_FACTS)
    names = {f[k] for f in WATER_FACTS for k in ("source", "target")}
    assert answer["imported"] == len(WATER_FACTS) and answer["entities_created"] == len(names)
    assert _stored(neo4j, graph_id) == {"entities": len(names), "facts": len(WATER_FACTS), "registry": 1}
    stats = neo4j.client.get(f"/api/graph/{graph_id}/stats").get_json()
    assert (stats["nodes"], stats["edges"]) == (len(names), len(WATER_FACTS))
    # The same facts again: skipped, nothing doubled.
    again = _import(neo4j, graph_id, WATER_FACTS)
    assert again["imported"] == 0 and again["skipped_duplicates"] == len(WATER_FACTS) and _stored(neo4j, graph_id)["facts"] == len(WATER_FACTS)


def test_delete_reports_what_is_really_gone_in_bounded_batches(neo4j, backend, monkeypatch):
    monkeypatch.setattr(neo4j_delete, "DELETE_BATCH_SIZE", 3)
    # The deletion runs on a worker thread of this process, where the smaller batch size is set.
    _, neo4j.client = backend(**neo4j_env(neo4j.server), TASK_WORKERS=0)
    keep, gone = _create(neo4j), _create(neo4j)
    for graph_id in (keep, gone):
        _import(neo4j, graph_id, WATER_FACTS)
    before = _stored(neo4j, gone)
    with in_process_worker(graph_runtime.GraphitiAdapter().tasks.queue):
        answer = neo4j.client.delete(f"/api/graph/{gone}")
    assert answer.status_code == 200, answer.get_json()
    task = neo4j.client.get(f"/api/tasks/{answer.get_json()['task_id']}").get_json()
    deleted = task["result"]["deleted"]
    assert deleted["RELATES_TO"] == before["facts"] and deleted["Entity"] == before["entities"]
    # A step ends with its first short batch: n items take n // 3 + 1 batches of 3; one for each other step.
    batches = before["facts"] // 3 + 1 + before["entities"] // 3 + 1 + len(neo4j_delete.STEPS) - 2
    assert task["progress"]["batches"] == batches and batches > len(neo4j_delete.STEPS) + 4
    assert _stored(neo4j, gone) == {"entities": 0, "facts": 0, "registry": 0}
    assert _stored(neo4j, keep)["facts"] == len(WATER_FACTS)  # the other graph is untouched
    assert neo4j.client.get(f"/api/graph/{gone}/stats").status_code == 404


def test_paged_reads_and_search_give_timestamps_in_one_format(neo4j):
    graph_id = _create(neo4j)
    _import(neo4j, graph_id, WATER_FACTS)
    edges = neo4j.client.get(f"/api/graph/{graph_id}/edges").get_json()["items"]
    nodes = neo4j.client.get(f"/api/graph/{graph_id}/nodes").get_json()["items"]
    hits = neo4j.client.post(f"/api/graph/{graph_id}/search", json={"query": "algae bloom reservoir"}).get_json()
    assert hits["error"] is None and hits["edges"]
    algae = next(edge for edge in edges if "algae" in edge["fact"])
    assert algae["valid_at"] == "2024-08-01T00:00:00.000000+00:00"
    assert algae["invalid_at"] == "2024-08-22T00:00:00.000000+00:00"
    for stamp in [edge["created_at"] for edge in edges] + [node["created_at"] for node in nodes] + \
            [hit["created_at"] for hit in hits["edges"]]:
        assert re.match(ISO_MICROSECONDS, stamp), stamp


def test_search_is_scoped_to_its_graph(neo4j):
    water, other = _create(neo4j), _create(neo4j)
    _import(neo4j, water, WATER_FACTS)
    _import(neo4j, other, [{**fact, "fact": fact["fact"] + " (other town)"} for fact in WATER_FACTS])
    hits = neo4j.client.post(f"/api/graph/{water}/search", json={"query": "sourdough bread", "limit": 10}).get_json()
    assert hits["edges"] and not [hit for hit in hits["edges"] if "other town" in hit["fact"]]
    assert "Harbor Bakery sells sourdough bread baked every morning" in [hit["fact"] for hit in hits["edges"]]


def test_graphs_sharing_index_tokens_keep_the_keyword_candidates_of_the_searched_graph(neo4j, monkeypatch):
    """Lucene's standard analyzer splits "bread-archive" into tokens that `group_id:"bread"` matches,
    so the shared full-text index returns the other graph's hits inside the procedure's limit. The
    first stage asks for more and keeps the searched graph's candidates whole."""
    suffix = unique_graph_id("x").split("_")[1]
    water, archive = _create(neo4j, f"loaf{suffix}"), _create(neo4j, f"loaf{suffix}-archive")
    def facts(graph: str, count: int, words: str) -> list[dict]:
        return [{"source": f"Baker {graph} {i}", "target": f"Shop {graph} {i}", "relation": "bakes",
                 "fact": f"Baker {i} bakes {words} for shop {i} of {graph}"} for i in range(count)]
    # The archive's facts say the words twice, so Lucene ranks them above the searched graph's.
    _import(neo4j, archive, facts("archive", 30, "rye bread and rye bread rolls"))
    _import(neo4j, water, facts("water", 10, "rye bread"))
    from graphiti_core.search.search_config import EdgeSearchMethod

    from app.graph import search as graph_search

    hybrid = graph_search._first_stage_config

    def keyword_half_only(scope: str, n_candidates: int):  # the vector half would fill the slots
        config = hybrid(scope, n_candidates)
        config.edge_config.search_methods = [EdgeSearchMethod.bm25]
        return config

    monkeypatch.setattr(graph_search, "_first_stage_config", keyword_half_only)

    def candidates() -> list[str]:
        hits = neo4j.client.post(f"/api/graph/{water}/search", json={"query": "rye bread", "limit": 10}).get_json()
        assert hits["error"] is None
        return [hit["fact"] for hit in hits["edges"]]

    kept = candidates()
    assert len(kept) == 10 and all("of water" in fact for fact in kept)
    monkeypatch.setattr("app.graph.shared_fulltext.MAX_FIRST_STAGE_FACTOR", 1)
    assert len(candidates()) < 10  # what the shared index alone gives: the archive took slots


def test_duplicate_registry_nodes_from_before_the_constraint_are_removed_at_start(neo4j, backend):
    graph_id = unique_graph_id("dup")
    neo4j.rows("DROP CONSTRAINT mirograph_graph_id IF EXISTS")
    for _ in range(3):  # a Neo4j datetime, as a hand-made node might carry: listed in the API's format
        neo4j.rows("CREATE (:MiroGraph {graph_id: $g, name: $g, created_at: datetime()})", g=graph_id)
    graph_runtime.reset_graphiti()  # a fresh start runs the dedupe, then creates the constraint again
    _, client = backend(**neo4j_env(neo4j.server))
    listed = client.get("/api/graph")
    assert listed.status_code == 200
    assert [g["created_at"][-6:] for g in listed.get_json()["graphs"] if g["graph_id"] == graph_id] == ["+00:00"]
    assert _stored(neo4j, graph_id)["registry"] == 1
    names = [row["name"] for row in neo4j.rows("SHOW CONSTRAINTS YIELD name")]
    assert "mirograph_graph_id" in names


# --- settings and refusals at start ------------------------------------------------------------

def test_a_database_that_community_does_not_have_is_named(neo4j_server, backend):
    """Community serves one user database ("neo4j"): any other NEO4J_DATABASE is refused by name."""
    graph_runtime._failed_starts.forget()
    try:
        _, client = backend(**neo4j_env(neo4j_server, NEO4J_DATABASE="graphs"))
        answer = client.get("/api/graph")
        assert answer.status_code == 503 and answer.headers["Retry-After"]
        message = answer.get_json()["error"]["message"]
        assert message == f"Neo4j at 127.0.0.1:{neo4j_server.port} has no database 'graphs': check NEO4J_DATABASE"
    finally:
        graph_runtime._failed_starts.forget()
        graph_runtime.reset_graphiti()


def test_a_wrong_password_is_refused_by_name_without_the_password(neo4j_server, backend):
    graph_runtime._failed_starts.forget()
    try:
        _, client = backend(**neo4j_env(neo4j_server, NEO4J_PASSWORD="wrong-secret-1"))
        answer = client.post("/api/graph", json={"graph_id": "water"})
        assert answer.status_code == 503
        message = answer.get_json()["error"]["message"]
        assert message == (f"Neo4j at 127.0.0.1:{neo4j_server.port} refused the credentials: "
                           "check NEO4J_USER and NEO4J_PASSWORD")
    finally:
        graph_runtime._failed_starts.forget()
        graph_runtime.reset_graphiti()


def test_without_neo4j_uri_the_app_starts_its_own_neo4j_and_stops_it(backend, tmp_path, monkeypatch):
    monkeypatch.setenv("DATA_DIR", str(tmp_path))
    graph_runtime._failed_starts.forget()
    _, client = backend(GRAPH_BACKEND="neo4j", NEO4J_LOCAL_HEAP_MB="512", NEO4J_LOCAL_PAGE_CACHE_MB="64")
    try:
        graph_id = unique_graph_id("own")
        assert client.post("/api/graph", json={"graph_id": graph_id}).status_code == 201
        runtime = graph_runtime.current_runtime()
        server = runtime.embedded_db
        assert isinstance(server, local_neo4j.LocalNeo4j) and server.home == tmp_path / "neo4j"
        assert (tmp_path / "neo4j" / "password").stat().st_mode & 0o777 == 0o600
        health = client.get("/health").get_json()
        assert "local" in str(health).lower() or health.get("graph_runtime") in ("ready", "ok", "up")
    finally:
        graph_runtime.reset_graphiti()
    assert server.process is None and not (tmp_path / "neo4j" / "server.json").exists()
    # The next start reuses the data and the password: the graph is still there.
    _, client = backend(GRAPH_BACKEND="neo4j", NEO4J_LOCAL_HEAP_MB="512", NEO4J_LOCAL_PAGE_CACHE_MB="64",
                        LOG_LEVEL="DEBUG")
    try:
        assert graph_id in [g["graph_id"] for g in client.get("/api/graph").get_json()["graphs"]]
    finally:
        graph_runtime.reset_graphiti()


# --- a crash of the database in the middle of an import -------------------------------------------

def test_neo4j_killed_mid_import_answers_503_and_the_import_is_undone_when_it_is_back(neo4j):
    graph_id = _create(neo4j)
    _import(neo4j, graph_id, WATER_FACTS)
    before = _stored(neo4j, graph_id)
    doomed = [{"source": f"Valve {i}", "target": f"Main {i}", "relation": "feeds",
               "fact": f"Valve {i} feeds water main {i}"} for i in range(300)]
    answers: list = []
    request = threading.Thread(target=lambda: answers.append(
        neo4j.client.post(f"/api/graph/{graph_id}/facts", json={"facts": doomed})))
    request.start()
    deadline = time.monotonic() + 240
    pending = "MATCH (m:MiroImport {graph_id: $g}) RETURN count(m) AS n"
    while neo4j.rows(pending, g=graph_id)[0]["n"] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)  # the import has recorded what it is about to write
    neo4j.server.process.kill()  # kill -9 of the database's JVM
    request.join(timeout=300)
    assert answers and answers[0].status_code == 503, answers and answers[0].get_json()
    assert answers[0].get_json()["error"]["code"] in ("import_failed", "graph_unavailable")
    neo4j.server.start()  # a supervisor brings it back (same data, same port)

    for _ in range(2):  # the first request after the restart undoes the import cut short
        stats = neo4j.client.get(f"/api/graph/{graph_id}/stats")
    assert stats.status_code == 200, stats.get_json()
    assert _stored(neo4j, graph_id) == before
    assert neo4j.rows(pending, g=graph_id)[0]["n"] == 0
    again = neo4j.client.post(f"/api/graph/{graph_id}/facts", json={"facts": doomed[:20]})
    assert again.status_code == 201 and again.get_json()["entities_created"] == 40
