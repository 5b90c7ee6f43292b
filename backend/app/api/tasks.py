"""Background tasks: any API process that shares the broker answers for any task.

    GET  /api/tasks/<task_id>          state, progress, result or errors
    POST /api/tasks/<task_id>/cancel   a pending task leaves the queue; a running one stops at its next step
"""

from __future__ import annotations

import re

from flask import Blueprint

from app.api.errors import ApiError
from app.api.validation import adapter

bp = Blueprint("tasks", __name__, url_prefix="/api/tasks")

TASK_ID_PATTERN = re.compile(r"^t_[0-9a-f]{16}$")


def _not_found(task_id: str) -> ApiError:
    return ApiError(404, "task_not_found",
                    f"task {task_id[:64]!r} does not exist: unknown, or finished more than TASK_TTL_S ago "
                    "(a report's state stays at GET /api/report/<report_id>)")


def _task_or_404(task: dict | None, task_id: str) -> dict:
    if task is None:
        raise _not_found(task_id)
    return task


@bp.get("/<task_id>")
def get_task(task_id: str):
    if not TASK_ID_PATTERN.fullmatch(task_id):
        raise _not_found(task_id)
    return _task_or_404(adapter().tasks.queue.get(task_id), task_id)


@bp.post("/<task_id>/cancel")
def cancel_task(task_id: str):
    if not TASK_ID_PATTERN.fullmatch(task_id):
        raise _not_found(task_id)
    return _task_or_404(adapter().tasks.queue.cancel(task_id), task_id)
