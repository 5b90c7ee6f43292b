"""The API's server (app/cli/server.py: gunicorn, as `flask serve` and the image run it), with real
processes and real signals: a stop lets the requests in flight finish within SHUTDOWN_GRACE_S and
refuses new connections at once; one that outlasts the grace is cut off, and the server is gone
soon after; the server refuses to listen beyond loopback without API_TOKEN, in one line.

The request in flight is a reranked search whose judge (the scripted OpenAI-compatible server) takes
JUDGE_S to answer each passage, so the search is inside the app, waiting on the model, when the
signal comes."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.support.app_process import BACKEND_DIR, AppProcess, call, wait_gone
from tests.support.facts import WATER_FACTS
from tests.support.scripted_llm import ScriptedLLMServer, delay, hang, judge

JUDGE_S = 6.0
GRACE_S = 30
SEARCH = {"query": "who runs the water utility?", "limit": 3}


def _judged_env(llm: ScriptedLLMServer, **extra: str) -> dict[str, str]:
    return {"RERANKER_PROVIDER": "ollama", "RERANKER_BASE_URL": llm.base_url, "RERANKER_MODEL": "judge",
            "RERANKER_CACHE_SIZE": "0", "RERANKER_MAX_PARALLEL": "32", "RERANKER_TIMEOUT_S": "120",
            "RERANKER_DEADLINE_S": "120", **extra}


def _graph_with_facts(app: AppProcess) -> str:
    assert call(app.url("/api/graph"), "POST", {"graph_id": "drain"})[0] == 201
    assert call(app.url("/api/graph/drain/facts"), "POST", {"facts": WATER_FACTS})[0] == 201
    return "drain"


def _search_in_background(app: AppProcess, graph_id: str, answer: dict) -> threading.Thread:
    def search() -> None:
        try:
            answer["status"], answer["body"] = call(app.url(f"/api/graph/{graph_id}/search"), "POST", SEARCH,
                                                    timeout=180)
        except OSError as error:  # the server went away under the request
            answer["error"] = error
        answer["finished_at"] = time.monotonic()

    thread = threading.Thread(target=search, daemon=True)
    thread.start()
    return thread


def _wait_in_flight(llm: ScriptedLLMServer, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while llm.in_flight == 0:
        assert time.monotonic() < deadline, "the search never reached the judge"
        time.sleep(0.02)


def _refused(port: int, timeout_s: float = 5) -> float | None:
    """When a new connection to the port is first refused (monotonic time), or None within timeout_s."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except ConnectionRefusedError:
            return time.monotonic()
        except OSError:  # accepted just before the socket closed, then reset: try again
            pass
        time.sleep(0.02)
    return None


def test_sigterm_finishes_the_search_in_flight_refuses_new_connections_and_exits_0(tmp_path):
    with ScriptedLLMServer(judge(lambda query, passage: delay(JUDGE_S, 0.8))) as llm:
        app = AppProcess(tmp_path / "data", tmp_path / "app.log",
                         **_judged_env(llm, SHUTDOWN_GRACE_S=str(GRACE_S))).start()
        try:
            graph_id = _graph_with_facts(app)
            database_pid = app.falkordb_pid()
            answer: dict = {}
            searching = _search_in_background(app, graph_id, answer)
            _wait_in_flight(llm)

            stopped_at = time.monotonic()
            app.process.send_signal(signal.SIGTERM)
            refused_at = _refused(app.port)
            assert refused_at is not None, app.log_tail()
            assert "finished_at" not in answer  # refused while the search was still running

            assert app.process.wait(timeout=GRACE_S + 30) == 0, app.log_tail()
            exited_after_s = time.monotonic() - stopped_at
            searching.join(30)
        finally:
            app.stop()
    assert answer.get("status") == 200, (answer, app.log_tail())
    assert answer["body"]["reranked"] is True and answer["body"]["edges"]  # judged to the end, not cut short
    assert answer["finished_at"] - stopped_at >= JUDGE_S / 2  # it was in flight at the signal
    assert exited_after_s < GRACE_S, app.log_tail()
    assert wait_gone(database_pid, 30)  # the worker stopped the embedded FalkorDB it had started
    log = app.log_tail(200)
    assert "Stopping: new connections refused" in log and "Embedded FalkorDB stopped" in log


def test_a_request_that_outlasts_the_grace_is_cut_off_and_the_server_goes(tmp_path):
    with ScriptedLLMServer(judge(lambda query, passage: hang())) as llm:
        grace_s = 3
        app = AppProcess(tmp_path / "data", tmp_path / "app.log",
                         **_judged_env(llm, SHUTDOWN_GRACE_S=str(grace_s))).start()
        try:
            graph_id = _graph_with_facts(app)
            database_pid = app.falkordb_pid()
            answer: dict = {}
            searching = _search_in_background(app, graph_id, answer)
            _wait_in_flight(llm)
            stopped_at = time.monotonic()
            app.process.send_signal(signal.SIGTERM)
            app.process.wait(timeout=grace_s + 30)
            exited_after_s = time.monotonic() - stopped_at
            searching.join(30)
        finally:
            app.stop()
    assert "error" in answer, answer  # cut off: no answer at all, never a half-written one
    assert grace_s <= exited_after_s < grace_s + 10, exited_after_s
    assert wait_gone(database_pid, 30)  # the killed worker's FalkorDB followed it


def _dockerfile_command() -> list[str]:
    text = (BACKEND_DIR / "Dockerfile").read_text(encoding="utf-8")
    return json.loads(re.findall(r"^CMD (\[.*\])$", text, re.M)[-1])


def _clean_env(tmp_path: Path, **settings: str) -> dict[str, str]:
    return {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "DOTENV_PATH": os.devnull,
            "DATA_DIR": str(tmp_path / "data"), "GRAPHITI_TELEMETRY_ENABLED": "false", **settings}


def test_the_image_command_serves_and_stops_cleanly(tmp_path):
    """The Dockerfile's CMD as it stands (gunicorn with the settings' configuration), on loopback here."""
    command = _dockerfile_command()
    assert Path(sys.executable).with_name(command[0]).exists()  # installed with the production dependencies
    app = AppProcess(tmp_path / "data", tmp_path / "app.log", HOST="127.0.0.1", API_TOKEN="tok-image-3c9d",
                     API_THREADS="4")
    with open(app.log_path, "ab") as log:
        process = subprocess.Popen([str(Path(sys.executable).with_name(command[0])), *command[1:]], cwd=BACKEND_DIR,
                                   env=app.env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None and time.monotonic() < deadline, app.log_tail()
            try:
                if call(app.url("/health"), timeout=2)[0] == 200:
                    break
            except OSError:
                time.sleep(0.2)
        assert call(app.url("/api/graph"))[0] == 401
        assert call(app.url("/api/graph"), headers={"Authorization": "Bearer tok-image-3c9d"})[0] == 200
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0, app.log_tail()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    log = app.log_tail(200)
    assert "DrainingThreadWorker" in log and "Embedded FalkorDB stopped" in log


def test_serving_beyond_loopback_without_a_token_is_refused_in_one_line(tmp_path):
    gunicorn = [str(Path(sys.executable).with_name(_dockerfile_command()[0])), *_dockerfile_command()[1:]]
    flask_serve = [sys.executable, "-m", "flask", "--app", "app", "serve"]
    for command in (gunicorn, flask_serve):
        for host in ("0.0.0.0", "::", "192.0.2.10"):
            result = subprocess.run(command, cwd=BACKEND_DIR, env=_clean_env(tmp_path, HOST=host, PORT="0"),
                                    capture_output=True, text=True, timeout=120)
            assert result.returncode != 0
            lines = (result.stdout + result.stderr).strip().splitlines()
            assert lines == [f"Error: API_TOKEN is required: HOST={host} listens beyond this machine "
                             "(set API_TOKEN, or HOST=127.0.0.1)"], lines
    # Workers beyond one need a database server: the embedded FalkorDB serves one process.
    result = subprocess.run([*flask_serve, "--workers", "2"], cwd=BACKEND_DIR, env=_clean_env(tmp_path),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "API_WORKERS=2 needs a database server (FALKORDB_URL)" in result.stderr
