"""Background tasks are bounded: a finished task is forgotten after TASK_TTL_S, at most TASK_MAX_KEPT
finished ones are kept (oldest first out), a running task is never forgotten, and the settings come
from Config. Real threads; time is a clock the test moves, so nothing depends on the machine's speed."""

from __future__ import annotations

import threading

import pytest

from app.config import Config
from app.tasks import TaskRegistry, tasks


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def finished(registry: TaskRegistry, kind: str = "job"):
    task = registry.start(kind, lambda task: {"ok": True})
    assert task.wait(60)
    return task


def test_a_finished_task_is_kept_for_the_ttl_then_forgotten():
    clock = Clock()
    registry = TaskRegistry(ttl_s=30, max_kept=100, clock=clock)
    task = finished(registry)
    clock.now += 29.9
    assert registry.get(task.task_id) is task and task.to_dict()["result"] == {"ok": True}
    clock.now += 0.2
    assert registry.get(task.task_id) is None and len(registry) == 0


def test_at_most_max_kept_finished_tasks_stay_and_the_oldest_go_first():
    registry = TaskRegistry(ttl_s=3600, max_kept=3, clock=Clock())
    done = [finished(registry) for _ in range(5)]
    assert [registry.get(task.task_id) is not None for task in done] == [False, False, True, True, True]
    assert len(registry) == 3


def test_a_running_task_is_never_forgotten():
    clock = Clock()
    registry = TaskRegistry(ttl_s=0, max_kept=1, clock=clock)
    release = threading.Event()
    running = registry.start("long", lambda task: {"released": release.wait(60)})
    others = [finished(registry) for _ in range(3)]
    clock.now += 10_000
    assert registry.get(running.task_id) is running and running.state in ("pending", "running")
    assert all(registry.get(task.task_id) is None for task in others)  # ttl 0: gone once finished
    release.set()
    assert running.wait(60) and running.result == {"released": True}
    assert registry.get(running.task_id) is None  # finished now, and the ttl is 0


def test_limits_are_checked():
    with pytest.raises(ValueError):
        TaskRegistry(ttl_s=-1)
    with pytest.raises(ValueError):
        TaskRegistry(max_kept=0)


def test_the_app_takes_the_limits_from_its_settings(backend):
    try:
        app, client = backend(TASK_TTL_S="0", TASK_MAX_KEPT="7")
        assert app.config["APP_CONFIG"].task_ttl_s == 0 and tasks.max_kept == 7
        task = tasks.start("job", lambda task: {"ok": True})
        assert task.wait(60)
        response = client.get(f"/api/tasks/{task.task_id}")  # forgotten at once with a ttl of 0
        assert response.status_code == 404 and "TASK_TTL_S" in response.get_json()["error"]["message"]
    finally:
        defaults = Config()
        tasks.configure(ttl_s=defaults.task_ttl_s, max_kept=defaults.task_max_kept)


@pytest.mark.parametrize("env, message", [
    ({"TASK_TTL_S": "-1"}, "TASK_TTL_S must be >= 0"),
    ({"TASK_MAX_KEPT": "0"}, "TASK_MAX_KEPT must be >= 1"),
    ({"TASK_MAX_KEPT": "many"}, "TASK_MAX_KEPT must be an integer"),
])
def test_bad_task_settings_fail_at_startup(monkeypatch, env, message):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ValueError, match=message):
        Config.from_env()
