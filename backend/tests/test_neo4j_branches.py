"""Faults of the Neo4j branches that a real server cannot be made to show on demand.

Everything else of the Neo4j path runs on a real Neo4j 5.26 (tests/test_neo4j_server.py). These
tests run the app on graphiti's real `Neo4jDriver` whose Bolt client is a recording test double
(tests/support/recording_neo4j.py), because each needs a server answer at an exact moment:
- a write refused inside the import's transaction (a deadlock victim): the transaction rolls back;
- a delete held in the middle of a label, to read its progress while it runs (202);
- the server going away between two delete batches: the graph stays listed, a second delete finishes;
- the vector index created by another process between this one's check and its create (replicas and
  workers starting together on a new database): the start goes on.
The pure token logic of the shared full-text index and a start against a closed port (the real
driver, no double) are here too.
"""

from __future__ import annotations

import asyncio
import logging
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
from app.graph.server_process import free_port
from app.graph.shared_fulltext import first_stage_factor, first_stage_factor_for, index_tokens
from tests.support.facts import WATER_FACTS
from tests.support.in_process_worker import in_process_worker
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
    yield from _on_recording_driver(ScriptedNeo4j(), monkeypatch, backend)


def _on_recording_driver(script: ScriptedNeo4j, monkeypatch, backend):
    drivers: list[RecordingNeo4jDriver] = []

    def build_driver(config):
        drivers.append(RecordingNeo4jDriver(script, database=config.neo4j_database))
        # As the real builder does: without this the driver's own index task would send the index
        # queries, and a start that forgot to build them would still look right here.
        graph_runtime._cancel_self_scheduled_indexing(drivers[-1])
        return drivers[-1], None

    monkeypatch.setattr(graph_runtime, "_build_driver", build_driver)
    graph_runtime._failed_starts.forget()
    # Tasks run on a thread of this process, where the recording driver is (tests/support/in_process_worker.py).
    app, client = backend(GRAPH_BACKEND="neo4j", NEO4J_DATABASE="graphs", TASK_WORKERS=0)
    assert client.get("/api/graph").status_code == 200  # builds the runtime on the recording driver
    with in_process_worker(graph_runtime.GraphitiAdapter().tasks.queue):
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
    monkeypatch.setenv("NEO4J_URI", "bolt://127.0.0.1:7687")  # a server of its own is not wanted here
    monkeypatch.setenv("NEO4J_DATABASE", "graphs")
    config = Config.from_env()
    driver, embedded = graph_runtime._build_driver(config)  # no running loop: nothing connects
    try:
        assert config.neo4j_database == "graphs" and driver._database == "graphs" and embedded is None
    finally:
        asyncio.run(driver.close())


def test_a_vector_index_another_process_created_at_the_same_moment_fails_no_start(monkeypatch, backend):
    """Replicas and workers starting together on a new Neo4j all see no vector index and all create it;
    Neo4j refuses all but the first with EquivalentSchemaRuleAlreadyExists, IF NOT EXISTS or not."""
    script = ScriptedNeo4j()
    script.on(r"^SHOW INDEXES", [])  # no index yet, as every starting process reads it

    def created_meanwhile(query, params):
        raise _server_error("Neo.ClientError.Schema.EquivalentSchemaRuleAlreadyExists",
                            "An equivalent index already exists")

    script.on(r"^CREATE VECTOR INDEX", created_meanwhile)
    started = _on_recording_driver(script, monkeypatch, backend)
    neo4j = next(started)  # the start answered a request, so it did not fail
    try:
        assert neo4j.driver.queries(r"^CREATE VECTOR INDEX fact_embedding_vectors")
        assert neo4j.client.get("/api/graph").status_code == 200
    finally:
        next(started, None)


# --- import ----------------------------------------------------------------------------------

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


def test_a_long_delete_answers_202_and_reports_progress(neo4j, monkeypatch):
    monkeypatch.setattr(graph_api, "DELETE_WAIT_S", 0.05)
    _create(neo4j, "water")
    gate = threading.Event()
    _batches(neo4j, {"RELATES_TO": [1000, 5], "Entity": [12]}, gate=gate)
    answer = neo4j.client.delete("/api/graph/water")
    try:
        assert answer.status_code == 202 and answer.get_json()["state"] in ("pending", "running")
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


# --- the shared full-text index's tokens --------------------------------------------------------

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


def _shares(scoped: tuple[str, ...], graph_id: str) -> bool:
    tokens = index_tokens(graph_id)
    return any(tokens[i:i + len(scoped)] == scoped for i in range(len(tokens) - len(scoped) + 1))


# --- a failed start ------------------------------------------------------------------------------

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
    _, client = backend(GRAPH_BACKEND="neo4j", NEO4J_URI=f"bolt://127.0.0.1:{free_port()}")
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

