"""What the graph servers the app runs itself (the embedded FalkorDB, the local Neo4j) share: a child
that dies with the thread that started it, a free loopback port and the check that the server
answering on it is the one started for it, and stopping a server, whether this process started it
or a crashed app left it holding the data files."""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, TypeVar

logger = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1


def die_with_parent(signum: int = signal.SIGTERM) -> None:
    """Runs in the child before exec: the kernel sends `signum` when the parent thread exits.

    This is what keeps a kill -9 of the app from leaving an orphan server behind. Both servers treat
    SIGTERM as a clean shutdown (redis flushes its append-only file, the JVM closes its databases).
    The API's server workers take SIGKILL (app/cli/server.py): a kill -9 of the server is one of all of it.
    """
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signum)
    except OSError:
        pass


# What redis-server, `flask serve` and the JVM print when the port they were given is bound already, and
# what gunicorn prints when another process binds it between `flask serve`'s check and its own bind.
PORT_TAKEN_MESSAGES = ("Address already in use", "Connection in use")
PORT_TRIES = 3  # how many ports a start chooses before it gives up


class PortTakenError(RuntimeError):
    """Another process bound the port chosen for a server before the server itself could."""


def free_port() -> int:
    """A loopback port nobody listens on right now. Nothing holds it until the server binds it, and
    another process can take it in between: a start confirms that the server answering there is
    its own (a PID the server reports, or `listens_on`) and chooses again if it is not."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class HasPort(Protocol):
    port: int | None


Launched = TypeVar("Launched")


def launch_on_a_port_of_its_own(server: HasPort, launch: Callable[[], Launched], name: str,
                                may_choose: bool) -> Launched:
    """`launch()` (start the server on `server.port` and wait until it answers) with a free port when
    none is set. When another process bound the port first (`launch` raises PortTakenError), a
    server that `may_choose` its port (none was given, and no client uses it yet) tries another."""
    for attempt in range(1, PORT_TRIES + 1):
        server.port = server.port or free_port()
        try:
            return launch()
        except PortTakenError:
            if not may_choose or attempt == PORT_TRIES:
                raise
            logger.warning("Port %s was taken before %s bound it; choosing another", server.port, name)
            server.port = None
    raise AssertionError("unreachable")


def listens_on(pid: int, port: int) -> bool:
    """Whether process `pid` holds a listening TCP socket on `port` (False once it is gone)."""
    try:
        return any(listening == port for _, listening in listening_addresses(pid))
    except OSError:
        return False


def listening_addresses(pid: int) -> set[tuple[str, int]]:
    """(ip, port) of the TCP sockets the process listens on, read from /proc (IPv4 and IPv6)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table, width in (("tcp", 8), ("tcp6", 32)):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in inodes:  # 0A: LISTEN
                address, port = local.split(":")
                found.add((_ip(address, width), int(port, 16)))
    return found


def _ip(hex_address: str, width: int) -> str:
    raw = bytes.fromhex(hex_address)
    if width == 8:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
    return socket.inet_ntop(socket.AF_INET6, words)


def printed_since(log_path: Path, offset: int, text: str) -> bool:
    """Whether `text` appears in the log after byte `offset` (where this start began writing)."""
    try:
        with open(log_path, "rb") as log:
            log.seek(offset)
            return text.encode() in log.read()
    except OSError:
        return False


def raise_if_port_was_taken(log_path: Path, offset: int, port: int,
                            error: type[PortTakenError] = PortTakenError) -> None:
    """For a server that exited during its start: `error` when its log since `offset` says that its
    port was bound already, so the caller can choose another port; else nothing."""
    if any(printed_since(log_path, offset, message) for message in PORT_TAKEN_MESSAGES):
        raise error(f"port {port} is taken by another process")


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


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name, the state first; None once `pid` is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def has_ended(pid: int) -> bool:
    """Whether process `pid` is gone or a zombie: a zombie has exited and only waits for its parent to reap
    it, which a process adopted by init may do some time later. Another user's live process has not ended."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    fields = _stat_fields(pid)
    return fields is None or fields[0] == "Z"  # None: gone between the two looks


def cpu_seconds(pid: int) -> float | None:
    """The CPU time (user + system) process `pid` has used so far, from /proc; None once it is gone."""
    fields = _stat_fields(pid)
    if fields is None:
        return None
    # fields[0] is the state (the third field of the line): utime and stime are the 14th and 15th
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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
