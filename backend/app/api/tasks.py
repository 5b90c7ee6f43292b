from flask import Blueprint

from app.api.errors import ApiError
from app.tasks import tasks

bp = Blueprint("tasks", __name__, url_prefix="/api/tasks")


@bp.get("/<task_id>")
def get_task(task_id: str):
    task = tasks.get(task_id)
    if task is None:
        raise ApiError(404, "task_not_found",
                       f"task {task_id[:64]!r} does not exist: unknown, started before the app restarted, or "
                       f"finished more than TASK_TTL_S ago (a report's state stays at GET /api/report/<report_id>)")
    return task.to_dict()
