"""A real RQ worker on the app's broker, run on a thread of the test process: the tasks it takes run
in-process, so they see what a test put there (a recording driver, a smaller batch size). The app under
test gets TASK_WORKERS=0, so no worker process of its own takes them first.

    with in_process_worker(GraphitiAdapter().tasks.queue):
        ... the API queues a task; this thread runs it ...
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from rq.timeouts import TimerDeathPenalty

from app.tasks import QUEUE_NAME, TaskQueue, TaskWorker


class InProcessWorker(TaskWorker):
    death_penalty_class = TimerDeathPenalty  # the signal-based one works on the main thread only

    def _install_signal_handlers(self) -> None:  # signals reach the main thread only: nothing to install
        pass


@contextmanager
def in_process_worker(queue: TaskQueue, poll_s: float = 0.05) -> Iterator[None]:
    stop = threading.Event()

    def run() -> None:
        worker = InProcessWorker([QUEUE_NAME], connection=queue.connection)
        while not stop.is_set():
            worker.work(burst=True, with_scheduler=False)  # every queued task, then back here
            stop.wait(poll_s)

    thread = threading.Thread(target=run, name="in-process-worker", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=60)
