"""A report's state tells the truth: a run that fails while writing is marked failed and keeps what
it wrote, a text the store cannot hold stores nothing, and a report whose worker died (kill -9 of the
app that ran it, then a restart over the same data) reads as "interrupted", not "running" forever.
The app, its FalkorDB (the reports' store and the task broker), its worker and the chat model are
real (the model is the scripted HTTP server)."""

from __future__ import annotations

import time

import pytest

from app.graph.runtime import GraphitiAdapter
from app.report.agent import ReportAgent
from app.report.store import ReportStore, new_report_id, now_iso, report_store
from app.tasks import ABANDONED
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


class StoreThatFailsTheLastWrite(ReportStore):
    """The real store, whose write of report.md fails as a full disk would."""

    def write_report(self, report_id, markdown):
        raise OSError(28, "No space left on device")


def test_a_report_that_fails_while_writing_is_marked_failed_and_keeps_what_it_wrote(backend, scripted_llm):
    scripted_llm.responder = judge_or_chat(chat_fn=quick_writer)
    app, _ = backend(LLM_BASE_URL=scripted_llm.base_url, LLM_MODEL_NAME="writer", LLM_TIMEOUT_S=10)
    config = app.config["APP_CONFIG"]
    gid = unique_graph_id("fail")
    graph = GraphitiAdapter(config).graph
    graph.create(gid)
    graph.import_facts(gid, REPORT_FACTS[:3])
    store = StoreThatFailsTheLastWrite(report_store(config).connection)
    report_id = new_report_id()
    store.create(report_id, {"graph_id": gid, "requirement": "ferries", "status": "queued", "created_at": now_iso()})

    agent = ReportAgent(config, store=store, max_sections=1)
    try:
        with pytest.raises(OSError):
            agent.run(report_id, gid, "How often does the ferry run?")
    finally:
        agent.close()

    report = store.read(report_id)
    assert report["status"] == "failed" and "OSError" in report["error"] and report["finished_at"]
    assert report["markdown"] is None and store.read_outline(report_id) is not None  # what was written is kept
    assert [step["kind"] for step in report["log"]][:1] == ["plan"]


def test_a_text_the_store_cannot_hold_stores_nothing(backend):
    app, _ = backend()
    store = report_store(app.config["APP_CONFIG"])
    report_id = new_report_id()
    store.create(report_id, {"status": "queued"})
    with pytest.raises(UnicodeEncodeError):
        store.write_report(report_id, "text that UTF-8 cannot hold: \ud800")
    assert store.read(report_id)["markdown"] is None


def test_only_active_reports_whose_task_ended_read_as_interrupted(backend):
    app, _ = backend()
    store = report_store(app.config["APP_CONFIG"])
    cases = {("running", "t_0123456789abcdef"): "interrupted", ("queued", "t_0123456789abcdee"): "interrupted",
             ("done", "t_0123456789abcded"): "done", ("failed", None): "failed", ("running", None): "running"}
    for (status, task_id), expected in cases.items():
        report_id = new_report_id()
        store.create(report_id, {"status": status, **({"task_id": task_id} if task_id else {})})
        body = store.read(report_id)
        assert body["status"] == expected, (status, task_id)
        assert ("its task is gone" in body.get("error", "")) is (expected == "interrupted")
        raw = store.connection.hget(f"mirofish:report:{report_id}:meta", "status")
        assert raw.decode() == f'"{status}"'  # reading changes nothing stored


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
            # The killed worker's heartbeat runs out (HEARTBEAT_TTL_S): then its task is failed, with why.
            body = _wait_for_report(second, stuck["report_id"], ("interrupted",), timeout_s=60)
            assert "stopped while the report was running" in body["error"] and ABANDONED in body["error"]
            status, body = call(second.url(f"/api/report/{done['report_id']}"))
            assert status == 200 and body["status"] == finished["status"] == "done"
            assert body["summary"] == finished["summary"] and body["markdown"] == finished["markdown"]
            status, body = call(second.url(f"/api/tasks/{stuck['task_id']}"))  # tasks outlive the app
            assert status == 200 and body["state"] == "failed" and body["errors"] == [ABANDONED], body
