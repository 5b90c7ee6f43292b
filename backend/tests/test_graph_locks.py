"""Whose graph lock may be taken over at once: a holder on this host whose process has ended, also one
that lingers as a zombie (a gunicorn worker killed with its master is reaped by init some time later,
and an app started again meanwhile must not wait out the dead worker's lease)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from app.graph.graph_locks import is_dead_here, process_owner
from app.graph.server_process import has_ended


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _owner(pid: int, host: str | None = None) -> str:
    return f"{host or socket.gethostname()}:{pid}:0a1b2c3d"


def test_a_zombie_holder_of_this_host_has_ended_and_a_live_one_has_not():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 30
        while _state(child.pid) != "Z":  # exited, not reaped: nobody has waited for it yet
            assert time.monotonic() < deadline, "the child never exited"
            time.sleep(0.05)
        assert has_ended(child.pid)
        assert is_dead_here(_owner(child.pid))
        assert not is_dead_here(_owner(child.pid, host="another-host"))  # elsewhere only the lease tells
    finally:
        child.wait()
    assert has_ended(child.pid) and is_dead_here(_owner(child.pid))  # reaped: gone altogether


def test_this_process_and_a_running_one_hold_their_locks():
    assert not is_dead_here(process_owner()) and not has_ended(os.getpid())
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert not is_dead_here(_owner(sleeper.pid))
    finally:
        sleeper.kill()
        sleeper.wait()
    assert not is_dead_here("not-an-owner")
