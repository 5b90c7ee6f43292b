"""Where background tasks queue, and the worker processes an app runs itself.

The broker is QUEUE_URL when set, else the FalkorDB server the graphs live on (FALKORDB_URL, or the
embedded one): replicas that share a database share the queue with no further setting. A Neo4j
deployment names its Redis in QUEUE_URL; without one, the app starts a broker of its own beside
its database (a local redis-server, as the embedded FalkorDB is one).

An app whose broker is its own (the embedded defaults, a local Neo4j) also runs the workers:
TASK_WORKERS processes of `flask worker`, started at its first task, pointed at the same database
and broker, ended with the app. With a shared broker the workers are deployed apart from the API
(`make worker`, compose's `worker` service) and the app starts none.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from app.config import Config
from app.graph.loop import run_on_loop
from app.graph.server_process import die_with_parent, end
from app.metrics import register_queue_depth
from app.tasks import QUEUE_NAME, TaskHandle, TaskQueue, connect

logger = logging.getLogger(__name__)

BACKEND_DIR = Path(__file__).resolve().parents[2]  # where `flask --app app` finds the package
WORKER_STOP_GRACE_S = 10.0
BROKER_ANSWER_TIMEOUT_S = 10.0  # an API request never waits longer on the broker


class BrokerNotConfiguredError(RuntimeError):
    """A worker was started without a broker to share with the API."""


def configured_broker_url(config: Config) -> str | None:
    """The broker the settings name: QUEUE_URL, else a FalkorDB server's own (None: none named)."""
    if config.queue_url:
        return config.queue_url
    if config.graph_backend == "falkordb" and config.falkordb_url:
        return config.falkordb_url
    return None


def require_broker_url(config: Config) -> str:
    url = configured_broker_url(config)
    if url is None:
        raise BrokerNotConfiguredError(
            "a worker needs the broker its API uses: set QUEUE_URL (a Redis, e.g. redis://127.0.0.1:6379/0), "
            "or FALKORDB_URL with GRAPH_BACKEND=falkordb")
    return url


class LocalWorkers:
    """`count` worker processes over this app's own database and broker; started once, on demand."""

    def __init__(self, count: int, env: dict[str, str]) -> None:
        self.count = count
        self.env = env
        self.processes: list[subprocess.Popen] = []
        self._lock = threading.Lock()

    def ensure_started(self) -> None:
        with self._lock:
            self.processes = [process for process in self.processes if process.poll() is None]
            missing = self.count - len(self.processes)
            if missing > 0:
                # Spawned from the graph loop's thread: a child that dies with its parent is tied to the
                # thread that started it, and the loop thread lives as long as the runtime.
                self.processes += run_on_loop(self._spawn(missing), timeout=30)

    async def _spawn(self, count: int) -> list[subprocess.Popen]:
        return [self._spawn_one() for _ in range(count)]

    def _spawn_one(self) -> subprocess.Popen:
        command = [sys.executable, "-m", "flask", "--app", "app", "worker"]
        logger.info("Starting a task worker over this app's own broker")
        # The worker ends with the app, also when the app is killed outright: at once (SIGKILL), since
        # the broker and database it works on are the app's and go with it; its task reads as abandoned.
        return subprocess.Popen(command, cwd=BACKEND_DIR, env=self.env, stdin=subprocess.DEVNULL,
                                preexec_fn=functools.partial(die_with_parent, signal.SIGKILL))

    def stop(self) -> None:
        with self._lock:
            processes, self.processes = self.processes, []
        for process in processes:
            if process.poll() is None:
                end(process, WORKER_STOP_GRACE_S, kill_wait_s=5.0)


class TaskBroker:
    """The runtime's queue, and the workers it starts when the broker is its own."""

    def __init__(self, queue: TaskQueue, workers: LocalWorkers | None) -> None:
        self.queue = queue
        self.workers = workers
        # /metrics reads the queue's depth at each scrape, from the broker every process shares.
        self._unregister_depth = register_queue_depth(lambda: {QUEUE_NAME: queue.depth()})

    def start(self, kind: str, target: str, *args, task_id: str | None = None) -> TaskHandle:
        if self.workers is not None:
            self.workers.ensure_started()
        return self.queue.start(kind, target, *args, task_id=task_id)

    def stop(self) -> None:
        self._unregister_depth()
        if self.workers is not None:
            self.workers.stop()
        self.queue.connection.close()


def build_task_broker(config: Config, url: str, own: bool, database_env: dict[str, str]) -> TaskBroker:
    """`own`: the app started the broker itself, so it runs TASK_WORKERS workers over it, whose
    settings are this process's with the database and broker pointed at what the app started."""
    queue = TaskQueue(connect(url, answer_timeout_s=BROKER_ANSWER_TIMEOUT_S), ttl_s=config.task_ttl_s, timeout_s=config.task_timeout_s)
    workers = None
    if own and config.task_workers > 0:
        env = {**os.environ, **database_env, "QUEUE_URL": url, "TASK_WORKERS": "0"}
        workers = LocalWorkers(config.task_workers, env)
    return TaskBroker(queue, workers)
