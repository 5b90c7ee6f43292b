"""The app as a separate process, served the production way (`flask --app app serve`, waitress),
for tests that need a real socket or a real kill -9: security (what it binds to) and durability.

    with AppProcess(tmp_path / "data", tmp_path / "app.log") as app:
        requests_json(app.url("/health"))
        os.kill(app.falkordb_pid(), signal.SIGKILL)
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

BACKEND_DIR = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def call(url: str, method: str = "GET", body: Any = None, headers: dict[str, str] | None = None,
         timeout: float = 60) -> tuple[int, Any]:
    """(status, parsed JSON body) over real HTTP; error statuses are answers, not exceptions."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={
        **({"Content-Type": "application/json"} if data is not None else {}), **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


class AppProcess:
    """`flask --app app serve` in its own process on a free port, with its own DATA_DIR."""

    def __init__(self, data_dir: Path, log_path: Path, **env: str) -> None:
        self.data_dir = Path(data_dir)
        self.log_path = Path(log_path)
        self.port = free_port()
        self.env = {**os.environ, "DOTENV_PATH": os.devnull, "DATA_DIR": str(self.data_dir),
                    "PORT": str(self.port), "EMBEDDING_PROVIDER": "local", "RERANKER_PROVIDER": "none",
                    "GRAPHITI_TELEMETRY_ENABLED": "false", "LOG_LEVEL": "INFO", **env}
        if "HOST" not in env:  # the default bind address is what the security test checks
            self.env.pop("HOST", None)
        self.process: subprocess.Popen | None = None

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def start(self, ready_timeout_s: float = 120) -> "AppProcess":
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "flask", "--app", "app", "serve", "--threads", "8"],
            cwd=BACKEND_DIR, env=self.env, stdout=log, stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + ready_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the app exited with {self.process.returncode}; log:\n{self.log_tail()}")
            try:
                if call(self.url("/health"), timeout=2)[0] == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the app did not answer within {ready_timeout_s}s; log:\n{self.log_tail()}")

    def falkordb_pid(self) -> int:
        return int((self.data_dir / "falkordb" / "redis.pid").read_text().strip())

    def kill_hard(self) -> None:
        """kill -9: no handler runs, nothing is flushed by the app."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.kill_hard()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> "AppProcess":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def wait_gone(pid: int, timeout_s: float = 10) -> bool:
    """True once no process has this pid (a zombie counts as gone)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split()[2]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
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
