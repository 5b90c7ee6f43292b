"""The local model servers' processes (llama-server, Ollama): starting one in its own session, the pid
record beside its log, whether a pid is still our server, waiting for it to end and stopping it."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from app.graph.server_process import has_ended

log = logging.getLogger(__name__)

KILL_WAIT_S = 5.0  # after SIGKILL: the kernel ends the process; this only waits for it to be gone

children: dict[int, subprocess.Popen] = {}  # servers this process started, reaped when they stop


def start(command: list[str], *, log_path: Path, cwd: Path, env: Mapping[str, str] | None = None) -> int:
    """Start a server as the leader of its own session (so stopping it stops its helpers too), its
    output in `log_path`; its pid."""
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                                   cwd=cwd, env=env, start_new_session=True)
    children[process.pid] = process
    return process.pid


def write_record(path: Path, record: dict) -> None:
    """The pid record, replaced whole so a reader never sees half of it."""
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    os.replace(temporary, path)


def read_record(path: Path) -> dict | None:
    """The pid record, or None when there is none or it names no pid."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("pid"), int) else None


def is_alive(pid: int) -> bool:
    child = children.get(pid)
    if child is not None:
        if child.poll() is not None:  # reaps our own child, so it does not linger as a zombie
            children.pop(pid, None)
            return False
        return True
    return not has_ended(pid)


def runs(pid: int, is_server: Callable[[list[bytes]], bool]) -> bool:
    """Alive and still running the server its command line (`is_server`) says, so a recycled pid is
    never signalled."""
    if not is_alive(pid):
        return False
    if pid in children:
        # Our own unreaped child cannot have a recycled pid. Its cmdline can read empty for a
        # moment right after Popen returns (vfork resumes the parent mid-exec), so skip it.
        return True
    try:
        arguments = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return not Path("/proc").is_dir()  # no procfs (macOS): trust the pid
    return is_server(arguments)


def wait_exit(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not is_alive(pid):
            return True
        time.sleep(0.1)
    return not is_alive(pid)


def _terminate(pid: int, grace_s: float, name: str) -> bool:
    """SIGTERM to the server's group, SIGKILL after `grace_s`; whether it is gone."""
    _signal_group(pid, signal.SIGTERM)
    if wait_exit(pid, grace_s):
        return True
    log.warning("%s pid %s ignored SIGTERM for %.0f s; sending SIGKILL", name, pid, grace_s)
    _signal_group(pid, signal.SIGKILL)
    return wait_exit(pid, KILL_WAIT_S)


def stop_recorded(record: Path, is_server: Callable[[list[bytes]], bool], grace_s: float, name: str,
                  error: type[Exception]) -> bool:
    """Stop the server its pid record names while that pid still runs it (`_terminate`) and remove the
    record; False when none was running. Raises `error` when it would not stop. Caller holds the
    server's lock."""
    fields = read_record(record)
    pid = fields["pid"] if fields else None
    if pid is None or not runs(pid, is_server):
        record.unlink(missing_ok=True)
        return False
    log.info("Stopping %s pid %s", name, pid)
    if not _terminate(pid, grace_s, name):
        raise error(f"Could not stop {name} pid {pid}")
    record.unlink(missing_ok=True)
    return True


def log_tail(path: Path, lines: int) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def _signal_group(pid: int, signum: int) -> None:
    try:
        # A server we started leads its own session: its group holds the helpers it spawned (Ollama's
        # model runners), which go with it.
        if os.getpgid(pid) == pid:
            os.killpg(pid, signum)
        else:
            os.kill(pid, signum)
    except ProcessLookupError:
        pass
