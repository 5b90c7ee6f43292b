"""The local model servers' processes (llama-server, Ollama): the ones this process started, whether a
pid is still alive, and waiting for one to end."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

children: dict[int, subprocess.Popen] = {}  # servers this process started, reaped when they stop


def is_alive(pid: int) -> bool:
    child = children.get(pid)
    if child is not None:
        if child.poll() is not None:  # reaps our own child, so it does not linger as a zombie
            children.pop(pid, None)
            return False
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # field 3 of stat is the state; a zombie (Z) has exited and only waits for its parent
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def wait_exit(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not is_alive(pid):
            return True
        time.sleep(0.1)
    return not is_alive(pid)
