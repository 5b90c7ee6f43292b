"""Kill a process at a chosen database command, for real: a thread watches the embedded FalkorDB
with Redis MONITOR (which reports each command once the server has run it) and sends SIGKILL as
soon as it has seen `count` commands that contain every one of `needles`.

    with KillAtCommand(port, pid_to_kill, needles=("MERGE (n:Entity", graph_id), count=3) as killer:
        ...start the request...
    assert killer.killed.wait(60)
"""

from __future__ import annotations

import os
import re
import signal
import threading

import redis

ENTITY_WRITE = "MERGE (n:Entity"  # graphiti's entity save query on FalkorDB: one query per node


def port_of(falkordb_pid: int) -> int:
    """The port an embedded FalkorDB listens on: Redis sets its process title to `redis-server HOST:PORT`."""
    title = open(f"/proc/{falkordb_pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
    return int(re.search(r":(\d+)", title).group(1))


class KillAtCommand:
    def __init__(self, port: int, victim_pid: int, needles: tuple[str, ...], count: int = 1):
        self.port, self.victim_pid, self.needles, self.count = port, victim_pid, needles, count
        self.killed = threading.Event()
        self.seen = 0
        self._client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=None)
        self._monitor = None
        self._thread = threading.Thread(target=self._watch, name="kill-at-command", daemon=True)

    def __enter__(self) -> "KillAtCommand":
        self._monitor = self._client.monitor().__enter__()  # MONITOR is on once this returns
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._thread.join(timeout=5)
        self._client.close()

    def _watch(self) -> None:
        try:
            while self.seen < self.count:
                command = self._monitor.next_command()["command"]
                if all(needle in command for needle in self.needles):
                    self.seen += 1
        except (redis.ConnectionError, OSError):  # the server went away first
            return
        os.kill(self.victim_pid, signal.SIGKILL)
        self.killed.set()
