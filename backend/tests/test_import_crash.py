"""A crash in the middle of an import: kill -9 of the embedded FalkorDB or of the whole app
right after the import's first entity writes. The request in flight gets 503 graph_unavailable with
Retry-After, naming the database and saying nothing was kept (not a 500), and what the import had
written is gone once the database is back: the graph is exactly as it was before the import, for
reads and for the next import."""

from __future__ import annotations

import threading

from app.graph import runtime as graph_runtime
from tests.conftest import unique_graph_id
from tests.support.app_process import AppProcess, call, wait_gone
from tests.support.db_monitor import ENTITY_WRITE, KillAtCommand, port_of
from tests.support.facts import WATER_FACTS

# Many new entities: the node writes (one query each) go on well after the kill is sent.
DOOMED = [{"source": f"Valve {i}", "target": f"Main {i}", "relation": "feeds",
           "fact": f"Valve {i} feeds water main {i}"} for i in range(120)]
KILL_AFTER_WRITES = 3  # node writes the database has done when it dies


def _graph_state(get) -> tuple:
    stats = get("stats")
    nodes = sorted(n["name"] for n in get("nodes?limit=500")["items"])
    edges = sorted(e["fact"] for e in get("edges?limit=500")["items"])
    return stats["nodes"], stats["edges"], nodes, edges


def test_database_killed_mid_import_answers_503_and_leaves_no_stray_entities(client, graph_id):
    assert client.post(f"/api/graph/{graph_id}/facts", json={"facts": WATER_FACTS}).status_code == 201

    def get(path):
        response = client.get(f"/api/graph/{graph_id}/{path}")
        assert response.status_code == 200, response.get_json()
        return response.get_json()

    before = _graph_state(get)
    database = graph_runtime._get_graphiti().embedded_db
    with KillAtCommand(database.port, database.process.pid, (ENTITY_WRITE, graph_id), KILL_AFTER_WRITES) as killer:
        response = client.post(f"/api/graph/{graph_id}/facts", json={"facts": DOOMED})
    assert killer.killed.is_set(), "the database was not killed mid-import"

    assert response.status_code == 503 and response.headers["Retry-After"] == "5", response.get_json()
    error = response.get_json()["error"]
    assert error["code"] == "graph_unavailable" and error["stored"] == 0, error
    assert error["message"].startswith("the embedded FalkorDB does not answer"), error
    # The next request restarts the database and cleans up, also when it comes before the killed
    # server has been reaped (it refuses connections a moment before its process is gone).
    assert _graph_state(get) == before
    again = client.post(f"/api/graph/{graph_id}/facts", json={"facts": DOOMED})
    assert again.status_code == 201 and again.get_json()["entities_created"] == 2 * len(DOOMED)


def test_app_killed_mid_import_leaves_the_graph_as_it_was_after_restart(tmp_path):
    data_dir, gid = tmp_path / "data", unique_graph_id("crash")
    with AppProcess(data_dir, tmp_path / "first.log") as app:
        assert call(app.url("/api/graph"), "POST", {"graph_id": gid})[0] == 201
        assert call(app.url(f"/api/graph/{gid}/facts"), "POST", {"facts": WATER_FACTS})[0] == 201
        before = _graph_state(lambda path: call(app.url(f"/api/graph/{gid}/{path}"))[1])
        database_pid = app.falkordb_pid()
        answered: list = []
        request = threading.Thread(target=lambda: answered.append(_send(app, gid, DOOMED)))
        with KillAtCommand(port_of(database_pid), app.process.pid, (ENTITY_WRITE, gid), KILL_AFTER_WRITES) as killer:
            request.start()
            assert killer.killed.wait(120), "the app was not killed mid-import"
        request.join(timeout=30)
        assert answered == [None], "the import was answered although the app was killed under it"
        assert wait_gone(database_pid), "the embedded FalkorDB outlived the app"

    with AppProcess(data_dir, tmp_path / "second.log") as app:  # same data, fresh processes
        assert _graph_state(lambda path: call(app.url(f"/api/graph/{gid}/{path}"))[1]) == before
        status, body = call(app.url(f"/api/graph/{gid}/facts"), "POST", {"facts": DOOMED})
        assert status == 201 and body["entities_created"] == 2 * len(DOOMED), body


def _send(app, gid, facts):
    try:
        return call(app.url(f"/api/graph/{gid}/facts"), "POST", {"facts": facts}, timeout=120)
    except OSError:  # the app died under the request
        return None
