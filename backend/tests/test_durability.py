"""Durability: every fact the API acknowledged survives kill -9 of the embedded FalkorDB and of the
app (the server fsyncs its append-only file before answering), and a bulk import that fails part
way leaves the graph exactly as it was.

How the import is made to fail mid-way, for real: the edge batch carries a metadata value FalkorDB
rejects (NaN; its parameter header cannot express it), so the entity nodes are already written, one
query each, when the edge write fails, and the rollback must remove them again. The HTTP API now
refuses such values up front (test_bad_input.py), so the write goes through the adapter's Python API,
as code inside the app (the report agent, a script) can. Killing the database between the node and
edge writes is not reproducible; a database that dies mid-import cannot be rolled back at all (the
rollback needs it), which test_faults.py covers from the request's side.
"""

from __future__ import annotations

import os
import signal
import threading
import time

from app.graph.fact_import import ImportFailedError
from app.graph.fact_parsing import FactInput
from app.graph.runtime import GraphitiAdapter
from tests.conftest import unique_graph_id
from tests.support.app_process import AppProcess, call, wait_gone
from tests.support.facts import WATER_FACTS

GRAPH = "durable"
BATCH = 25


def _batch(number: int) -> list[dict]:
    return [{"source": f"Sensor {number}-{i}", "target": f"Station {number % 3}", "relation": "reports to",
             "fact": f"Sensor {number}-{i} reports readings to Station {number % 3}"} for i in range(BATCH)]


def _stored_facts(app: AppProcess) -> list[str]:
    status, page = call(app.url(f"/api/graph/{GRAPH}/edges?limit=500"))
    assert status == 200, page
    assert page["total"] == len(page["items"])
    return [edge["fact"] for edge in page["items"]]


def _import_until_stopped(app: AppProcess, acknowledged: list[str], sent: list[str], stop: threading.Event):
    number = 0
    while not stop.is_set():
        facts = _batch(number)
        sent.extend(f["fact"] for f in facts)
        try:
            status, _ = call(app.url(f"/api/graph/{GRAPH}/facts"), "POST", {"facts": facts}, timeout=30)
        except OSError:  # the app died under the request: not acknowledged
            return
        if status == 201:
            acknowledged.extend(f["fact"] for f in facts)
        number += 1


def test_acknowledged_facts_survive_kill_9_of_database_and_app(tmp_path):
    data_dir = tmp_path / "data"
    acknowledged: list[str] = []
    sent: list[str] = []
    with AppProcess(data_dir, tmp_path / "first.log") as app:
        assert call(app.url("/api/graph"), "POST", {"graph_id": GRAPH})[0] == 201
        stop = threading.Event()
        writer = threading.Thread(target=_import_until_stopped, args=(app, acknowledged, sent, stop))
        writer.start()
        while len(acknowledged) < 3 * BATCH and writer.is_alive():
            time.sleep(0.05)
        database_pid = app.falkordb_pid()
        os.kill(database_pid, signal.SIGKILL)  # the database first, while imports are in flight
        app.kill_hard()
        stop.set()
        writer.join(timeout=60)
        assert wait_gone(database_pid)
    assert len(acknowledged) >= 3 * BATCH

    with AppProcess(data_dir, tmp_path / "second.log") as app:  # same data directory, fresh processes
        stored = _stored_facts(app)
        assert set(acknowledged) <= set(stored)  # nothing acknowledged was lost
        assert set(stored) <= set(sent) and len(stored) == len(set(stored))  # nothing invented or doubled
        more = _batch(1000)
        assert call(app.url(f"/api/graph/{GRAPH}/facts"), "POST", {"facts": more})[0] == 201
        expected = set(stored) | {f["fact"] for f in more}
        database_pid = app.falkordb_pid()
        app.kill_hard()  # the app alone: its database must not outlive it
        assert wait_gone(database_pid), "the embedded FalkorDB outlived a kill -9 of the app"

    with AppProcess(data_dir, tmp_path / "third.log") as app:
        assert set(_stored_facts(app)) == expected
        status, graphs = call(app.url("/api/graph"))
        assert GRAPH in [graph["graph_id"] for graph in graphs["graphs"]]


def test_sigterm_stops_the_app_and_its_embedded_falkordb_cleanly(tmp_path):
    """What `docker stop` and a service manager send: the app stops its database itself (R11.5),
    exits 0, and what it acknowledged is there for the next start."""
    data_dir = tmp_path / "data"
    with AppProcess(data_dir, tmp_path / "first.log") as app:
        assert call(app.url("/api/graph"), "POST", {"graph_id": GRAPH})[0] == 201
        facts = _batch(7)
        assert call(app.url(f"/api/graph/{GRAPH}/facts"), "POST", {"facts": facts})[0] == 201
        database_pid = app.falkordb_pid()
        app.process.send_signal(signal.SIGTERM)
        assert app.process.wait(timeout=60) == 0, app.log_tail()
        assert wait_gone(database_pid), "the embedded FalkorDB outlived a SIGTERM of the app"
        log = app.log_tail(80)
        assert "Stopping: new connections refused" in log and "Embedded FalkorDB stopped" in log, log
    with AppProcess(data_dir, tmp_path / "second.log") as app:
        assert set(_stored_facts(app)) == {fact["fact"] for fact in facts}


def _snapshot(graph, gid) -> tuple:
    nodes = graph.nodes(gid, limit=500)["items"]
    edges = graph.edges(gid, limit=500)["items"]
    return (sorted((n["uuid"], n["name"], n["summary"], tuple(sorted(n["labels"]))) for n in nodes),
            sorted((e["uuid"], e["fact"], e["source_uuid"], e["target_uuid"]) for e in edges),
            graph.stats(gid))


def _append_only_log(client) -> bytes:
    folder = client.application.config["APP_CONFIG"].data_dir / "falkordb"
    return b"".join(path.read_bytes() for path in folder.rglob("*.aof"))


def test_an_import_failing_mid_way_leaves_the_graph_as_it_was(client, caplog):
    graph = GraphitiAdapter().graph
    gid = unique_graph_id("rollback")
    graph.create(gid)
    graph.import_facts(gid, WATER_FACTS)
    before = _snapshot(graph, gid)

    doomed = [
        FactInput(source="Mara Lindqvist", target="Desalination Plant", relation="plans",  # existing + new
                  fact="Mara Lindqvist plans a desalination plant"),
        FactInput(source="Pier Authority", target="Harbor Ferry", relation="licenses",
                  fact="The Pier Authority licenses the Harbor Ferry"),
        FactInput(source="Ola Nordmann", target="Pier Authority", relation="audits",
                  fact="Ola Nordmann audits the Pier Authority", metadata={"confidence": float("nan")}),
    ]
    try:
        graph.import_facts(gid, doomed)
        raise AssertionError("the import was expected to fail")
    except ImportFailedError as error:
        assert "rolled back" in str(error)

    assert _snapshot(graph, gid) == before
    # The new entities really were written (the append-only log holds them) before the edge write
    # failed, and then removed by the rollback: the failure was mid-way, not up front.
    assert b"Ola Nordmann" in _append_only_log(client)
    assert any("Import into" in r.getMessage() and "nothing was kept" in r.getMessage() for r in caplog.records)
    # The graph still works, and the same facts import cleanly once the bad value is gone.
    doomed[2].metadata = {"confidence": 0.5}
    assert graph.import_facts(gid, doomed)["entities_created"] == 3
    assert graph.stats(gid)["edges"] == before[2]["edges"] + 3
