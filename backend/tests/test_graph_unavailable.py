"""A graph database that is down, restarting (loading its data) or refusing the password: every
endpoint that needs it answers 503 `graph_unavailable` with Retry-After and a message that says which
database and what, never a 500, and works again once the database is back.

Real parts: the app's embedded FalkorDB killed with SIGKILL, and a FalkorDB reached by FALKORDB_URL
(the same redis-server and module, tests/support/falkordb_server.py) with a password, killed and
restarted slowly. Neo4j has no server here; its driver's errors go through the same mapping as
FalkorDB's, checked at the end through the Flask error handler with the exception classes the neo4j
driver raises.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
from contextlib import contextmanager

import pytest
import redis
from neo4j.exceptions import AuthError, Neo4jError, ServiceUnavailable, SessionExpired

from app import create_app
from app.config import Config
from app.graph import runtime as graph_runtime
from app.graph import unavailable
from app.graph.loop import GraphTimeoutError
from tests.conftest import unique_graph_id
from tests.support.facts import WATER_FACTS
from tests.support.falkordb_server import FalkorDBServer

PASSWORD = "falkor-pass-5ecret"
EXTRA_FACT = {"source": "Harbor Island", "target": "Lighthouse", "relation": "has",
              "fact": "Harbor Island has a lighthouse built in 1871"}


def assert_unavailable(response, says: str) -> dict:
    """503 graph_unavailable with Retry-After, its message containing `says`; the error object."""
    body = response.get_json()
    assert response.status_code == 503, (response.status_code, body)
    assert response.headers.get("Retry-After") == str(int(unavailable.RETRY_AFTER_S))
    error = body["error"]
    assert error["code"] == "graph_unavailable" and says in error["message"], error
    assert "Traceback" not in error["message"]
    return error


def every_endpoint(client, graph_id: str) -> dict:
    """One request to each endpoint that needs the database, in this order; name -> response."""
    calls = {
        "list graphs": lambda: client.get("/api/graph"),
        "create graph": lambda: client.post("/api/graph", json={"graph_id": unique_graph_id("down")}),
        "stats": lambda: client.get(f"/api/graph/{graph_id}/stats"),
        "edges": lambda: client.get(f"/api/graph/{graph_id}/edges"),
        "search": lambda: client.post(f"/api/graph/{graph_id}/search", json={"query": "drinking water"}),
        "import": lambda: client.post(f"/api/graph/{graph_id}/facts", json={"facts": [EXTRA_FACT]}),
        "delete": lambda: client.delete(f"/api/graph/{graph_id}"),
        "report": lambda: client.post(f"/api/report/{graph_id}", json={"requirement": "Who runs the water utility?"}),
        "health": lambda: client.get("/health"),  # last: before any graph request it has nothing to report
    }
    return {name: call() for name, call in calls.items()}


def _water_graph(client, graph_id: str) -> dict:
    assert client.post(f"/api/graph/{graph_id}/facts", json={"facts": WATER_FACTS}).status_code == 201
    return client.get(f"/api/graph/{graph_id}/stats").get_json()


# --- the embedded FalkorDB ---------------------------------------------------------------------

def test_requests_sent_as_the_embedded_falkordb_is_killed_never_answer_500(client, graph_id):
    """The race behind a 500: a killed server refuses connections before the app can see that its
    process has exited. The request that meets it answers 503; the next one restarts it. (The window
    is short: a few rounds make meeting it likely.)"""
    before = _water_graph(client, graph_id)
    for _ in range(5):
        database = graph_runtime.current_runtime().embedded_db
        dead_pid = database.process.pid
        os.kill(dead_pid, signal.SIGKILL)
        first = client.get(f"/api/graph/{graph_id}/stats")  # at once: the server is dying or gone
        if first.status_code != 200:  # 200 when it was already gone and this request restarted it
            assert_unavailable(first, "the embedded FalkorDB does not answer")
        after = client.get(f"/api/graph/{graph_id}/stats")
        assert after.status_code == 200, after.get_json()
        assert after.get_json() == before and database.process.pid != dead_pid


@contextmanager
def _port_taken(port: int):
    """Another program listening on the port: a restarted server cannot bind it and exits."""
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # the killed server's port is in TIME_WAIT
    holder.bind(("127.0.0.1", port))
    holder.listen()
    try:
        yield
    finally:
        holder.close()


def test_every_endpoint_answers_503_while_the_killed_embedded_falkordb_cannot_come_back(
        client, graph_id, monkeypatch):
    before = _water_graph(client, graph_id)
    database = graph_runtime.current_runtime().embedded_db
    os.kill(database.process.pid, signal.SIGKILL)
    database.process.wait(timeout=10)
    with _port_taken(database.port):
        answers = every_endpoint(client, graph_id)
    for name, answer in answers.items():
        error = assert_unavailable(answer, "the embedded FalkorDB does not answer")
        assert "could not be restarted" in error["message"], (name, error)
    health = answers["health"].get_json()
    assert health["status"] == "unavailable" and health["graph_runtime"] == "unavailable"
    assert health["graph_error"] == health["error"]["message"]

    monkeypatch.setattr(unavailable, "RETRY_AFTER_S", 0.0)  # the port is free again: no need to wait
    health = client.get("/health")
    assert health.status_code == 200 and health.get_json()["graph_runtime"] == "ready", health.get_json()
    assert client.get(f"/api/graph/{graph_id}/stats").get_json() == before  # nothing was written meanwhile


# --- a FalkorDB reached by FALKORDB_URL --------------------------------------------------------

@pytest.fixture
def falkordb_server(tmp_path):
    server = FalkorDBServer(tmp_path / "falkordb", password=PASSWORD).start()
    yield server
    graph_runtime.reset_graphiti()  # the app's client to this server, before the server goes
    graph_runtime._failed_starts.forget()
    server.kill()


def test_a_falkordb_that_refuses_the_password_answers_503_saying_so(backend, falkordb_server, caplog):
    wrong = "wrong-pass-7c1d"
    _, client = backend(FALKORDB_URL=falkordb_server.url(password=wrong))
    says = f"FalkorDB at 127.0.0.1:{falkordb_server.port} refused the credentials"
    answers = every_endpoint(client, "water")
    for answer in answers.values():
        assert_unavailable(answer, says)
    shown = json.dumps([answer.get_json() for answer in answers.values()]) + caplog.text
    assert wrong not in shown and PASSWORD not in shown

    _, client = backend(FALKORDB_URL=falkordb_server.url())  # the right password
    graph_id = unique_graph_id("auth")
    assert client.post("/api/graph", json={"graph_id": graph_id}).status_code == 201
    assert client.get("/health").get_json()["graph_runtime"] == "ready"


def test_a_falkordb_that_dies_and_reloads_its_data_answers_503_saying_which_and_what(backend, falkordb_server):
    _, client = backend(FALKORDB_URL=falkordb_server.url())
    graph_id = unique_graph_id("reload")
    assert client.post("/api/graph", json={"graph_id": graph_id}).status_code == 201
    before = _water_graph(client, graph_id)
    where = f"FalkorDB at 127.0.0.1:{falkordb_server.port}"
    # Keys enough that a slowed load lasts well beyond the requests below (60 x 0.3 s).
    filler = falkordb_server.client()
    for number in range(60):
        filler.execute_command("GRAPH.QUERY", f"filler_{number}", "CREATE (:Filler {n: 1})")
    filler.close()
    falkordb_server.rewrite_append_only_file()

    falkordb_server.kill()
    for name, answer in every_endpoint(client, graph_id).items():
        assert_unavailable(answer, f"{where} does not answer")

    # Back, but replaying its data for a while: LOADING, which the client retries, then gives up on.
    falkordb_server.start("--key-load-delay", "300000", "--loading-process-events-interval-bytes", "1024")
    for answer in (client.get("/api/graph"), client.get(f"/api/graph/{graph_id}/stats"), client.get("/health")):
        assert_unavailable(answer, f"{where} is loading its data")

    falkordb_server.kill()
    falkordb_server.start()  # and once it has loaded, everything answers again, with nothing lost
    assert client.get(f"/api/graph/{graph_id}/stats").get_json() == before
    assert client.get("/health").status_code == 200


# --- the mapping, for drivers' errors raised after a good start --------------------------------

def _caused_by(cause: BaseException) -> RuntimeError:
    """`cause` as a wrapper raises it: graphiti, or our own code, raising while handling it."""
    try:
        try:
            raise cause
        except type(cause) as error:
            raise RuntimeError("the operation failed") from error
    except RuntimeError as wrapper:
        return wrapper


NEO4J = {"GRAPH_BACKEND": "neo4j", "NEO4J_URI": "bolt://neo4j:uri-5ecret@graphs.internal:7688",
         "NEO4J_PASSWORD": "env-5ecret"}
FALKORDB_URL = {"GRAPH_BACKEND": "falkordb", "FALKORDB_URL": "redis://:url-5ecret@falkor.internal:6380"}
EMBEDDED = {"GRAPH_BACKEND": "falkordb"}


@pytest.mark.parametrize("settings, error, says", [
    (NEO4J, AuthError("The client is unauthorized due to authentication failure."),
     "Neo4j at graphs.internal:7688 refused the credentials: check NEO4J_USER and NEO4J_PASSWORD"),
    (NEO4J, ServiceUnavailable("Couldn't connect to graphs.internal:7688"),
     "Neo4j at graphs.internal:7688 does not answer (ServiceUnavailable)"),
    (NEO4J, SessionExpired("Failed to read from defunct connection"),
     "Neo4j at graphs.internal:7688 does not answer (SessionExpired)"),
    (NEO4J, _caused_by(ServiceUnavailable("gone")), "Neo4j at graphs.internal:7688 does not answer (ServiceUnavailable)"),
    (NEO4J, Neo4jError._hydrate_neo4j(code="Neo.TransientError.General.DatabaseUnavailable", message="starting"),
     "Neo4j at graphs.internal:7688 is loading its data"),
    (FALKORDB_URL, redis.exceptions.AuthenticationError("invalid username-password pair"),
     "FalkorDB at falkor.internal:6380 refused the credentials: check the user name and password in FALKORDB_URL"),
    (FALKORDB_URL, redis.exceptions.BusyLoadingError("Redis is loading the dataset in memory"),
     "FalkorDB at falkor.internal:6380 is loading its data"),
    (FALKORDB_URL, redis.exceptions.TimeoutError("Timeout reading from socket"),
     "FalkorDB at falkor.internal:6380 does not answer (TimeoutError)"),
    (EMBEDDED, _caused_by(redis.exceptions.ConnectionError("Error while reading from 127.0.0.1:6390")),
     "the embedded FalkorDB does not answer (ConnectionError)"),
], ids=["neo4j-auth", "neo4j-down", "neo4j-session", "neo4j-wrapped", "neo4j-starting", "falkordb-auth",
        "falkordb-loading", "falkordb-timeout", "embedded-wrapped"])
def test_a_database_error_reaching_any_view_answers_503_naming_the_database(monkeypatch, settings, error, says):
    for key, value in settings.items():
        monkeypatch.setenv(key, value)
    response = _raised_through_a_view(error)
    assert_unavailable(response, says)
    assert "5ecret" not in response.get_data(as_text=True)


@pytest.mark.parametrize("error, status, code", [
    (RuntimeError("a bug"), 500, "internal_error"),
    # A bare socket error may be another server's (the model server's): the database clients wrap theirs.
    (_caused_by(ConnectionRefusedError(111, "Connection refused")), 500, "internal_error"),
    (GraphTimeoutError("graph operation did not finish within 1s"), 504, "timeout"),  # a TimeoutError, not a 503
])
def test_errors_that_do_not_say_the_database_is_unusable_keep_their_answer(monkeypatch, error, status, code, caplog):
    for key, value in NEO4J.items():
        monkeypatch.setenv(key, value)
    with caplog.at_level(logging.CRITICAL, logger="app.api.errors"):
        response = _raised_through_a_view(error)
    assert response.status_code == status and response.get_json()["error"]["code"] == code
    assert "Retry-After" not in response.headers


def _raised_through_a_view(error: BaseException):
    """The app on the current settings (nothing is started), with one extra view that raises `error`."""
    app = create_app(Config.from_env())

    @app.get("/raises")
    def raises():
        raise error

    return app.test_client().get("/raises")
