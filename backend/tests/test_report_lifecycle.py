"""A report's state on disk tells the truth: a run that fails while writing is marked failed and
leaves no temporary file, and a report whose process died (kill -9, then a restart over the same
data) reads as "interrupted", not "running" forever. The app, its FalkorDB and the chat model are
real (the model is the scripted HTTP server)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from app.graph.runtime import GraphitiAdapter
from app.report.agent import ReportAgent
from app.report.store import ReportStore, new_report_id, now_iso
from app.tasks import PROCESS_OWNER, owner_alive
from tests.conftest import unique_graph_id
from tests.support.app_process import AppProcess, call
from tests.support.report_scripts import REPORT_FACTS, as_json, judge_or_chat, purpose
from tests.support.scripted_llm import ScriptedLLMServer, hang


def quick_writer(messages, body):
    kind = purpose(messages)
    if kind == "outline":
        return as_json({"title": "Ferries", "sections": [{"title": "Service", "goal": "How often it runs"}]})
    if kind == "section":
        return as_json({"action": "write", "content": "The ferry runs hourly."})
    return "unexpected"


def test_a_report_that_fails_while_writing_is_marked_failed_and_leaves_no_temporary_file(backend, scripted_llm):
    scripted_llm.responder = judge_or_chat(chat_fn=quick_writer)
    app, _ = backend(LLM_BASE_URL=scripted_llm.base_url, LLM_MODEL_NAME="writer", LLM_TIMEOUT_S=10)
    config = app.config["APP_CONFIG"]
    gid = unique_graph_id("fail")
    graph = GraphitiAdapter(config).graph
    graph.create(gid)
    graph.import_facts(gid, REPORT_FACTS[:3])
    store = ReportStore(config.data_dir)
    report_id = new_report_id()
    store.create(report_id, {"graph_id": gid, "requirement": "ferries", "status": "queued",
                             "created_at": now_iso(), "owner": PROCESS_OWNER})
    # The last step, writing report.md, fails for real: a directory holds its name.
    (store.folder(report_id) / "report.md").mkdir()

    agent = ReportAgent(config, store=store, max_sections=1)
    try:
        with pytest.raises(OSError):
            agent.run(report_id, gid, "How often does the ferry run?")
    finally:
        agent.close()

    meta = store.read(report_id)
    assert meta["status"] == "failed" and "Error" in meta["error"] and meta["finished_at"]
    assert sorted(path.name for path in store.folder(report_id).glob("*.tmp")) == []
    assert (store.folder(report_id) / "section_01.md").is_file()  # what was written is kept


def test_a_failed_atomic_write_leaves_no_temporary_file(tmp_path):
    store = ReportStore(tmp_path)
    report_id = new_report_id()
    store.create(report_id, {"status": "queued", "owner": PROCESS_OWNER})
    with pytest.raises(UnicodeEncodeError):
        store.write_report(report_id, "text that UTF-8 cannot hold: \ud800")
    assert [path.name for path in store.folder(report_id).iterdir()] == ["meta.json"]


def _dead_owner() -> str:
    """The owner token of a process that has exited."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return f"{process.pid}:0123456789ab"


# Named ids: the owners hold pids, and test workers (pytest-xdist) must collect the same test names.
@pytest.mark.parametrize("owner, alive", [
    pytest.param(PROCESS_OWNER, True, id="this-process"),
    pytest.param(f"{os.getppid()}:0123456789ab", True, id="parent-process"),  # another live process
    pytest.param(f"{os.getpid()}:0123456789ab", False, id="same-pid-other-token"),  # a restart with our pid
    pytest.param(None, False, id="no-owner"),  # written before owners were recorded
    pytest.param("not-a-pid", False, id="not-a-pid"),
    pytest.param("\uff11\uff12:0123456789ab", False, id="fullwidth-digits"),
])
def test_owner_alive(owner, alive):
    assert owner_alive(owner) is alive


def test_only_active_reports_of_gone_processes_read_as_interrupted(tmp_path):
    store = ReportStore(tmp_path)
    cases = {
        ("running", _dead_owner()): "interrupted",
        ("queued", None): "interrupted",
        ("running", PROCESS_OWNER): "running",
        ("done", _dead_owner()): "done",
        ("failed", None): "failed",
    }
    for (status, owner), expected in cases.items():
        report_id = new_report_id()
        store.create(report_id, {"status": status, **({"owner": owner} if owner else {})})
        body = store.read(report_id)
        assert body["status"] == expected, (status, owner)
        assert ("the app stopped" in body.get("error", "")) is (expected == "interrupted")
        assert json.loads((store.folder(report_id) / "meta.json").read_text())["status"] == status  # reads only


def _chat_that_hangs_for(marker: str):
    def respond(messages, body):
        if any(marker in str(message.get("content", "")) for message in messages):
            return hang()
        return quick_writer(messages, body)

    return judge_or_chat(chat_fn=respond)


def _wait_for_report(app: AppProcess, report_id: str, statuses: tuple[str, ...], timeout_s: float = 120) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status, body = call(app.url(f"/api/report/{report_id}"))
        assert status == 200, body
        if body["status"] in statuses:
            return body
        time.sleep(0.1)
    raise AssertionError(f"report {report_id} never reached {statuses}; last: {body['status']}")


def _wait_until(condition, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the condition never came true"
        time.sleep(0.05)


def test_after_kill_9_and_a_restart_reports_keep_their_state_and_a_running_one_says_interrupted(tmp_path):
    data_dir = tmp_path / "data"
    with ScriptedLLMServer(_chat_that_hangs_for("never-finishes")) as llm:
        env = {"LLM_BASE_URL": llm.base_url, "LLM_MODEL_NAME": "writer", "LLM_TIMEOUT_S": "600"}
        first = AppProcess(data_dir, tmp_path / "first.log", **env).start()
        try:
            assert call(first.url("/api/graph"), "POST", {"graph_id": "ferries"})[0] == 201
            assert call(first.url("/api/graph/ferries/facts"), "POST", {"facts": REPORT_FACTS[:3]})[0] == 201
            status, done = call(first.url("/api/report/ferries"), "POST", {"requirement": "How often does it run?"})
            assert status == 202
            finished = _wait_for_report(first, done["report_id"], ("done", "failed"))
            status, stuck = call(first.url("/api/report/ferries"), "POST",
                                 {"requirement": "Which ferry never-finishes?"})
            assert status == 202
            _wait_for_report(first, stuck["report_id"], ("running",))
            _wait_until(lambda: llm.in_flight >= 1)  # the model holds the report's request open
        finally:
            first.kill_hard()

        with AppProcess(data_dir, tmp_path / "second.log", **env) as second:
            status, body = call(second.url(f"/api/report/{stuck['report_id']}"))
            assert status == 200 and body["status"] == "interrupted", body
            assert "the app stopped while the report was running" in body["error"]
            status, body = call(second.url(f"/api/report/{done['report_id']}"))
            assert status == 200 and body["status"] == finished["status"] == "done"
            assert body["summary"] == finished["summary"] and body["markdown"] == finished["markdown"]
            status, body = call(second.url(f"/api/tasks/{stuck['task_id']}"))  # tasks live in memory only
            assert status == 404 and "GET /api/report/<report_id>" in body["error"]["message"]
