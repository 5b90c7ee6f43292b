"""Background tasks with progress, for work that outlives a request (ingestion, reports)."""

from __future__ import annotations

import copy
import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone

logger = logging.getLogger(__name__)


@dataclass
class Task:
    task_id: str
    kind: str
    state: str = "pending"  # pending | running | done | failed
    progress: dict = field(default_factory=dict)
    result: dict | None = None
    errors: list[str] = field(default_factory=list)
    created_at: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat())
    finished_at: str | None = None
    # Not part of the task's JSON: how a caller waits for the end, and what failed it.
    finished: threading.Event = field(default_factory=threading.Event, repr=False, compare=False)
    exception: BaseException | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict:
        body = {}
        for name in (f.name for f in fields(self) if f.name not in _INTERNAL_FIELDS):
            value = getattr(self, name)
            # dict(...) copies in one step while the worker thread may be writing; the copy is ours.
            body[name] = copy.deepcopy(dict(value) if isinstance(value, dict) else value)
        return body

    def wait(self, timeout: float | None = None) -> bool:
        """Whether the task ended within `timeout` seconds."""
        return self.finished.wait(timeout)


_INTERNAL_FIELDS = ("finished", "exception")


class TaskRegistry:
    def __init__(self) -> None:
        self._tasks: dict[str, Task] = {}
        self._lock = threading.Lock()

    def start(self, kind: str, work: Callable[[Task], dict | None]) -> Task:
        """Run `work(task)` in a daemon thread; it updates task.progress as it goes."""
        task = Task(task_id=f"t_{uuid.uuid4().hex[:16]}", kind=kind)
        with self._lock:
            self._tasks[task.task_id] = task
        threading.Thread(target=self._run, args=(task, work), name=f"task-{task.task_id}", daemon=True).start()
        return task

    def _run(self, task: Task, work) -> None:
        task.state = "running"
        try:
            task.result = work(task)
            task.state = "failed" if task.errors and not task.result else "done"
        except Exception as error:
            logger.exception("Task %s failed", task.task_id)
            task.errors.append(f"{type(error).__name__}: {error}")
            task.exception = error
            task.state = "failed"
        task.finished_at = datetime.now(timezone.utc).isoformat()
        task.finished.set()

    def get(self, task_id: str) -> Task | None:
        with self._lock:
            return self._tasks.get(task_id)


tasks = TaskRegistry()
