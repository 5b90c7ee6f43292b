"""The Neo4j branches of the graph code, run without a Neo4j server.

No Neo4j server can be installed on the development machines, so these tests run the app on
graphiti's real `Neo4jDriver` whose Bolt client is a recording test double
(tests/support/recording_neo4j.py): every Cypher query and its parameters are recorded and answered
with scripted rows. They check what the app sends (create, list, delete in batches, stats, import,
search scoping) and what it makes of Neo4j's answers (neo4j.time values). What a real server does
with that Cypher is checked by hand: README, "Checking the Neo4j path on a real server".
The start-failure tests use the real driver against a port where nothing listens.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from types import SimpleNamespace

import pytest
import pytz
from graphiti_core.driver.driver import GraphProvider
from graphiti_core.graph_queries import get_fulltext_indices, get_range_indices
from neo4j.exceptions import AuthError, Neo4jError, ServiceUnavailable
from neo4j.time import DateTime

from app.api import graph as graph_api
from app.config import Config
from app.graph import neo4j_delete, unavailable
from app.graph import runtime as graph_runtime
from app.graph.loop import run_on_loop
from app.graph.shared_fulltext import first_stage_factor, first_stage_factor_for, index_tokens
from tests.support.facts import WATER_FACTS
from tests.support.recording_neo4j import RecordingNeo4jDriver, ScriptedNeo4j, edge_row, node_row

# 2024-05-01 10:00:00.123456789 UTC: Neo4j keeps nanoseconds; the API shows microseconds.
NEO4J_TIME = DateTime(2024, 5, 1, 10, 0, 0, 123456789, tzinfo=pytz.utc)
API_TIME = "2024-05-01T10:00:00.123456+00:00"
EDGE_FULLTEXT = r'queryRelationships\("edge_name_and_fact"'
EDGE_COSINE = r"MATCH \(n:Entity\)-\[e:RELATES_TO\]->\(m:Entity\).*vector\.similarity\.cosine"


def _server_error(code: str, message: str = "scripted") -> Neo4jError:
    """An error as the driver raises it when the server answers FAILURE with `code`."""
    return Neo4jError._hydrate_neo4j(code=code, message=message)


@pytest.fixture
def neo4j(monkeypatch, backend):
    """The app on GRAPH_BACKEND=neo4j (database "graphs") over a recording driver."""
    script = ScriptedNeo4j()
    drivers: list[RecordingNeo4jDriver] = []

    def build_driver(config):
        drivers.append(RecordingNeo4jDriver(script, database=config.neo4j_database))
        # As the real builder does: without this the driver's own index task would send the index
        # queries, and a start that forgot to build them would still look right here.
        graph_runtime._cancel_self_scheduled_indexing(drivers[-1])
        return drivers[-1], None

    monkeypatch.setattr(graph_runtime, "_build_driver", build_driver)
    graph_runtime._failed_starts.forget()
    app, client = backend(GRAPH_BACKEND="neo4j", NEO4J_DATABASE="graphs")
    assert client.get("/api/graph").status_code == 200  # builds the runtime on the recording driver
    yield SimpleNamespace(client=client, script=script, driver=drivers[-1])
    graph_runtime.reset_graphiti()


def _create(neo4j, graph_id: str) -> None:
    assert neo4j.client.post("/api/graph", json={"graph_id": graph_id}).status_code == 201


def _since(driver, mark: int):
    return driver.calls[mark:]


# --- settings and start ------------------------------------------------------------------------

def test_neo4j_database_setting_reaches_graphitis_driver(monkeypatch):
    assert Config().neo4j_database == "neo4j"
    monkeypatch.setenv("GRAPH_BACKEND", "neo4j")
    monkeypatch.setenv("NEO4J_DATABASE", "graphs")
    config = Config.from_env()
    driver, embedded = graph_runtime._build_driver(config)  # no running loop: nothing connects
    try:
        assert config.neo4j_database == "graphs" and driver._database == "graphs" and embedded is None
    finally:
        asyncio.run(driver.close())


def test_start_builds_graphitis_indexes_then_the_registry_constraint(neo4j):
    sent = [call.normalized() for call in neo4j.driver.calls]
    indexes = [sent.index(" ".join(index.split()))
               for index in get_range_indices(GraphProvider.NEO4J) + get_fulltext_indices(GraphProvider.NEO4J)]
    constraint = sent.index(
        "CREATE CONSTRAINT mirograph_graph_id IF NOT EXISTS FOR (g:MiroGraph) REQUIRE g.graph_id IS UNIQUE")
    assert max(indexes) < constraint  # the constraint is created with (after) graphiti's indexes
    dedupe = next(i for i, text in enumerate(sent) if "collect(g) AS copies" in text)
    assert dedupe < constraint  # duplicates from before would make the constraint fail
    # NEO4J_DATABASE reaches every query, not only the ones graphiti sends.
    assert {call.database for call in neo4j.driver.calls} == {"graphs"}


def test_registry_queries_are_parameterised_and_scoped(neo4j):
    mark = len(neo4j.driver.calls)
    _create(neo4j, "water")
    assert neo4j.client.post("/api/graph", json={"graph_id": "water"}).status_code == 409
    graphs = neo4j.client.get("/api/graph").get_json()["graphs"]
    assert [g["graph_id"] for g in graphs] == ["water"]
    sent = _since(neo4j.driver, mark)
    creates = [call for call in sent if call.normalized().startswith("MERGE (g:MiroGraph")]
    assert len(creates) == 1 and creates[0].params["graph_id"] == "water"
    assert all("water" not in call.query for call in sent)  # ids travel as parameters only
    # Neo4j has one database: creating a graph builds no per-graph indexes (FalkorDB does).
    assert not [call for call in sent if "CREATE" in call.query and "MiroGraph" not in call.query]


# --- import ----------------------------------------------------------------------------------

def test_import_writes_one_committed_transaction_scoped_to_the_graph(neo4j):
    _create(neo4j, "water")
    mark = len(neo4j.driver.calls)
    answer = neo4j.client.post("/api/graph/water/facts", json={"facts": WATER_FACTS[:3]})
    assert answer.status_code == 201, answer.get_json()
    sent = _since(neo4j.driver, mark)
    assert all(call.params.get("graph_id", "water") == "water" for call in sent)
    assert all(call.params.get("group_ids", ["water"]) == ["water"] for call in sent)
    writes = [call for call in sent if call.transaction is not None]
    assert writes and {call.transaction for call in writes} == {writes[0].transaction}
    assert {call.outcome for call in writes} == {"committed"}
    written = [item for call in writes for value in call.params.values() if isinstance(value, list)
               for item in value if isinstance(item, dict)]
    names = {f[k] for f in WATER_FACTS[:3] for k in ("source", "target")}
    assert {item["name"] for item in written if "name_embedding" in item} == names
    assert len([item for item in written if "fact_embedding" in item]) == 3
    assert {item["group_id"] for item in written} == {"water"}


def test_a_failed_import_write_is_rolled_back(neo4j):
    _create(neo4j, "water")

    def refuse(query, params):
        raise _server_error("Neo.TransientError.Transaction.DeadlockDetected")

    neo4j.script.on(r"UNWIND \$entity_edges", refuse)
    mark = len(neo4j.driver.calls)
    answer = neo4j.client.post("/api/graph/water/facts", json={"facts": WATER_FACTS[:2]})
    assert answer.status_code == 503 and answer.get_json()["error"]["code"] == "import_failed"
    writes = [call for call in _since(neo4j.driver, mark) if call.transaction is not None]
    assert writes and {call.outcome for call in writes} == {"rolled back"}


# --- delete ----------------------------------------------------------------------------------

def _batches(neo4j, counts: dict[str, list[int]], gate: threading.Event | None = None,
             fail_on: str | None = None) -> None:
    """Answer each label's batch deletes with the given counts (then 0)."""
    remaining = {name: list(values) for name, values in counts.items()}

    def answer(query, params):
        name = next(name for name, _ in neo4j_delete.STEPS if f":{name}" in query)
        if name == fail_on:
            raise ServiceUnavailable("scripted: the server went away")
        if gate is not None and name == "Entity":
            gate.wait(timeout=60)
        values = remaining.get(name) or [0]
        return [{"deleted": values.pop(0) if remaining.get(name) else 0}]

    neo4j.script.on(r"LIMIT \$batch (DETACH )?DELETE", answer)


def test_delete_goes_label_by_label_in_bounded_batches(neo4j):
    _create(neo4j, "water")
    _batches(neo4j, {"RELATES_TO": [1000, 1000, 7], "Entity": [1000, 3]})
    mark = len(neo4j.driver.calls)
    answer = neo4j.client.delete("/api/graph/water")
    assert answer.status_code == 200, answer.get_json()
    task = neo4j.client.get(f"/api/tasks/{answer.get_json()['task_id']}").get_json()
    assert task["state"] == "done" and task["kind"] == "graph_delete"
    deleted = task["result"]["deleted"]
    assert deleted["RELATES_TO"] == 2007 and deleted["Entity"] == 1003 and sum(deleted.values()) == 3010
    assert task["progress"]["batches"] == 3 + 2 + (len(neo4j_delete.STEPS) - 2)

    sent = _since(neo4j.driver, mark)
    batches = [call for call in sent if "LIMIT $batch" in call.query]
    order = [next(name for name, _ in neo4j_delete.STEPS if f":{name}" in call.query) for call in batches]
    expected = [name for name, _ in neo4j_delete.STEPS for _ in range({"RELATES_TO": 3, "Entity": 2}.get(name, 1))]
    assert order == expected  # relationships first, each step until a batch comes back short
    assert all(call.params == {"graph_id": "water", "batch": neo4j_delete.DELETE_BATCH_SIZE} for call in batches)
    assert all(call.transaction is None for call in batches)  # each batch its own transaction
    assert not [call for call in sent if "{group_id:" in call.query]  # no unlabelled scan
    registry_delete = next(i for i, call in enumerate(sent) if "MiroGraph" in call.query and "DELETE g" in call.query)
    assert registry_delete > sent.index(batches[-1])  # the registry entry goes last
    assert neo4j.client.get("/api/graph/water/stats").status_code == 404


def test_a_long_delete_answers_202_and_reports_progress(neo4j, monkeypatch):
    monkeypatch.setattr(graph_api, "DELETE_WAIT_S", 0.05)
    _create(neo4j, "water")
    gate = threading.Event()
    _batches(neo4j, {"RELATES_TO": [1000, 5], "Entity": [12]}, gate=gate)
    answer = neo4j.client.delete("/api/graph/water")
    try:
        assert answer.status_code == 202 and answer.get_json()["state"] == "running"
        task_id = answer.get_json()["task_id"]
        progress = _wait_for(lambda: neo4j.client.get(f"/api/tasks/{task_id}").get_json(),
                             lambda task: task["progress"].get("current") == "Entity")["progress"]
        assert progress["deleted"]["RELATES_TO"] == 1005 and progress["deleted"]["Entity"] == 0
    finally:
        gate.set()
    task = _wait_for(lambda: neo4j.client.get(f"/api/tasks/{task_id}").get_json(),
                     lambda task: task["state"] != "running")
    assert task["state"] == "done" and task["result"]["deleted"]["Entity"] == 12
    assert neo4j.client.get("/api/graph/water/stats").status_code == 404


def test_a_delete_cut_short_keeps_the_graph_and_a_second_delete_finishes(neo4j):
    _create(neo4j, "water")
    _batches(neo4j, {"RELATES_TO": [40]}, fail_on="Entity")
    answer = neo4j.client.delete("/api/graph/water")
    assert answer.status_code == 503 and answer.get_json()["error"]["code"] == "graph_unavailable"
    assert "water" in neo4j.script.registry  # still listed, so it can be deleted again
    _batches(neo4j, {"Entity": [9]})
    answer = neo4j.client.delete("/api/graph/water")
    assert answer.status_code == 200
    task = neo4j.client.get(f"/api/tasks/{answer.get_json()['task_id']}").get_json()
    assert task["result"]["deleted"]["Entity"] == 9 and "water" not in neo4j.script.registry


def _wait_for(read, done, timeout_s: float = 60.0):
    deadline = time.monotonic() + timeout_s
    while True:
        value = read()
        if done(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.02)


# --- stats, paged reads and their timestamps ---------------------------------------------------

def test_stats_count_each_graphiti_label_of_the_graph(neo4j):
    _create(neo4j, "water")
    counts = {"n:Entity": 4, "n:Episodic": 2, "IS NOT NULL": 1, "e:RELATES_TO": 3}

    def count(query, params):
        return [{"n": next(value for key, value in counts.items() if key in query)}]

    neo4j.script.on(r"RETURN count\(\*\) AS n", count)
    mark = len(neo4j.driver.calls)
    stats = neo4j.client.get("/api/graph/water/stats").get_json()
    assert stats == {"graph_id": "water", "nodes": 4, "edges": 3, "episodes": 2, "historical_edges": 1}
    counted = [call for call in _since(neo4j.driver, mark) if "count(*)" in call.query]
    assert len(counted) == 4 and all(call.params == {"graph_id": "water"} for call in counted)
    assert all(":Entity" in call.query or ":Episodic" in call.query or ":RELATES_TO" in call.query
               for call in counted)


def test_paged_reads_and_search_show_neo4j_times_in_one_format(neo4j):
    _create(neo4j, "water")
    fact = "Harbor Bakery sells sourdough bread baked every morning"
    neo4j.script.on(r"MATCH \(s:Entity\)-\[e:RELATES_TO\]->\(t:Entity\) WHERE e.group_id = \$graph_id RETURN",
                    [{"uuid": "e1", "fact": fact, "relation": "SELLS", "source": "Harbor Bakery",
                      "target": "Sourdough", "source_uuid": "n1", "target_uuid": "n2", "valid_at": NEO4J_TIME,
                      "invalid_at": None, "expired_at": None, "created_at": NEO4J_TIME}])
    neo4j.script.on(r"MATCH \(n:Entity\) WHERE n.group_id = \$graph_id RETURN n.uuid",
                    [{"uuid": "n1", "name": "Harbor Bakery", "summary": "", "labels": ["Entity", "Organization"],
                      "created_at": NEO4J_TIME}])
    neo4j.script.on(EDGE_FULLTEXT, [edge_row("e1", fact, "water", "n1", "n2", NEO4J_TIME, name="SELLS",
                                             valid_at=NEO4J_TIME)])
    neo4j.script.on(r"WHERE n.uuid IN \$uuids", [node_row("n1", "Harbor Bakery", "water", NEO4J_TIME),
                                                 node_row("n2", "Sourdough", "water", NEO4J_TIME)])
    edges = neo4j.client.get("/api/graph/water/edges").get_json()["items"]
    nodes = neo4j.client.get("/api/graph/water/nodes").get_json()["items"]
    hits = neo4j.client.post("/api/graph/water/search", json={"query": "sourdough"}).get_json()
    assert hits["error"] is None and hits["edges"][0]["uuid"] == "e1"
    assert edges[0]["created_at"] == edges[0]["valid_at"] == nodes[0]["created_at"] == API_TIME
    assert hits["edges"][0]["created_at"] == hits["edges"][0]["valid_at"] == API_TIME
    assert nodes[0]["labels"] == ["Organization"] and hits["edges"][0]["source"] == "Harbor Bakery"


# --- search scoping ----------------------------------------------------------------------------

def test_every_search_query_is_scoped_to_the_graph(neo4j):
    for graph_id in ("water", "river"):
        _create(neo4j, graph_id)
    mark = len(neo4j.driver.calls)
    assert neo4j.client.post("/api/graph/water/search", json={"query": "bread", "limit": 5}).status_code == 200
    sent = _since(neo4j.driver, mark)
    fulltext, cosine = neo4j.driver.queries(EDGE_FULLTEXT)[-1], neo4j.driver.queries(EDGE_COSINE)[-1]
    assert fulltext.params["query"] == 'group_id:"water" AND (bread)'
    for call in (fulltext, cosine):
        assert call.params["group_ids"] == ["water"] and "e.group_id IN $group_ids" in call.query
    # No other graph shares the index's tokens for "water": graphiti's usual 2 x limit.
    assert fulltext.params["limit"] == 2 * 5
    assert all(call.params.get("graph_id", "water") == "water" for call in sent)


def test_graphs_that_share_index_tokens_widen_the_first_stage(neo4j):
    for graph_id in ("water", "Water-archive", "old-water", "waterfront", "river"):
        _create(neo4j, graph_id)
    assert neo4j.client.post("/api/graph/water/search", json={"query": "bread", "limit": 5}).status_code == 200
    # "Water-archive" and "old-water" share the token "water"; "waterfront" is another token.
    assert neo4j.driver.queries(EDGE_FULLTEXT)[-1].params["limit"] == 2 * 5 * 3
    assert neo4j.client.post("/api/graph/river/search", json={"query": "bread", "limit": 5}).status_code == 200
    assert neo4j.driver.queries(EDGE_FULLTEXT)[-1].params["limit"] == 2 * 5


def test_the_registry_lookup_narrows_by_the_longest_token_of_the_id():
    # Generated ids all start with "g": looking up by the first token would read the whole registry.
    driver = SimpleNamespace(sent=[])

    async def execute_query(query, **params):
        driver.sent.append(params)
        return [], None, None

    driver.execute_query = execute_query
    assert asyncio.run(first_stage_factor_for(driver, "g_3fa9c1d2e4b5")) == 1
    assert asyncio.run(first_stage_factor_for(driver, "old-water-2024")) == 1
    assert [params["token"] for params in driver.sent] == ["3fa9c1d2e4b5", "water"]


def test_index_tokens_follow_the_standard_analyzer_or_split_finer():
    assert index_tokens("Water-Archive_2024") == ("water", "archive", "2024")
    assert first_stage_factor("team-1", ["team-1-archive", "team-10", "Team-1", "1-team"]) == 3
    assert first_stage_factor("g_3fa9c1d2e4b5", ["g_3fa9c1d2e4b6"]) == 1  # generated ids never share
    assert first_stage_factor("a", [f"a-{n}" for n in range(20)]) == 5  # bounded


def test_shared_index_compensation_recovers_keyword_candidates(neo4j, monkeypatch):
    """Measured on an emulated shared index (no server here): graph "water" has 12 facts with the
    keyword and "water-archive" 36, their scores interleaved (every fourth hit is water's). The
    procedure returns the best `limit` hits of both (Lucene cannot tell the ids apart), then Cypher
    keeps water's. A per-graph index would give the search its 10 candidates."""
    _create(neo4j, "water")
    _create(neo4j, "water-archive")
    documents = [("water" if rank % 4 == 0 else "water-archive", rank) for rank in range(48)]

    def shared_index(query, params):
        scoped = index_tokens(params["query"].split('"')[1])  # group_id:"water" AND (bread)
        matching = [(graph, rank) for graph, rank in documents if _shares(scoped, graph)]
        best = matching[: params["limit"]]  # the procedure's limit, before the group filter
        return [edge_row(f"{graph}-{rank}", f"bread fact {rank}", graph, "n1", "n2", NEO4J_TIME)
                for graph, rank in best if graph in params["group_ids"]]

    neo4j.script.on(EDGE_FULLTEXT, shared_index)
    neo4j.script.on(r"WHERE n.uuid IN \$uuids", [node_row("n1", "A", "water", NEO4J_TIME),
                                                 node_row("n2", "B", "water", NEO4J_TIME)])

    def candidates() -> int:
        hits = neo4j.client.post("/api/graph/water/search", json={"query": "bread", "limit": 10}).get_json()
        assert hits["error"] is None
        return len(hits["edges"])

    with_compensation = candidates()
    monkeypatch.setattr("app.graph.shared_fulltext.MAX_FIRST_STAGE_FACTOR", 1)
    without = candidates()
    assert (without, with_compensation) == (5, 10)


def _shares(scoped: tuple[str, ...], graph_id: str) -> bool:
    tokens = index_tokens(graph_id)
    return any(tokens[i:i + len(scoped)] == scoped for i in range(len(tokens) - len(scoped) + 1))


# --- a failed start ------------------------------------------------------------------------------

def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _loop_tasks() -> int:
    async def count():
        return len(asyncio.all_tasks())

    return run_on_loop(count())


@pytest.fixture
def failing_start(monkeypatch, backend):
    """The app on Neo4j settings whose start fails; every driver it builds is kept for inspection."""
    built = []
    real_build = graph_runtime._build_driver

    def build_driver(config):
        built.append(real_build(config)[0])
        return built[-1], None

    monkeypatch.setattr(graph_runtime, "_build_driver", build_driver)
    graph_runtime._failed_starts.forget()
    yield built
    graph_runtime._failed_starts.forget()
    graph_runtime.reset_graphiti()


def test_a_neo4j_that_does_not_answer_gets_a_clear_503_and_leaks_nothing(failing_start, backend, monkeypatch, caplog):
    caplog.set_level(logging.DEBUG, logger="neo4j")
    _, client = backend(GRAPH_BACKEND="neo4j", NEO4J_URI=f"bolt://127.0.0.1:{_closed_port()}")
    before = _loop_tasks()
    first = client.get("/api/graph")
    assert first.status_code == 503 and first.headers["Retry-After"] == "5"
    error = first.get_json()["error"]
    assert error["code"] == "graph_unavailable" and "does not answer" in error["message"]
    assert "Traceback" not in error["message"] and "password" not in error["message"].lower()
    # Within RETRY_AFTER_S the same answer comes from memory: no new driver, no new wait.
    assert client.get("/api/graph/water/stats").status_code == 503 and len(failing_start) == 1
    health = client.get("/health").get_json()
    assert health["graph_runtime"] == "unavailable" and "does not answer" in health["graph_error"]
    # Every later attempt closes its driver and the driver's index task: nothing piles up.
    monkeypatch.setattr(unavailable, "RETRY_AFTER_S", 0.0)
    for _ in range(3):
        assert client.get("/api/graph").status_code == 503
    assert len(failing_start) == 4
    assert all(driver._init_task is None or driver._init_task.done() for driver in failing_start)
    assert all(driver.client._closed for driver in failing_start)
    assert _loop_tasks() == before
    # Only the reachability check touched the server: the driver's own index build (a dozen
    # write queries that each retry for 30 s) never started, so nothing can outlive the start.
    writes = [r for r in caplog.records if r.name.startswith("neo4j") and "access_mode='WRITE'" in r.getMessage()]
    assert writes == []


@pytest.mark.parametrize("refusal, at_connect, says", [
    (AuthError("The client is unauthorized due to authentication failure."), True,
     "refused the credentials: check NEO4J_USER and NEO4J_PASSWORD"),
    (_server_error("Neo.ClientError.Database.DatabaseNotFound", "Database does not exist."), False,
     "has no database 'graphs': check NEO4J_DATABASE"),
])
def test_a_neo4j_that_refuses_us_says_why(refusal, at_connect, says, monkeypatch, backend):
    """A wrong password fails the connectivity check; a missing database fails the first query."""
    drivers = []

    def refuse(query, params):
        raise refusal

    def build_driver(config):
        drivers.append(RecordingNeo4jDriver(None if at_connect else refuse, database=config.neo4j_database,
                                            connect_error=refusal if at_connect else None))
        return drivers[-1], None

    monkeypatch.setattr(graph_runtime, "_build_driver", build_driver)
    graph_runtime._failed_starts.forget()
    try:
        _, client = backend(GRAPH_BACKEND="neo4j", NEO4J_DATABASE="graphs", NEO4J_PASSWORD="wrong-secret")
        answer = client.post("/api/graph", json={"graph_id": "water"})
        assert answer.status_code == 503
        message = answer.get_json()["error"]["message"]
        assert message == f"Neo4j at localhost:7687 {says}" and "wrong-secret" not in message
        assert drivers[0].client.closed and (drivers[0]._init_task is None or drivers[0]._init_task.done())
    finally:
        graph_runtime._failed_starts.forget()
        graph_runtime.reset_graphiti()
