"""The local Neo4j: Neo4j 5.26 Community from Maven Central, run by the app when NEO4J_URI is unset.

The same idea as the embedded FalkorDB, for the production backend: with GRAPH_BACKEND=neo4j and no
NEO4J_URI a laptop or CI gets a real Neo4j server without Docker. The first use copies the
Community edition's jars from Maven Central into the cache (`mvn dependency:copy-dependencies`
on `neo4j_server/pom.xml`) and compiles the small launcher `neo4j_server/LocalNeo4j.java`;
later starts reuse both. The server listens on 127.0.0.1 only, with a password generated on
first start and kept (mode 0600) beside its data under `<DATA_DIR>/neo4j`.

    python -m app.graph.local_neo4j install | start | stop | status

`start` runs one detached server for several app processes (`make neo4j`) and prints the
NEO4J_* settings that reach it; an app that starts its own server stops it when it exits.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from neo4j import GraphDatabase

from app.config import Config
from app.graph.server_process import (
    ChildServer, PortTakenError, die_with_parent, end, launch_on_a_port_of_its_own, printed_since,
    raise_if_port_was_taken, runs_over, terminate_pid,
)

logger = logging.getLogger(__name__)

NEO4J_VERSION = "5.26.30"  # pinned in neo4j_server/pom.xml too; the test reads both
SERVER_SOURCES = Path(__file__).with_name("neo4j_server")
LAUNCHER = "LocalNeo4j"
USER = "neo4j"
DEFAULT_PORT = 7687
READY_TIMEOUT_S = 180.0  # a cold JVM on a busy 2-core machine; a warm start takes about 10 s
STOP_GRACE_S = 60.0  # Neo4j checkpoints before it exits
KILL_WAIT_S = 10.0


class LocalNeo4jError(RuntimeError):
    """The local Neo4j could not be installed or started; the message says what to do."""


class Neo4jPortTakenError(LocalNeo4jError, PortTakenError):
    """Another process bound the Bolt port before the local Neo4j could."""


# --- install ------------------------------------------------------------------------------------

def install_dir(cache_dir: Path) -> Path:
    return Path(cache_dir) / f"neo4j-{NEO4J_VERSION}"


def is_installed(cache_dir: Path) -> bool:
    return (install_dir(cache_dir) / ".complete").is_file()


def _require(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise LocalNeo4jError(
            f"the local Neo4j needs {tool!r} (Java 17+ and Maven): apt-get install openjdk-17-jdk-headless maven, "
            "or set NEO4J_URI to a running Neo4j 5.26")
    return path


def install(cache_dir: Path) -> Path:
    """Jars and the compiled launcher under the cache, once; a half-done install is redone."""
    target = install_dir(cache_dir)
    if is_installed(cache_dir):
        return target
    mvn, javac = _require("mvn"), _require("javac")
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    (partial / "classes").mkdir(parents=True)
    logger.info("Fetching Neo4j %s Community from Maven Central (first use only, ~125 MB)", NEO4J_VERSION)
    started = time.monotonic()
    _run([mvn, "-q", "-B", "-f", str(SERVER_SOURCES / "pom.xml"), "dependency:copy-dependencies",
          f"-DoutputDirectory={partial / 'lib'}"], "Maven could not fetch Neo4j")
    _run([javac, "-d", str(partial / "classes"), "-cp", str(partial / "lib" / "*"),
          str(SERVER_SOURCES / f"{LAUNCHER}.java")], "the launcher did not compile")
    (partial / ".complete").write_text(NEO4J_VERSION + "\n")
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    logger.info("Neo4j %s installed in %s (%.0f s)", NEO4J_VERSION, target, time.monotonic() - started)
    return target


def _run(command: list[str], failure: str) -> None:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
        raise LocalNeo4jError(f"{failure} (exit {result.returncode}): {' '.join(command[:4])} ...\n{tail}")


# --- the server ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Connection:
    """What a Neo4j client needs to reach the local server."""

    uri: str
    user: str
    password: str


class LocalNeo4j(ChildServer):
    """One JVM running Neo4j over `<data_dir>/neo4j`, Bolt on 127.0.0.1."""

    def __init__(self, data_dir: Path, cache_dir: Path, *, port: int | None = None,
                 heap_mb: int = 1024, page_cache_mb: int = 512):
        self.home = Path(data_dir) / "neo4j"
        self.cache_dir = Path(cache_dir)
        self.port = port
        self.heap_mb, self.page_cache_mb = heap_mb, page_cache_mb
        self.process: subprocess.Popen | None = None
        self._lock = threading.Lock()

    host = "127.0.0.1"

    @property
    def uri(self) -> str:
        return f"bolt://{self.host}:{self.port}"

    @property
    def connection(self) -> Connection:
        return Connection(self.uri, USER, self.password)

    @property
    def password(self) -> str:
        """Generated on first use and kept with the data: the system database remembers it."""
        path = self.home / "password"
        if not path.is_file():
            self.home.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as file:
                file.write(secrets.token_urlsafe(24))
        return path.read_text().strip()

    @property
    def record_file(self) -> Path:
        return self.home / "server.json"

    @property
    def log_file(self) -> Path:
        return self.home / "server.log"

    def answers(self, timeout_s: float = 2.0) -> bool:
        """Whether Bolt accepts us now (a fresh connection, one try)."""
        try:
            with GraphDatabase.driver(self.uri, auth=(USER, self.password), connection_timeout=timeout_s,
                                      connection_acquisition_timeout=timeout_s) as driver:
                driver.verify_connectivity()
            return True
        except Exception:  # refused, reset, timed out: it does not answer
            return False

    def command(self) -> list[str]:
        installed = install_dir(self.cache_dir)
        classpath = f"{installed / 'classes'}:{installed / 'lib' / '*'}"
        return [_require("java"), f"-Xmx{self.heap_mb}m", "-XX:+UseG1GC", "-cp", classpath, LAUNCHER,
                str(self.home), str(self.port), str(self.page_cache_mb)]

    def start(self, ready_timeout_s: float = READY_TIMEOUT_S, *, detached: bool = False) -> None:
        """Start the server (idempotent) and wait until Bolt accepts the password.

        Started by the app, the server dies with the thread that started it: call it from a thread
        that lives as long as the app (the graph loop's). `detached` leaves it running for others.
        """
        with self._lock:
            if self.process is not None and self.process.poll() is None:
                return
            install(self.cache_dir)
            self.home.mkdir(parents=True, exist_ok=True)
            stop_recorded_server(self.home)
            started = time.monotonic()
            launch_on_a_port_of_its_own(self, lambda: self._launch_and_wait(ready_timeout_s, detached),
                                        "the local Neo4j", may_choose=self.port is None)
            logger.info("Local Neo4j %s started in %.1f s (pid=%s, %s, data=%s)", NEO4J_VERSION,
                        time.monotonic() - started, self.process.pid, self.uri, self.home)
            if not detached:
                atexit.register(self.stop)

    def _launch_and_wait(self, ready_timeout_s: float, detached: bool) -> None:
        log_offset = self._launch(detached)
        try:
            self._wait_ready(ready_timeout_s, log_offset)
        except LocalNeo4jError:  # the port-taken error keeps this one as its context
            raise_if_port_was_taken(self.log_file, log_offset, self.port, Neo4jPortTakenError)
            raise

    def _launch(self, detached: bool) -> int:
        """Start the launcher; the log's length before it, where this start's lines begin."""
        environment = {**os.environ, "NEO4J_LOCAL_PASSWORD": self.password}
        with open(self.log_file, "ab") as log:
            log_offset = log.tell()
            self.process = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, cwd=self.home, env=environment,
                stdin=subprocess.DEVNULL,
                **({"start_new_session": True} if detached else {"preexec_fn": die_with_parent}))
        self.record_file.write_text(json.dumps({"pid": self.process.pid, "port": self.port}))
        return log_offset

    def _wait_ready(self, timeout_s: float, log_offset: int) -> None:
        """Wait for the launcher's READY (the password is set only then: polling Bolt before it
        would count as failed logins, which Neo4j rate-limits), then check that Bolt accepts us."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise LocalNeo4jError(f"the local Neo4j exited with code {self.process.returncode}; "
                                      f"see {self.log_file}")
            if printed_since(self.log_file, log_offset, "READY"):
                break
            time.sleep(0.2)
        else:
            self.stop()
            raise LocalNeo4jError(f"the local Neo4j did not answer within {timeout_s:.0f} s; see {self.log_file}")
        with GraphDatabase.driver(self.uri, auth=(USER, self.password), connection_timeout=5) as driver:
            driver.verify_connectivity()

    def stop(self) -> None:
        with self._lock:
            process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        end(process, STOP_GRACE_S, KILL_WAIT_S)  # the JVM's shutdown hook closes the databases cleanly
        self.record_file.unlink(missing_ok=True)
        logger.info("Local Neo4j stopped")


def _recorded(home: Path) -> dict | None:
    try:
        record = json.loads((home / "server.json").read_text())
        pid = record["pid"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return record if isinstance(pid, int) and runs_over(pid, LAUNCHER.encode(), home) else None


def stop_recorded_server(home: Path) -> bool:
    """Stop the server recorded under `home` (a detached one, or one a crashed app left): it holds the store."""
    record = _recorded(home)
    if record is None:
        return False
    pid = record["pid"]
    logger.info("Stopping the local Neo4j running over %s (pid=%s)", home, pid)
    if not terminate_pid(pid, STOP_GRACE_S):
        with contextlib.suppress(ProcessLookupError):  # it may end between the two
            os.kill(pid, signal.SIGKILL)
    (home / "server.json").unlink(missing_ok=True)
    return True


def main(argv: list[str]) -> int:
    """`install`, `start` (detached, for several app processes), `stop`, `status`."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    config = Config.from_env()
    server = LocalNeo4j(config.data_dir, config.neo4j_cache_dir, port=config.neo4j_local_port or DEFAULT_PORT,
                        heap_mb=config.neo4j_local_heap_mb, page_cache_mb=config.neo4j_local_page_cache_mb)
    action = argv[0] if argv else "status"
    try:
        if action == "install":
            print(install(config.neo4j_cache_dir))
        elif action == "start":
            record = _recorded(server.home)
            if record is None:
                server.start(detached=True)
            else:
                server.port = record["port"]
            # The password stays in its file: the line reads it, so it never lands in a terminal log.
            print(f"export NEO4J_URI={server.uri} NEO4J_USER={USER} "
                  f"NEO4J_PASSWORD=\"$(cat {server.home / 'password'})\"")
        elif action == "stop":
            print("stopped" if stop_recorded_server(server.home) else "not running")
        elif action == "status":
            record = _recorded(server.home)
            print(f"running: bolt://127.0.0.1:{record['port']} (pid {record['pid']})" if record else "not running")
        else:
            print(f"unknown action {action!r}: use install, start, stop or status", file=sys.stderr)
            return 2
    except LocalNeo4jError as error:
        print(f"local Neo4j: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
