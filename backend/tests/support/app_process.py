"""The app as a separate process, served the production way (`flask --app app serve`: gunicorn,
app/cli/server.py), for tests that need a real socket or a real kill -9: security (what it binds to) and durability.

    with AppProcess(tmp_path / "data", tmp_path / "app.log") as app:
        requests_json(app.url("/health"))
        os.kill(app.falkordb_pid(), signal.SIGKILL)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from bench.load_run import BACKEND_DIR, ServedApp
from app.graph.server_process import free_port

__all__ = ["BACKEND_DIR", "AppProcess", "call", "wait_gone"]


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


class AppProcess(ServedApp):
    """`flask --app app serve` in its own process on a free port, with its own DATA_DIR, started as the
    bench starts it; unlike the bench's, it keeps FALKORDB_URL, NEO4J_URI and HOST when the test gives them."""

    def __init__(self, data_dir: Path, log_path: Path, **env: str) -> None:
        self.data_dir = Path(data_dir)
        self.log_path = Path(log_path)
        self.threads = 8
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
        return super().start(timeout_s=ready_timeout_s)

    def where_to_look(self) -> str:
        return f"log:\n{self.log_tail()}"

    def falkordb_pid(self) -> int:
        return int((self.data_dir / "falkordb" / "redis.pid").read_text().strip())

    def kill_hard(self) -> None:
        """kill -9: no handler runs, nothing is flushed by the app."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

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
