"""Waiting for a background task of the API (GET /api/tasks/<id>) to end."""

from __future__ import annotations

import time


def wait_for_task(client, task_id: str, timeout_s: float = 60.0, poll_s: float = 0.05) -> dict:
    """The task once it is done, failed or canceled; AssertionError when it is still running after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        task = client.get(f"/api/tasks/{task_id}").get_json()
        if task["state"] in ("done", "failed", "canceled"):
            return task
        time.sleep(poll_s)
    raise AssertionError(f"task {task_id} did not finish within {timeout_s} s")
