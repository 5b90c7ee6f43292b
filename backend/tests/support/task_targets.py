"""Tasks that the queue tests give a real worker process to run (named by import path, as the app's are)."""

from __future__ import annotations

import logging
import time

from app.request_id import current_request_id
from app.tasks import TaskContext


def steps(task: TaskContext, count: int, step_s: float) -> dict:
    """`count` steps of `step_s` seconds, each saved as progress (a point where a cancel stops it)."""
    for done in range(1, count + 1):
        time.sleep(step_s)
        task.progress["steps_done"] = done
    return {"steps": count}


def fails(task: TaskContext) -> None:
    task.progress["reached"] = "the failure"
    raise ValueError("the input was wrong")


def records_an_error(task: TaskContext) -> None:
    task.add_error("one part failed")
    return None


def logs_its_request_id(task: TaskContext) -> dict:
    logging.getLogger("app.test").info("in the background")
    return {"request_id": current_request_id()}
