"""A task worker as a separate process (`flask --app app worker`), as compose's `worker` service runs
it: on the broker and database the test names, with its own log, ready once it listens on the queue.

    with WorkerProcess(tmp_path / "worker.log", QUEUE_URL=..., FALKORDB_URL=...) as worker:
        ...
        worker.terminate()            # SIGTERM: finishes the task in hand, then exits
        worker.kill_hard()            # SIGKILL: the task in hand is abandoned
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support.app_process import BACKEND_DIR

READY_LINE = "Listening on"


class WorkerProcess:
    def __init__(self, log_path: Path, **env: str) -> None:
        self.log_path = Path(log_path)
        self.env = {**os.environ, "DOTENV_PATH": os.devnull, "EMBEDDING_PROVIDER": "local",
                    "RERANKER_PROVIDER": "none", "GRAPHITI_TELEMETRY_ENABLED": "false", "LOG_LEVEL": "INFO",
                    "TASK_WORKERS": "0", **env}
        self.process: subprocess.Popen | None = None

    def start(self, ready_timeout_s: float = 120) -> "WorkerProcess":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen([sys.executable, "-m", "flask", "--app", "app", "worker"], cwd=BACKEND_DIR,
                                        env=self.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + ready_timeout_s
        while READY_LINE not in self.log():
            if self.process.poll() is not None:
                raise AssertionError(f"the worker exited with {self.process.returncode}:\n{self.log()[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"the worker was not ready within {ready_timeout_s} s:\n{self.log()[-3000:]}")
            time.sleep(0.1)
        return self

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def terminate(self) -> None:
        self.process.send_signal(signal.SIGTERM)

    def kill_hard(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def wait(self, timeout_s: float) -> int:
        return self.process.wait(timeout=timeout_s)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)  # a test's worker holds nothing worth a clean stop
            self.process.wait(timeout=10)

    def __enter__(self) -> "WorkerProcess":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
