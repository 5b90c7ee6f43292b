"""Background tasks with progress, for work that outlives a request (ingestion, reports).

Tasks live in this process's memory only. A finished task is kept for `ttl_s` (TASK_TTL_S) and at
most `max_kept` (TASK_MAX_KEPT) finished ones are kept, the oldest forgotten first; a running task
is never forgotten. Work whose result must survive a restart stores it itself (reports: ReportStore)
and records `PROCESS_OWNER`, so a reader can tell work that died with its process (`owner_alive`).
"""

from __future__ import annotations

import copy
import logging
import os
import secrets
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone

from app.config import DEFAULT_TASK_MAX_KEPT, DEFAULT_TASK_TTL_S
from app.request_id import with_request_id

logger = logging.getLogger(__name__)

# This process, as work it started records it: the pid, and a token because a restarted
# container often gets the same pid again.
PROCESS_OWNER = f"{os.getpid()}:{secrets.token_hex(6)}"


def owner_alive(owner: object) -> bool:
    """Whether the process that recorded `owner` (a PROCESS_OWNER value) is still running."""
    if owner == PROCESS_OWNER:
        return True
    pid_text = owner.partition(":")[0] if isinstance(owner, str) else ""
    if not pid_text.isascii() or not pid_text.isdigit() or int(pid_text) == os.getpid():
        return False  # unknown, or our pid with another token: that process is gone
    try:
        os.kill(int(pid_text), 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, under another user
    return True


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
    def __init__(self, *, ttl_s: float = DEFAULT_TASK_TTL_S, max_kept: int = DEFAULT_TASK_MAX_KEPT,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._tasks: dict[str, Task] = {}
        self._finished: OrderedDict[str, float] = OrderedDict()  # task id -> when it ended, oldest first
        self._lock = threading.Lock()
        self._clock = clock
        self.configure(ttl_s=ttl_s, max_kept=max_kept)

    def configure(self, *, ttl_s: float, max_kept: int) -> None:
        """Set how long (seconds) and how many finished tasks are kept (TASK_TTL_S, TASK_MAX_KEPT)."""
        if ttl_s < 0 or max_kept < 1:
            raise ValueError("ttl_s must be >= 0 and max_kept >= 1")
        with self._lock:
            self.ttl_s, self.max_kept = float(ttl_s), int(max_kept)
            self._evict()

    def start(self, kind: str, work: Callable[[Task], dict | None]) -> Task:
        """Run `work(task)` in a daemon thread, under the starting request's id; it updates
        task.progress as it goes."""
        task = Task(task_id=f"t_{uuid.uuid4().hex[:16]}", kind=kind)
        with self._lock:
            self._evict()
            self._tasks[task.task_id] = task
        threading.Thread(target=with_request_id(self._run), args=(task, work), name=f"task-{task.task_id}", daemon=True).start()
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
        with self._lock:
            self._finished[task.task_id] = self._clock()
            self._evict()
        task.finished.set()

    def get(self, task_id: str) -> Task | None:
        with self._lock:
            self._evict()
            return self._tasks.get(task_id)

    def __len__(self) -> int:
        with self._lock:
            return len(self._tasks)

    def _evict(self) -> None:
        """Forget finished tasks older than ttl_s, then the oldest beyond max_kept (lock held)."""
        expired_before = self._clock() - self.ttl_s
        while self._finished:
            task_id, ended = next(iter(self._finished.items()))
            if ended > expired_before and len(self._finished) <= self.max_kept:
                break
            del self._finished[task_id]
            self._tasks.pop(task_id, None)


tasks = TaskRegistry()
