"""What the graph servers the app runs itself (the embedded FalkorDB, the local Neo4j) share: a child
that dies with the thread that started it, a free loopback port, and stopping a server, whether this
process started it or a crashed app left it holding the data files."""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Runs in the child before exec: the kernel sends SIGTERM when the parent thread exits.

    This is what keeps a kill -9 of the app from leaving an orphan server behind. Both servers treat
    SIGTERM as a clean shutdown (redis flushes its append-only file, the JVM closes its databases).
    """
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ChildServer:
    """A server process this app started: `process`, None before the start and after the stop."""

    process: subprocess.Popen | None = None

    @property
    def exited(self) -> bool:
        """True when the server was started and has since died (crash, OOM killer, kill -9)."""
        process = self.process
        return process is not None and process.poll() is not None

    def wait_exited(self, timeout_s: float) -> bool:
        """Wait until the server process has exited; whether it has (True when none was started).

        A killed server closes its sockets before it is gone: for a moment it refuses every
        connection while `exited` still says False."""
        process = self.process
        if process is None:
            return True
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return True


def end(process: subprocess.Popen, grace_s: float, kill_wait_s: float) -> None:
    """SIGTERM (a clean shutdown), then SIGKILL after `grace_s` for a server that cannot act on it
    (one busy loading its data)."""
    process.terminate()
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=kill_wait_s)


def runs_over(pid: int, program: bytes, data_dir: Path) -> bool:
    """Whether `pid` is still `program` serving `data_dir`, so a recycled pid is never signalled."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return program in cmdline and str(data_dir).encode() in cmdline


def terminate_pid(pid: int, grace_s: float) -> bool:
    """SIGTERM to a server this process did not start; whether it was gone within `grace_s`."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + grace_s
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return not Path(f"/proc/{pid}").exists()
