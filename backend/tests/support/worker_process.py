"""A task worker as a separate process (`flask --app app worker`), as compose's `worker` service runs it:
the bench's ServedWorker, on the broker and database the test names (its DATA_DIR too), ready once it
listens on the queue.

    with WorkerProcess(tmp_path / "worker.log", QUEUE_URL=..., FALKORDB_URL=...) as worker:
        ...
        worker.terminate()            # SIGTERM: finishes the task in hand, then exits
        worker.kill_hard()            # SIGKILL: the task in hand is abandoned
"""

from __future__ import annotations

import signal
from pathlib import Path

from bench.load_run import ServedWorker, kill_hard


class WorkerProcess(ServedWorker):
    def __init__(self, log_path: Path, **env: str) -> None:
        data_dir = Path(env.pop("DATA_DIR", Path(log_path).parent / "worker-data"))
        super().__init__(data_dir, Path(log_path), {"RERANKER_PROVIDER": "none", **env})

    def start(self, ready_timeout_s: float = 120) -> "WorkerProcess":
        return self.launch().wait_ready(ready_timeout_s)

    def log(self) -> str:
        return self._log()

    def terminate(self) -> None:
        self.process.send_signal(signal.SIGTERM)

    def kill_hard(self) -> None:
        kill_hard(self.process)

    def wait(self, timeout_s: float) -> int:
        return self.process.wait(timeout=timeout_s)

    def stop(self) -> None:
        if self.process is not None:
            kill_hard(self.process)  # a test's worker holds nothing worth a clean stop

    def __enter__(self) -> "WorkerProcess":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
