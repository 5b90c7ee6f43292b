"""Background tasks on a job queue (RQ on Redis): work that outlives a request (reports, ingestion,
deleting a large graph) runs in worker processes, and every API process that shares the broker
answers for every task.

A task is an RQ job whose id is the task id. Its kind, progress and errors live in the job's meta,
so any process reads them; the job's own status says pending / running / done / failed / canceled.
A worker keeps a heartbeat while it runs a task (every HEARTBEAT_S): a worker that was killed stops
beating, and the next reader of the queue moves its task to failed with the reason, so no task
says "running" for longer than HEARTBEAT_TTL_S after its worker died. A worker told to stop
(SIGTERM) finishes the task in hand first and leaves the queued ones to the next worker.

The target of a task is named by its import path ("app.report.agent:run_report_task"), so the API
never imports the code that a worker runs; the target takes a `TaskContext` first.
"""

from __future__ import annotations

import importlib
import logging
import pickle
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import redis
from rq import Queue, SimpleWorker, get_current_job
from rq.exceptions import NoSuchJobError
from rq.job import Job, JobStatus
from rq.worker import WorkerStatus

from app.config import DEFAULT_TASK_TIMEOUT_S, DEFAULT_TASK_TTL_S
from app.metrics import job_finished
from app.request_id import bound_request_id, current_request_id

logger = logging.getLogger(__name__)

QUEUE_NAME = "mirofish-tasks"
HEARTBEAT_S = 5  # how often a worker says it still runs its task
HEARTBEAT_TTL_S = 3 * HEARTBEAT_S  # a task whose worker stayed silent this long was abandoned
_CANCEL_KEY = "mirofish:task-cancel:{}"  # beside the job: the worker rewrites the job's meta as it goes
ABANDONED = ("the worker running this task stopped before it finished (killed, or its machine went away); "
             "what the task stored so far is kept")

# The task's state, as the API says it, for each of RQ's job statuses.
_STATES = {
    JobStatus.CREATED: "pending", JobStatus.QUEUED: "pending", JobStatus.DEFERRED: "pending",
    JobStatus.SCHEDULED: "pending", JobStatus.STARTED: "running", JobStatus.FINISHED: "done",
    JobStatus.FAILED: "failed", JobStatus.STOPPED: "canceled", JobStatus.CANCELED: "canceled",
}
ENDED_STATES = ("done", "failed", "canceled")


class TaskCanceled(BaseException):
    """Raised inside a task at its next saved step after someone asked to cancel it. Not an Exception,
    so the task's own `except Exception` handlers let it through, as they would a KeyboardInterrupt."""


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat()


class _SavedDict(dict):
    """A dict that writes itself to its task's meta on every change (progress survives the worker)."""

    def __init__(self, save: Callable[[], None]) -> None:
        super().__init__()
        self._save = save

    def __setitem__(self, key, value) -> None:
        super().__setitem__(key, value)
        self._save()

    def update(self, *args, **kwargs) -> None:
        super().update(*args, **kwargs)
        self._save()


class TaskContext:
    """What a running task sees of itself: its id, progress and errors (both kept in the queue, so
    every API process reads them while it runs), and whether someone asked to cancel it."""

    def __init__(self, job: Job) -> None:
        self._job = job
        self._lock = threading.Lock()
        self.task_id = job.id
        self.connection = job.connection  # the broker: stores that every process reads sit beside the queue
        self.errors: list[str] = list(job.meta.get("errors", []))
        self.progress = _SavedDict(self._save)

    def add_error(self, message: str) -> None:
        self.errors.append(message)
        self._save()

    def cancel_requested(self) -> bool:
        return bool(self._job.connection.exists(_CANCEL_KEY.format(self.task_id)))

    def check_canceled(self) -> None:
        if self.cancel_requested():
            raise TaskCanceled(f"task {self.task_id} was canceled")

    def _save(self) -> None:
        """Store progress and errors, then stop here if the task was canceled: every saved step of a
        task is a point where it can stop cleanly."""
        with self._lock:
            self._job.meta.update(progress=dict(self.progress), errors=list(self.errors))
            self._job.save_meta()
        self.check_canceled()


def run_task(target: str, *args: Any) -> Any:
    """The function every job runs: import `target` ("module:function") and call it with a TaskContext,
    under the id of the request that started it (log lines of the task name it)."""
    job = get_current_job()
    outcome = "failed"
    with bound_request_id(job.meta.get("request_id")):
        try:
            result = _run_target(job, target, args)
            outcome = "canceled" if job.meta.get("canceled") else "failed" if job.meta.get("failed") else "done"
            return result
        finally:
            job_finished(job.meta.get("kind", "unknown"), outcome)


def _run_target(job: Job, target: str, args: tuple) -> Any:
    """A task that recorded errors and returned nothing failed; one that was canceled ends canceled."""
    context = TaskContext(job)
    module_name, _, function_name = target.partition(":")
    function = getattr(importlib.import_module(module_name), function_name)
    try:
        result = function(context, *args)
    except TaskCanceled:
        job.meta["canceled"] = True
        job.save_meta()
        return None
    except Exception as error:
        logger.exception("Task %s failed", job.id)
        job.meta["exception"] = _picklable(error)
        context.errors.append(f"{type(error).__name__}: {error}")
        job.meta["errors"] = list(context.errors)
        job.save_meta()
        raise
    if context.errors and not result:
        job.meta["failed"] = True
        job.save_meta()
    return result


def _picklable(error: BaseException) -> BaseException | None:
    """The error itself when it can travel through the queue (the API re-raises it), else None."""
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:
        return None
    return error


class TaskHandle:
    """A started task, as its starter holds it: the id, and a way to read or wait for it."""

    def __init__(self, task_id: str, queue: "TaskQueue") -> None:
        self.task_id = task_id
        self._queue = queue

    def to_dict(self) -> dict | None:
        return self._queue.get(self.task_id)

    def wait(self, timeout_s: float | None = None) -> bool:
        """Whether the task ended within `timeout_s` seconds (None: wait as long as it runs)."""
        task = self._queue.wait(self.task_id, float("inf") if timeout_s is None else timeout_s)
        return task is None or task["state"] in ENDED_STATES


def new_task_id() -> str:
    return f"t_{uuid.uuid4().hex[:16]}"


class TaskQueue:
    """Start, read, wait for and cancel tasks on the broker at `connection`."""

    def __init__(self, connection: redis.Redis, *, ttl_s: float = DEFAULT_TASK_TTL_S,
                 timeout_s: float = DEFAULT_TASK_TIMEOUT_S) -> None:
        self.connection = connection
        self.queue = Queue(QUEUE_NAME, connection=connection)
        self.ttl_s, self.timeout_s = int(ttl_s), int(timeout_s)

    def start(self, kind: str, target: str, *args: Any, task_id: str | None = None) -> TaskHandle:
        """Queue `target(context, *args)` under `task_id` (made here unless given)."""
        task_id = task_id or new_task_id()
        self.queue.enqueue(run_task, target, *args, job_id=task_id, job_timeout=self.timeout_s,
                           result_ttl=self.ttl_s, failure_ttl=self.ttl_s, ttl=None,
                           meta={"kind": kind, "progress": {}, "errors": [], "created_at": now_iso(),
                                 "request_id": current_request_id()})
        return TaskHandle(task_id, self)

    def get(self, task_id: str) -> dict | None:
        """The task as the API answers it, or None when unknown (or finished longer than TASK_TTL_S ago)."""
        self.fail_abandoned()
        try:
            job = Job.fetch(task_id, connection=self.connection)
        except NoSuchJobError:
            return None
        return _describe(job, self.connection)

    def wait(self, task_id: str, timeout_s: float, poll_s: float = 0.05) -> dict | None:
        """The task once it ended, or as it is after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while True:
            task = self.get(task_id)
            if task is None or task["state"] in ENDED_STATES or time.monotonic() >= deadline:
                return task
            time.sleep(poll_s)

    def exception(self, task_id: str) -> BaseException | None:
        """What a failed task raised, where it could be carried through the queue."""
        try:
            return Job.fetch(task_id, connection=self.connection).meta.get("exception")
        except NoSuchJobError:
            return None

    def cancel(self, task_id: str) -> dict | None:
        """Cancel a task: a pending one is taken off the queue; a running one is asked to stop at its
        next step (it ends "canceled"). The task as it is then, or None when unknown."""
        task = self.get(task_id)
        if task is None or task["state"] in ENDED_STATES:
            return task
        self.connection.set(_CANCEL_KEY.format(task_id), 1, ex=max(self.timeout_s, 60))
        if task["state"] == "pending":
            try:
                Job.fetch(task_id, connection=self.connection).cancel()
            except NoSuchJobError:
                return None
        return self.get(task_id)

    def unavailable(self) -> str | None:
        """Why the broker cannot be used now (None: it answers); readiness asks this."""
        try:
            self.connection.ping()
        except redis.RedisError as error:
            return f"the task broker does not answer ({type(error).__name__}: {error})"
        return None

    def depth(self) -> int:
        """Tasks waiting for a worker."""
        return self.queue.count

    def fail_abandoned(self) -> None:
        """Move the tasks whose worker stopped beating to failed (RQ's own cleanup of its registry)."""
        self.queue.started_job_registry.cleanup()


def _describe(job: Job, connection: redis.Redis) -> dict:
    meta = job.meta
    status = job.get_status(refresh=False)
    state = _STATES.get(status, "pending")
    errors = list(meta.get("errors", []))
    if state == "done" and meta.get("canceled"):
        state = "canceled"
    elif state == "done" and meta.get("failed"):
        state = "failed"
    elif state == "failed" and not errors:  # it failed outside the task's own code: RQ says why
        result = job.latest_result()
        why = (result.exc_string if result is not None else None) or "failed"
        errors = [ABANDONED if "AbandonedJobError" in why else why.strip().splitlines()[-1]]
    task = {
        "task_id": job.id,
        "kind": meta.get("kind"),
        "state": state,
        "progress": meta.get("progress", {}),
        "result": job.return_value(refresh=False) if state == "done" else None,
        "errors": errors,
        "created_at": meta.get("created_at"),
        "started_at": _iso(job.started_at),
        "finished_at": _iso(job.ended_at),
    }
    if state == "running" and connection.exists(_CANCEL_KEY.format(job.id)):
        task["cancel_requested"] = True
    return task


def _iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).isoformat()


class TaskWorker(SimpleWorker):
    """An RQ worker that runs each task in its own process (no fork per job: the graph runtime, its
    event-loop thread and the embedder stay warm between tasks) and beats every HEARTBEAT_S while it
    runs one, so a killed worker's task is seen abandoned within HEARTBEAT_TTL_S."""

    def get_heartbeat_ttl(self, job: Job) -> int:
        return HEARTBEAT_TTL_S

    def execute_job(self, job: Job, queue: Queue) -> None:
        self.prepare_execution(job)
        done = threading.Event()
        beat = threading.Thread(target=self._beat_until, args=(job, done), name="task-heartbeat", daemon=True)
        beat.start()
        try:
            self.perform_job(job, queue)
        finally:
            done.set()
            beat.join()
        self.set_state(WorkerStatus.IDLE)

    def _beat_until(self, job: Job, done: threading.Event) -> None:
        while not done.wait(HEARTBEAT_S):
            try:
                self.maintain_heartbeats(job)
            except Exception as error:  # a missed beat is retried; the task goes on
                logger.warning("Task %s: heartbeat failed: %s", job.id, error)


def connect(url: str, *, answer_timeout_s: float | None = None) -> redis.Redis:
    """A client for the broker at `url` (redis://, rediss:// or unix://). A worker waits on the queue
    with blocking reads, so only the API's clients bound how long an answer may take."""
    return redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=answer_timeout_s)
