"""Which live test sessions use a model server that sessions on this machine share, so the last one to
end stops it. One file per session pid in a folder of the server's; a session that was killed leaves
a file whose pid is gone, which the next count removes."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.local_llm.locking import exclusive_lock
from app.local_llm.processes import is_alive


class ServerLeases:
    """`take()` when a session starts using the server; `release_and_stop_if_last()` when it is done."""

    def __init__(self, folder: Path, stop: Callable[[], Any]) -> None:
        self.folder = folder
        self.lock = folder.with_name(folder.name + ".lock")
        self.mine = folder / str(os.getpid())
        self._stop = stop

    def take(self) -> None:
        with exclusive_lock(self.lock):
            self.folder.mkdir(parents=True, exist_ok=True)
            self.mine.touch()

    def release_and_stop_if_last(self) -> None:
        # Under the lease lock, so no session can take a lease between the count and the stop.
        with exclusive_lock(self.lock):
            self.mine.unlink(missing_ok=True)
            if not self._others_alive():
                self._stop()

    def _others_alive(self) -> bool:
        alive = False
        for lease in self.folder.glob("*"):
            if is_alive(int(lease.name)):
                alive = True
            else:
                lease.unlink(missing_ok=True)  # a session that was killed
        return alive

