"""An exclusive inter-process lock on a file, so two processes (the app, a test run, the CLI)
never assemble the same model or start the same server at once."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def exclusive_lock(lock_path: Path) -> Iterator[None]:
    """Hold an flock on `lock_path` (created if missing) for the duration of the block.

    The lock dies with the process, so a crashed holder never leaves a stale lock behind.
    """
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
