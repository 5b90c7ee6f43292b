"""`flask import-facts`: a JSONL file into a graph through the served API (gunicorn, the embedded
FalkorDB, the in-process embedder), checked whole first, in batches, resumable after the server dies
or the command is interrupted, and every fact stored exactly once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from bench.load_run import ServedApp, request_json, synthetic_facts
from app.cli import fact_upload
from app.cli.fact_upload import Api, ServerUnreachable, Upload, UploadError, read_state
from tests.support.app_process import AppProcess, call

BACKEND = Path(__file__).resolve().parents[1]


@pytest.fixture
def served(tmp_path):
    started: list[ServedApp] = []

    def serve(data_dir: Path | None = None) -> ServedApp:
        app = ServedApp(data_dir or tmp_path / "data", tmp_path / "serve.log", 4, {"RERANKER_PROVIDER": "none"})
        started.append(app.start())
        return app

    yield serve
    for app in started:
        app.stop()


def _write(path: Path, facts: list[dict]) -> Path:
    path.write_text("".join(json.dumps(fact) + "\n" for fact in facts), encoding="utf-8")
    return path


def _edges(app: ServedApp, graph_id: str) -> int:
    status, body = request_json(app.port, "GET", f"/api/graph/{graph_id}/stats")
    assert status == 200, body
    return body["edges"]


def test_a_file_goes_in_batches_and_each_fact_is_stored_once(served, tmp_path):
    app = served()
    path = _write(tmp_path / "facts.jsonl", synthetic_facts(25, sensors=5))
    lines: list[str] = []

    progress = Upload(Api(f"http://127.0.0.1:{app.port}"), path, "up", batch_size=10, create=True).run(lines.append)

    assert _edges(app, "up") == 25
    assert progress.acknowledged == 25 and [batch["facts"] for batch in progress.batches] == [10, 10, 5]
    assert len(lines) == 3 and lines[-1].startswith("25/25 facts acknowledged")
    state = read_state(tmp_path / "facts.jsonl.up.import-state.json")
    assert (state.acknowledged, state.imported, state.skipped_duplicates) == (25, 25, 0)

    again = Upload(Api(f"http://127.0.0.1:{app.port}"), path, "up", batch_size=10).run(lines.append)
    assert again.acknowledged == 25 and again.batches == []  # finished: nothing is sent again
    assert _edges(app, "up") == 25


def test_batches_in_flight_together_are_counted_in_file_order(served, tmp_path):
    app = served()
    path = _write(tmp_path / "facts.jsonl", synthetic_facts(40, sensors=40))  # a new sensor per fact
    lines: list[str] = []

    progress = Upload(Api(f"http://127.0.0.1:{app.port}"), path, "flight", batch_size=5, in_flight=3,
                      create=True).run(lines.append)

    counts = [int(line.split("/")[0]) for line in lines]
    assert counts == sorted(set(counts)) and counts[-1] == 40  # only ever forward, each gapless prefix once
    assert sum(batch["facts"] for batch in progress.batches) == 40
    assert _edges(app, "flight") == 40


def test_a_bad_line_stops_the_import_before_anything_is_stored(served, tmp_path):
    app = served()
    facts = synthetic_facts(30)
    facts[26] = {"source": "a", "target": "b", "relation": "r"}  # no 'fact'
    path = _write(tmp_path / "facts.jsonl", facts)

    with pytest.raises(UploadError, match="line 27") as refused:
        Upload(Api(f"http://127.0.0.1:{app.port}"), path, "bad", batch_size=10, create=True).run(lambda _: None)
    assert "fact" in str(refused.value)
    assert request_json(app.port, "GET", "/api/graph/bad/stats")[0] == 404  # not even the graph was made

    (tmp_path / "broken.jsonl").write_text('{"source": "a"\n', encoding="utf-8")
    with pytest.raises(UploadError, match="line 1: not valid JSON"):
        Upload(Api(f"http://127.0.0.1:{app.port}"), tmp_path / "broken.jsonl", "bad").run(lambda _: None)


def test_a_missing_graph_is_named_unless_create_is_given(served, tmp_path):
    app = served()
    path = _write(tmp_path / "facts.jsonl", synthetic_facts(3))
    with pytest.raises(UploadError, match="graph 'nowhere' does not exist; create it first, or add --create"):
        Upload(Api(f"http://127.0.0.1:{app.port}"), path, "nowhere").run(lambda _: None)


def test_after_the_server_dies_the_same_upload_goes_on_where_it_stopped(served, tmp_path):
    app = served()
    path = _write(tmp_path / "facts.jsonl", synthetic_facts(60, sensors=6))
    url = f"http://127.0.0.1:{app.port}"

    def kill_after_two_batches(line: str) -> None:
        if line.startswith("20/"):
            app.process.send_signal(signal.SIGKILL)
            app.process.wait()

    with pytest.raises(ServerUnreachable, match="cannot reach the API at .*make serve"):
        Upload(Api(url), path, "crash", batch_size=10, create=True).run(kill_after_two_batches)
    state = read_state(tmp_path / "facts.jsonl.crash.import-state.json")
    assert state.acknowledged == 20

    again = served(tmp_path / "data")  # the same data, a new port
    lines: list[str] = []
    progress = Upload(Api(f"http://127.0.0.1:{again.port}"), path, "crash", batch_size=10).run(lines.append)

    assert progress.started_at == 20 and progress.acknowledged == 60
    assert sum(batch["facts"] for batch in progress.batches) == 40  # only what was not acknowledged
    assert _edges(again, "crash") == 60  # acknowledged facts kept, nothing stored twice


def test_a_graph_made_again_is_filled_from_the_start(served, tmp_path):
    app = served()
    path = _write(tmp_path / "facts.jsonl", synthetic_facts(12))
    api = Api(f"http://127.0.0.1:{app.port}")
    Upload(api, path, "again", batch_size=5, create=True).run(lambda _: None)
    assert request_json(app.port, "DELETE", "/api/graph/again")[0] == 200

    lines: list[str] = []
    progress = Upload(api, path, "again", batch_size=5, create=True).run(lines.append)

    assert any("starting over" in line for line in lines)
    assert progress.started_at == 0 and _edges(app, "again") == 12


def _command(*args: str, env: dict[str, str]) -> subprocess.Popen:
    # Ctrl-C as a terminal delivers it: a suite started in the background (`make test &`, CI) inherits
    # SIGINT ignored, and Python then never turns it into KeyboardInterrupt.
    return subprocess.Popen([sys.executable, "-m", "flask", "--app", "app", "import-facts", *args], cwd=BACKEND,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def test_the_command_stops_at_once_on_ctrl_c_and_goes_on_when_run_again(served, tmp_path):
    app = served()
    # Twelve small batches: the upload is still running when the interrupt arrives, however busy the machine
    # (each batch is embedded and written before the next; the interrupt follows the first line at once).
    path = _write(tmp_path / "facts.jsonl", synthetic_facts(60, sensors=20))
    env = {**os.environ, "DOTENV_PATH": os.devnull}
    args = (str(path), "--graph", "cli", "--create", "--url", f"http://127.0.0.1:{app.port}", "--batch-size", "5")

    first = _command(*args, env=env)
    line = first.stdout.readline()
    assert line.startswith("5/60 facts acknowledged"), line
    first.send_signal(signal.SIGINT)
    output, _ = first.communicate(timeout=30)
    assert first.returncode == 130, output
    assert "Interrupted; run the same command again to go on" in output
    stopped_at = read_state(tmp_path / "facts.jsonl.cli.import-state.json").acknowledged
    assert 5 <= stopped_at < 60

    second = _command(*args, env=env)
    output, _ = second.communicate(timeout=600)
    assert second.returncode == 0, output
    assert f"Resuming after {stopped_at:,} acknowledged facts" in output
    assert "Done: 60 facts acknowledged" in output
    assert _edges(app, "cli") == 60


def test_the_command_says_in_one_line_which_server_it_cannot_reach(tmp_path):
    path = _write(tmp_path / "facts.jsonl", synthetic_facts(2))
    done = subprocess.run([sys.executable, "-m", "flask", "--app", "app", "import-facts", str(path), "--graph", "g",
                           "--url", "http://127.0.0.1:9"], cwd=BACKEND, env={**os.environ, "DOTENV_PATH": os.devnull},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    error_lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(error_lines) == 1, done.stderr
    assert "cannot reach the API at http://127.0.0.1:9" in error_lines[0] and "make serve" in error_lines[0]


class _ScriptedImportApi:
    """An HTTP server answering the bulk import route with scripted statuses, one per request."""

    def __init__(self, statuses: list[int]):
        self.statuses, self.requests = list(statuses), 0
        scripted = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                scripted.requests += 1
                status = scripted.statuses.pop(0)
                body = json.dumps({"imported": 2, "skipped_duplicates": 0} if status == 201 else
                                  {"error": "import_failed", "message": f"scripted {status}"}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def api(self) -> Api:
        return Api(f"http://127.0.0.1:{self.server.server_address[1]}")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("statuses, stored", [([503, 201], True), ([503, 503, 503], False), ([400], False)])
def test_a_rolled_back_batch_is_sent_again_and_a_refused_one_is_not(monkeypatch, statuses, stored):
    monkeypatch.setattr(fact_upload, "RETRY_WAIT_S", 0.01)
    scripted = _ScriptedImportApi(statuses)
    try:
        facts = [{"source": "a", "target": "b", "relation": "r", "fact": "a r b"}] * 2
        if stored:
            assert scripted.api.import_batch("g", 0, facts)["imported"] == 2
        else:
            with pytest.raises(UploadError, match=rf"facts 1-2 of the file were refused: HTTP {statuses[-1]}"):
                scripted.api.import_batch("g", 0, facts)
        assert scripted.requests == len(statuses)  # 503 again up to RETRIES times; any other refusal once
    finally:
        scripted.close()


def test_the_command_sends_api_token_to_a_server_that_needs_it(tmp_path):
    """A served app with API_TOKEN: the command reads the same setting and sends it as a bearer token;
    without it, or with another, it stops at the first request in one line and nothing is stored."""
    path = _write(tmp_path / "facts.jsonl", synthetic_facts(6))
    with AppProcess(tmp_path / "data", tmp_path / "serve.log", API_TOKEN="tok-import-51e0",
                    RERANKER_PROVIDER="none") as app:
        base = {**os.environ, "DOTENV_PATH": os.devnull}
        base.pop("API_TOKEN", None)
        args = [sys.executable, "-m", "flask", "--app", "app", "import-facts", str(path), "--graph", "tok",
                "--create", "--url", app.url("")]
        for env, said in ((base, "set API_TOKEN to its token"),
                          ({**base, "API_TOKEN": "tok-not-this-one"}, "API_TOKEN is not its token")):
            refused = subprocess.run(args, cwd=BACKEND, env=env, capture_output=True, text=True, timeout=120)
            assert refused.returncode == 1, refused.stdout + refused.stderr
            assert refused.stderr.strip().splitlines() == [f"Error: the API at {app.url('')} answered HTTP 401: {said}"]
        assert call(app.url("/api/graph/tok/stats"), headers={"Authorization": "Bearer tok-import-51e0"})[0] == 404

        done = subprocess.run(args, cwd=BACKEND, env={**base, "API_TOKEN": "tok-import-51e0"}, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "Done: 6 facts acknowledged" in done.stdout
        status, stats = call(app.url("/api/graph/tok/stats"), headers={"Authorization": "Bearer tok-import-51e0"})
        assert status == 200 and stats["edges"] == 6
