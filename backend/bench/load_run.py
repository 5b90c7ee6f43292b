"""The pieces of a load run (`python -m bench load`): the API served the production way in its own
process, a synthetic graph, concurrent keep-alive clients, latency percentiles and memory readings.

The server is `flask --app app serve` (gunicorn, app/cli/server.py: one worker process of many
threads) with its own DATA_DIR, so the graph singleton and its event-loop thread are exercised exactly
as in production, and its memory is measured apart from the clients'.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from app.graph.server_process import (
    die_with_parent, free_port, launch_on_a_port_of_its_own, listens_on, raise_if_port_was_taken,
)

BACKEND_DIR = Path(__file__).resolve().parents[1]

_PLACES = ["North Reservoir", "Harbor Station", "Old Mill", "East Pier", "Hill Tank", "River Gate", "Salt Marsh",
           "Quarry Lake", "Airport Road", "Market Square"]
_THINGS = ["pressure", "turbidity", "chlorine level", "flow rate", "temperature", "nitrate level", "pump noise",
           "water level", "pH value", "lead content"]
_VERBS = ["reports", "logs", "flags a rise in", "measures", "shows a drop in"]


def synthetic_facts(count: int, sensors: int | None = None) -> list[dict[str, str]]:
    """Sensor facts with enough varied wording that different queries find different facts.

    A new sensor per fact by default; with `sensors`, the facts cycle through that many (each fact
    is then one sensor's numbered reading), so most facts add no new entity, as in a real graph."""
    return [synthetic_fact(i, sensors) for i in range(count)]


def synthetic_fact(i: int, sensors: int | None = None) -> dict[str, str]:
    """The i-th of `synthetic_facts`, so that a large graph's facts can be written out one at a time."""
    place, thing = _PLACES[i % len(_PLACES)], _THINGS[(i // len(_PLACES)) % len(_THINGS)]
    verb = _VERBS[i % len(_VERBS)]
    sensor = f"Sensor {i % sensors}" if sensors else f"Sensor {i}"
    reading = f" (reading {i})" if sensors else ""
    return {"source": sensor, "target": place, "relation": "installed at",
            "fact": f"{sensor} at {place} {verb} {thing} during shift {i % 7}{reading}"}


def synthetic_queries() -> list[str]:
    return [f"{thing} at {place}" for place in _PLACES for thing in _THINGS[:4]]


def rss_mib(pid: int, field: str = "VmRSS") -> float | None:
    """The process's resident memory now (VmHWM: its peak so far), in MiB; None once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def server_rss_mib(pid: int, field: str = "VmRSS") -> float | None:
    """The API server's resident memory (VmHWM: the sum of its processes' peaks): its master process
    (`pid`) and its workers, in MiB."""
    try:
        workers = [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return None
    readings = [rss_mib(process, field) for process in (pid, *workers)]
    return round(sum(reading for reading in readings if reading is not None), 1) if readings[0] else None


def request_json(port: int, method: str, path: str, body: Any = None, timeout: float = 300) -> tuple[int, Any]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        payload = None if body is None else json.dumps(body)
        connection.request(method, path, payload, {"Content-Type": "application/json"} if payload else {})
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"null")
    finally:
        connection.close()


# The database server each GRAPH_BACKEND's app starts over its DATA_DIR: its name, and the file under
# DATA_DIR that holds its pid (the embedded FalkorDB's pidfile; the local Neo4j's record, app/graph/local_neo4j.py).
DATABASES = {"falkordb": ("FalkorDB", "falkordb/redis.pid"), "neo4j": ("Neo4j", "neo4j/server.json")}


def database_pid(data_dir: Path, backend: str) -> int | None:
    """The pid of the database server the app started under `data_dir`, from the file it recorded there."""
    try:
        text = (Path(data_dir) / DATABASES[backend][1]).read_text().strip()
        return int(json.loads(text)["pid"] if text.startswith("{") else text)
    except (OSError, ValueError, KeyError):
        return None


# Settings of the caller's environment a served app never inherits: it must not write to a configured
# database or queue on a configured broker, and its private server asks for no token.
NOT_INHERITED = ("FALKORDB_URL", "NEO4J_URI", "NEO4J_LOCAL_PORT", "QUEUE_URL", "API_TOKEN")


def bench_environment(data_dir: Path, env: dict[str, str]) -> dict[str, str]:
    """The environment of an app process a bench starts: the caller's, less NOT_INHERITED, with the
    bench's defaults, then `env` (which may name a database or broker the bench itself started)."""
    inherited = {name: value for name, value in os.environ.items() if name not in NOT_INHERITED}
    return {**inherited, "DOTENV_PATH": os.devnull, "DATA_DIR": str(data_dir), "EMBEDDING_PROVIDER": "local",
            "GRAPHITI_TELEMETRY_ENABLED": "false", "LOG_LEVEL": "WARNING", **env}


class ServedApp:
    """`flask --app app serve` in a subprocess on a free loopback port; `process` is gunicorn's master.

    GRAPH_BACKEND comes from the environment (FalkorDB unless it says neo4j). The app starts its own
    database under the private DATA_DIR unless `env` names one the bench started (NEO4J_URI,
    FALKORDB_URL, QUEUE_URL): a server configured in the caller's environment is never written to."""

    def __init__(self, data_dir: Path, log_path: Path, threads: int, env: dict[str, str]) -> None:
        self.data_dir, self.log_path, self.threads = data_dir, log_path, threads
        self.port = free_port()
        self.env = bench_environment(data_dir, {"HOST": "127.0.0.1", **env})
        self.env["PORT"] = str(self.port)
        self.env["GRAPH_BACKEND"] = (self.env.get("GRAPH_BACKEND") or "falkordb").lower()
        if self.env["GRAPH_BACKEND"] not in DATABASES:
            raise ValueError(f"GRAPH_BACKEND={self.env['GRAPH_BACKEND']!r}: the served app runs on {sorted(DATABASES)}")
        self.process: subprocess.Popen | None = None

    @property
    def database(self) -> str:
        """The database's name, for the columns that report it."""
        return DATABASES[self.env["GRAPH_BACKEND"]][0]

    def database_pid(self) -> int | None:
        return database_pid(self.data_dir, self.env["GRAPH_BACKEND"])

    def start(self, timeout_s: float = 180) -> "ServedApp":
        """Serve and wait until this process answers /health; on another port when another process
        bound the chosen one first (it would answer our requests with its own data)."""
        return launch_on_a_port_of_its_own(self, lambda: self._launch(timeout_s), "the API", may_choose=True)

    def _launch(self, timeout_s: float) -> "ServedApp":
        self.env["PORT"] = str(self.port)
        with open(self.log_path, "ab") as log:
            log_offset = log.tell()
            self.process = subprocess.Popen(
                [sys.executable, "-m", "flask", "--app", "app", "serve", "--threads", str(self.threads)],
                cwd=BACKEND_DIR, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent)  # a bench killed outright leaves no app (and database) behind
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise_if_port_was_taken(self.log_path, log_offset, self.port)
                raise RuntimeError(f"the API exited with {self.process.returncode}; {self.where_to_look()}")
            try:
                if (request_json(self.port, "GET", "/health", timeout=2)[0] == 200
                        and listens_on(self.process.pid, self.port)):
                    return self
            except (OSError, http.client.HTTPException, ValueError):  # nothing there yet, or no HTTP answer
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the API did not answer within {timeout_s}s; {self.where_to_look()}")

    def where_to_look(self) -> str:
        """What a failed start's error points to."""
        return f"see {self.log_path}"

    def memory(self) -> dict[str, Any]:
        pid = self.database_pid()
        return {"app_rss_mib": server_rss_mib(self.process.pid), "database": self.database,
                "database_rss_mib": rss_mib(pid) if pid is not None else None}

    def stop(self) -> None:
        _stop(self.process)


def _stop(process: subprocess.Popen | None, grace_s: float = 30) -> None:
    if process is not None and process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


class ServedWorker:
    """`flask --app app worker` in a subprocess, as compose's `worker` service runs it: on the broker
    (QUEUE_URL) and database `env` names, ready once it listens on the queue. `launch` and `wait_ready`
    apart, so that several start at once (each dies with the thread that launched it: launch them
    from one that lives as long as the run)."""

    READY_LINE = "Listening on"  # RQ's line once the worker waits for tasks

    def __init__(self, data_dir: Path, log_path: Path, env: dict[str, str]) -> None:
        self.log_path = log_path
        # INFO: the ready line is one of RQ's INFO lines.
        self.env = bench_environment(data_dir, {"TASK_WORKERS": "0", **env, "LOG_LEVEL": "INFO"})
        self.process: subprocess.Popen | None = None

    def launch(self) -> "ServedWorker":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "flask", "--app", "app", "worker"], cwd=BACKEND_DIR, env=self.env,
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)
        return self

    def wait_ready(self, timeout_s: float = 180) -> "ServedWorker":
        deadline = time.monotonic() + timeout_s
        while self.READY_LINE not in self._log():
            if self.process.poll() is not None:
                raise RuntimeError(f"the worker exited with {self.process.returncode}; see {self.log_path}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the worker was not ready within {timeout_s:g} s; see {self.log_path}")
            time.sleep(0.2)
        return self

    def _log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        _stop(self.process)  # SIGTERM: the task in hand is finished first


def kill_hard(process: subprocess.Popen) -> None:
    """kill -9: nothing of the process runs any more, nothing is flushed."""
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)


@dataclass
class LoadResult:
    latencies_s: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # Requests that failed on a server taken down on purpose (bench/replicas.py kills one): what a
    # load balancer loses until its readiness check takes that server out; not the servers' errors.
    lost: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, latency_s: float, error: str | None, lost: bool = False) -> None:
        with self._lock:
            if lost:
                self.lost.append(error or "lost")
                return
            self.latencies_s.append(latency_s)
            if error:
                self.errors.append(error)

    def summary(self) -> dict[str, Any]:
        ordered = sorted(self.latencies_s)
        return {"requests": len(ordered), "errors": len(self.errors), "first_errors": self.errors[:5],
                "lost": len(self.lost),
                "elapsed_s": round(self.elapsed_s, 2),
                "throughput_rps": round(len(ordered) / self.elapsed_s, 2) if self.elapsed_s else 0.0,
                **{f"p{q}_ms": round(percentile(ordered, q) * 1000, 1) for q in (50, 95, 99)},
                "max_ms": round(ordered[-1] * 1000, 1) if ordered else 0.0}


def percentile(ordered: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list (0 for an empty one)."""
    if not ordered:
        return 0.0
    rank = max(1, min(len(ordered), int(-(-q * len(ordered) // 100))))
    return ordered[rank - 1]


class Router(Protocol):
    """Where each client sends its next request, as a load balancer decides it."""

    def port_for(self, client: int) -> int: ...

    def taken_down(self, port: int) -> bool:
        """Whether the server on `port` was taken down on purpose: its failed requests are lost, not errors."""
        ...


@dataclass(frozen=True)
class OnePort:
    """Every client on one server (the load test)."""

    port: int

    def port_for(self, client: int) -> int:
        return self.port

    def taken_down(self, port: int) -> bool:
        return False


def run_clients(target: int | Router, graph_id: str, queries: list[str], clients: int, duration_s: float,
                limit: int) -> LoadResult:
    """`clients` threads, each with one keep-alive connection, searching until the time is up; on the
    one port `target`, or wherever the router sends each client (a new connection when that changes)."""
    router = OnePort(target) if isinstance(target, int) else target
    result = LoadResult()
    stop_at = time.monotonic() + duration_s
    path = f"/api/graph/{graph_id}/search"

    def client(index: int) -> None:
        port = router.port_for(index)
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        turn = index * 7
        while time.monotonic() < stop_at:
            if router.port_for(index) != port:
                connection.close()
                port = router.port_for(index)
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
            body = json.dumps({"query": queries[turn % len(queries)], "limit": limit})
            turn += 1
            started = time.perf_counter()
            error = None
            try:
                connection.request("POST", path, body, {"Content-Type": "application/json"})
                response = connection.getresponse()
                answer = json.loads(response.read())
                if response.status != 200:
                    error = f"HTTP {response.status}: {answer}"
                elif answer.get("error") or not answer.get("edges"):
                    error = f"search error: {answer.get('error') or 'no results'}"
            except (OSError, http.client.HTTPException, ValueError) as exc:
                error = f"{type(exc).__name__}: {exc}"
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
                if router.taken_down(port):
                    time.sleep(0.05)  # a refused connect returns at once: do not spin until the balancer notices
            result.record(time.perf_counter() - started, error, lost=error is not None and router.taken_down(port))
        connection.close()

    started = time.monotonic()
    threads = [threading.Thread(target=client, args=(index,), daemon=True) for index in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    result.elapsed_s = time.monotonic() - started
    return result
