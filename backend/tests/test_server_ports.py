"""Servers started on a free port: the one that answers there is the one started, and a served app
goes when whoever started it is killed outright.

A server started on a free port is the one that answers there. `free_port` only finds a port that
nobody listens on at that moment; on a busy machine another process can bind it before the server
does, and a start that took any answer on the port for its own would hand the app (or a bench, or a
test) another process's data. Each start here meets a real server already on its port."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import redis
from neo4j import GraphDatabase

from bench.load_run import ServedApp, request_json
from app.config import Config
from app.graph import local_neo4j, server_process
from app.graph.embedded_falkordb import EmbeddedFalkorDB, _answering_pid
from app.graph.server_process import PortTakenError, free_port, listens_on
from tests.support.app_process import BACKEND_DIR, wait_gone
from tests.support.falkordb_server import FalkorDBServer


@pytest.fixture
def foreign_falkordb(tmp_path):
    """Another FalkorDB on a port of its own, holding one graph."""
    server = FalkorDBServer(tmp_path / "foreign").start()
    client = server.client()
    client.execute_command("GRAPH.QUERY", "theirs", "CREATE (:Reading {value: 1})")
    yield server
    client.close()
    server.process.terminate()
    server.process.wait(timeout=10)


def _graphs(port: int) -> list[str]:
    client = redis.Redis(host="127.0.0.1", port=port)
    try:
        return sorted(name.decode() for name in client.execute_command("GRAPH.LIST"))
    finally:
        client.close()


def test_listens_on_tells_the_process_that_holds_a_port():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert listens_on(os.getpid(), port)
        assert not listens_on(os.getpid(), free_port())
        assert not listens_on(os.getppid(), port)


def test_embedded_falkordb_chooses_another_port_when_its_own_was_taken(tmp_path, foreign_falkordb,
                                                                        monkeypatch, caplog):
    chosen = iter([foreign_falkordb.port])  # the race, made certain: the first port handed out is taken
    monkeypatch.setattr(server_process, "free_port", lambda: next(chosen, None) or free_port())
    server = EmbeddedFalkorDB(tmp_path / "ours")
    with caplog.at_level(logging.WARNING, logger="app.graph.server_process"):
        server.start()
    try:
        assert server.port != foreign_falkordb.port
        client = redis.Redis(host=server.host, port=server.port)
        assert int(client.info("server")["process_id"]) == server.process.pid
        client.execute_command("GRAPH.QUERY", "ours", "CREATE (:Reading {value: 2})")
        client.close()
        assert _graphs(foreign_falkordb.port) == ["theirs"]  # nothing of ours went to the other server
        assert f"Port {foreign_falkordb.port} was taken" in caplog.text
    finally:
        server.stop()


def test_embedded_falkordb_on_a_given_port_that_is_taken_refuses_to_start(tmp_path, foreign_falkordb):
    server = EmbeddedFalkorDB(tmp_path / "ours", port=foreign_falkordb.port)

    with pytest.raises(PortTakenError, match=f"port {foreign_falkordb.port} is taken"):
        server.start(ready_timeout_s=30)

    assert server.process is None or server.process.poll() is not None
    assert _graphs(foreign_falkordb.port) == ["theirs"]


def test_a_poll_connected_to_itself_is_no_answer():
    # Connecting to a port nobody listens on can, rarely, give the connection that very port as its
    # own: it is connected to itself and reads back what it sent (TCP's simultaneous open).
    with socket.socket() as itself:
        itself.bind(("127.0.0.1", 0))
        itself.connect(itself.getsockname())
        itself.sendall(b"echo")
        assert itself.recv(4) == b"echo"

        class ConnectedToItself(redis.connection.Connection):
            def _connect(self):
                return itself

        client = redis.Redis(connection_pool=redis.ConnectionPool(connection_class=ConnectedToItself))
        assert _answering_pid(client) is None


def test_a_local_neo4j_whose_chosen_port_was_taken_starts_on_another(tmp_path, monkeypatch, caplog):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        chosen = iter([port])
        monkeypatch.setattr(server_process, "free_port", lambda: next(chosen, None) or free_port())
        server = local_neo4j.LocalNeo4j(tmp_path / "data", Config.from_env().neo4j_cache_dir,
                                        heap_mb=512, page_cache_mb=64)
        with caplog.at_level(logging.WARNING, logger="app.graph.server_process"):
            server.start()
        try:
            assert server.port != port and f"Port {port} was taken" in caplog.text
            with GraphDatabase.driver(server.uri, auth=(local_neo4j.USER, server.password)) as driver:
                assert driver.execute_query("RETURN 1 AS one").records[0]["one"] == 1
        finally:
            server.stop()


class _HealthyStranger(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - the name http.server calls
        body = json.dumps({"status": "ok"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_a_served_app_whose_port_was_taken_serves_on_another_and_answers_itself(tmp_path):
    stranger = ThreadingHTTPServer(("127.0.0.1", 0), _HealthyStranger)
    threading.Thread(target=stranger.serve_forever, daemon=True).start()
    app = ServedApp(tmp_path / "data", tmp_path / "serve.log", 2, {"RERANKER_PROVIDER": "none"})
    app.port = stranger.server_address[1]  # the race, made certain
    app.env["PORT"] = str(app.port)
    try:
        app.start(timeout_s=120)
        assert app.port != stranger.server_address[1]
        assert listens_on(app.process.pid, app.port)
        status, body = request_json(app.port, "GET", "/health")
        assert status == 200 and body["graph_backend"] == "falkordb"  # the app's answer, not the stranger's
    finally:
        app.stop()
        stranger.shutdown()
        stranger.server_close()


_BENCH_THAT_SERVES = """
import sys
from pathlib import Path
from bench.load_run import ServedApp
app = ServedApp(Path(sys.argv[1]) / "data", Path(sys.argv[1]) / "serve.log", 2, {"RERANKER_PROVIDER": "none"})
app.start(timeout_s=120)
print(app.process.pid, app.database_pid(), flush=True)
sys.stdin.read()  # until it is killed
"""


def test_a_served_app_goes_with_a_bench_that_is_killed_outright(tmp_path):
    bench = subprocess.Popen([sys.executable, "-c", _BENCH_THAT_SERVES, str(tmp_path)], cwd=BACKEND_DIR,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        app_pid, database_pid = (int(pid) for pid in bench.stdout.readline().split())
        bench.kill()  # SIGKILL: no finally, no atexit in the bench
        bench.wait(timeout=10)
        assert wait_gone(app_pid, 60) and wait_gone(database_pid, 60)
    finally:
        bench.kill()
