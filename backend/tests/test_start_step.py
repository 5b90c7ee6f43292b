"""The start step of a served app (app/cli/start.py): `flask serve` and the image's command (gunicorn with
app/cli/gunicorn_conf.py) connect each worker to the graph database before it takes requests. A
database that refuses the password or does not answer ends the server at once with one line that
names the database, what is wrong and the setting to check, exit status 3 (gunicorn's "worker failed
to boot"): no stack trace, no password, no server left answering 503 to everything.

Real processes on real servers: the session's local Neo4j (tests/support/graph_backends.py) given a
wrong password, and a FALKORDB_URL whose port nothing listens on."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from app.cli.start import START_FAILED_EXIT
from app.graph.server_process import free_port
from tests.support.app_process import BACKEND_DIR
from tests.support.graph_backends import neo4j_env

SECRET = "wrong-5ecret-pass"
ENTRIES = ("flask serve", "gunicorn")


def start(entry: str, tmp_path, **env: str) -> tuple[int, list[str]]:
    """Run the entry point as production does until it exits: (exit status, its output's lines)."""
    port = free_port()
    command = {"flask serve": [sys.executable, "-m", "flask", "--app", "app", "serve", "--threads", "2"],
               "gunicorn": [sys.executable, "-m", "gunicorn", "--config", "python:app.cli.gunicorn_conf",
                            "app.wsgi:app"]}[entry]
    result = subprocess.run(command, cwd=BACKEND_DIR, capture_output=True, text=True, timeout=240, env={
        **os.environ, "DOTENV_PATH": os.devnull, "DATA_DIR": str(tmp_path / "data"), "HOST": "127.0.0.1",
        "PORT": str(port), "EMBEDDING_PROVIDER": "local", "RERANKER_PROVIDER": "none", "LOG_LEVEL": "INFO",
        "GRAPHITI_TELEMETRY_ENABLED": "false", **env})
    return result.returncode, (result.stdout + result.stderr).splitlines()


def assert_failed_in_one_line(status: int, lines: list[str], expected: str) -> None:
    output = "\n".join(lines)
    assert status == START_FAILED_EXIT, output[-3000:]
    assert [line for line in lines if line.startswith("Cannot start")] == [expected], output[-3000:]
    assert "Traceback" not in output and SECRET not in output
    assert "Worker failed to boot" in output  # the master stopped: nothing was left to take requests


@pytest.mark.parametrize("entry", ENTRIES)
def test_a_wrong_neo4j_password_ends_the_start_naming_the_setting(entry, neo4j_server, tmp_path):
    status, lines = start(entry, tmp_path, **neo4j_env(neo4j_server, NEO4J_PASSWORD=SECRET))
    where = f"127.0.0.1:{neo4j_server.port}"
    assert_failed_in_one_line(status, lines, (
        f"Cannot start: Neo4j at {where} refused the credentials: check NEO4J_USER and NEO4J_PASSWORD "
        f"(NEO4J_URI=bolt://{where})"))


@pytest.mark.parametrize("entry", ENTRIES)
def test_an_unreachable_falkordb_url_ends_the_start_naming_the_setting(entry, tmp_path):
    dead = free_port()  # nothing listens on it
    status, lines = start(entry, tmp_path, GRAPH_BACKEND="falkordb", FALKORDB_URL=f"redis://:{SECRET}@127.0.0.1:{dead}")
    assert_failed_in_one_line(status, lines, (
        f"Cannot start: FalkorDB at 127.0.0.1:{dead} does not answer (ConnectionError); is it running and "
        f"reachable? (FALKORDB_URL=redis://127.0.0.1:{dead})"))
