"""The API's HTTP server: gunicorn with threaded workers, and a stop that lets requests in flight finish.

One implementation for every way the API is served. The image runs
`gunicorn --config python:app.cli.gunicorn_conf app.wsgi:app`; `flask serve` (`make serve`, and the served
app of the tests and benchmarks) runs the same settings in its own process (`serve`).

- Workers (API_WORKERS) are processes, each with its own graph runtime, event-loop thread and reranker
  (RERANKER_MAX_PARALLEL and the score cache are per process); threads (API_THREADS) are the requests one
  worker serves at once. How many of each: docs/DEPLOY.md.
- SIGTERM: the master closes its listening socket and passes the signal on; each worker closes its own
  copy at once, so a connection made after the signal is refused (a proxy tries another replica) rather
  than queued in the kernel until the stop ends and then reset. The requests in flight get
  SHUTDOWN_GRACE_S to finish; then the worker closes its graph runtime (and stops a database the app
  started) and exits, and the master exits 0. A request still running after the grace is cut off
  (the master kills the worker). SIGINT (Ctrl-C) stops at once.
- A worker dies with its master: a kill -9 of the server is a kill -9 of all of it.
- Each worker runs the start step (app/cli/start.py) before it accepts a request: a database the app
  runs itself (the embedded FalkorDB, the local Neo4j) is up before the first answer, and a database
  that cannot be used ends the start with one line naming its setting (the worker exits 3, gunicorn's
  "failed to boot", and the master stops with it). Such a database serves one
  process, so API_WORKERS must be 1 there (`Config.check_serving`, with API_TOKEN beyond loopback).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from typing import Any

from gunicorn.app.base import BaseApplication
from gunicorn.util import import_app
from gunicorn.workers.gthread import ThreadWorker

from app.config import Config
from app.metrics import clear_multiprocess_files, mark_process_dead
from app.cli.start import exit_naming_the_setting, start
from app.graph.runtime import reset_graphiti
from app.graph.server_process import die_with_parent
from app.graph.unavailable import GraphUnavailableError

logger = logging.getLogger(__name__)

WSGI_APP = "app.wsgi:app"
# The heartbeat file each worker touches: on a tmpfs where there is one (a disk-backed /tmp can stall it).
_HEARTBEAT_DIR = "/dev/shm"


class DrainingThreadWorker(ThreadWorker):
    """gunicorn's threaded worker, except that a stopping worker closes its listening sockets as soon as
    it stops accepting: with the master's copy closed too, a new connection is refused at once. (The
    stock worker keeps them open until its requests have finished, so the kernel accepts connections
    that nobody answers and resets them at the end.)"""

    _stopping = False

    def set_accept_enabled(self, enabled: bool) -> None:
        super().set_accept_enabled(enabled)
        if enabled or self.alive or self._stopping:  # a full worker pausing, or a stop already begun
            return
        self._stopping = True
        for listener in self.sockets:
            listener.close()  # gunicorn's socket closes once; its own close at the end does nothing
        logger.info("Stopping: new connections refused; %d open connection(s) get up to %d s to finish",
                    self.nr_conns, self.cfg.graceful_timeout)


def bind_address(host: str, port: int) -> str:
    return f"[{host.strip('[]')}]:{port}" if ":" in host else f"{host}:{port}"


def gunicorn_settings(config: Config) -> dict[str, Any]:
    """gunicorn's settings for serving on `config`; ValueError (naming the setting) when it must not serve."""
    config.check_serving()
    return {
        "wsgi_app": WSGI_APP,
        "bind": [bind_address(config.host, config.port)],
        "workers": config.api_workers,
        "worker_class": DrainingThreadWorker,
        "threads": config.api_threads,
        "graceful_timeout": config.shutdown_grace_s,
        "loglevel": config.log_level.lower(),
        "proc_name": "mirofish-api",
        "worker_tmp_dir": _HEARTBEAT_DIR if os.path.isdir(_HEARTBEAT_DIR) else None,
        # gunicorn's runtime control socket: a file under $HOME shared by every server of the user; unused.
        "control_socket_disable": True,
        "on_starting": lambda server: clear_multiprocess_files(config.prometheus_multiproc_dir),
        "child_exit": _child_exit,
        "post_fork": _post_fork,
        "post_worker_init": _post_worker_init,
        "worker_exit": _worker_exit,
    }


def _child_exit(server: Any, worker: Any) -> None:
    mark_process_dead(worker.pid)  # its live gauges (the breaker's state) leave the sum


def _post_fork(server: Any, worker: Any) -> None:
    die_with_parent(signal.SIGKILL)


def _post_worker_init(worker: Any) -> None:
    """Run the start step before the worker accepts a request, telling the master meanwhile that the
    worker lives (a large embedded graph loads for minutes; a silent worker would be taken for a hung one
    and killed). A database that cannot be used ends the start, naming the setting."""
    config = worker.wsgi.config["APP_CONFIG"]
    outcome: dict[str, BaseException] = {}

    def run_start() -> None:
        try:
            start(config)
        except BaseException as error:  # raised below, in the worker's own thread
            outcome["failed"] = error

    starting = threading.Thread(target=run_start, name="graph-start", daemon=True)
    starting.start()
    while starting.is_alive() and worker.alive:
        worker.notify()
        starting.join(1.0)
    error = outcome.get("failed")
    if isinstance(error, GraphUnavailableError):
        exit_naming_the_setting(config, error)
    if error is not None:  # a setting or an install that cannot work: the worker does not boot
        raise error


def _worker_exit(server: Any, worker: Any) -> None:
    reset_graphiti()  # closes the database driver, stops a database this worker started


class _Server(BaseApplication):
    def __init__(self, settings: dict[str, Any]) -> None:
        self._settings = settings
        super().__init__()

    def load_config(self) -> None:
        for name, value in self._settings.items():
            self.cfg.set(name, value)

    def load(self) -> Any:
        return import_app(self.cfg.wsgi_app)


def serve(config: Config) -> None:
    """Serve the API on `config` until SIGTERM or SIGINT (gunicorn's master runs in this process)."""
    _Server(gunicorn_settings(config)).run()
