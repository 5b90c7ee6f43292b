"""A graph database that does not answer at start: one clear 503, nothing left running, a retry later.

Without this a failed start (Neo4j down, a wrong password) left its driver and the driver's
background index task behind, and every later request built another one, waited out the driver's
30 s of transaction retries and answered 500. Now the half-built driver is closed, the request
gets a 503 that names the cause, and for RETRY_AFTER_S later requests with the same settings get
that answer at once instead of piling up behind another attempt.
"""

from __future__ import annotations

import threading
import time
from urllib.parse import urlparse

from neo4j.exceptions import AuthError, ClientError, ServiceUnavailable

from app.config import Config
from app.graph.local_neo4j import LocalNeo4jError

RETRY_AFTER_S = 5.0  # how long a failed start is answered from memory before the next attempt
CONNECT_TIMEOUT_S = 15.0  # Neo4j's connectivity check at start (the driver's own default is 30 s)


class GraphUnavailableError(RuntimeError):
    """The graph database could not be reached or refused us; the message says which and why."""

    retry_after_s = RETRY_AFTER_S


def _neo4j_server(config: Config) -> str:
    if not config.neo4j_uri:
        return "the local Neo4j"
    url = urlparse(config.neo4j_uri)  # host and port only: a URI may carry credentials
    return f"Neo4j at {url.hostname or 'localhost'}:{url.port or 7687}"


def describe(error: BaseException, config: Config) -> str:
    """What went wrong, in words an operator can act on; never the password or a stack trace."""
    if config.graph_backend == "neo4j":
        where = _neo4j_server(config)
        if isinstance(error, LocalNeo4jError):
            return f"{where} did not start: {str(error).splitlines()[0]}"
        if isinstance(error, AuthError):
            return f"{where} refused the credentials: check NEO4J_USER and NEO4J_PASSWORD"
        if isinstance(error, ClientError) and "DatabaseNotFound" in str(getattr(error, "code", "")):
            return f"{where} has no database {config.neo4j_database!r}: check NEO4J_DATABASE"
        if isinstance(error, (ServiceUnavailable, OSError, TimeoutError)):
            return f"{where} does not answer ({type(error).__name__}); is it running and reachable?"
        return f"{where} failed at start ({type(error).__name__}); the server log says why"
    where = "FalkorDB at FALKORDB_URL" if config.falkordb_url else "the embedded FalkorDB"
    return f"{where} failed at start ({type(error).__name__}); the server log says why"


class FailedStarts:
    """The last failed start, answered again without a new attempt while it is recent."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: tuple[Config, float, GraphUnavailableError] | None = None

    def recent(self, config: Config) -> GraphUnavailableError | None:
        with self._lock:
            if self._last and self._last[0] == config and time.monotonic() - self._last[1] < RETRY_AFTER_S:
                return self._last[2]
        return None

    def remember(self, config: Config, error: GraphUnavailableError) -> None:
        with self._lock:
            self._last = (config, time.monotonic(), error)

    def latest(self) -> GraphUnavailableError | None:
        with self._lock:
            return self._last[2] if self._last else None

    def forget(self) -> None:
        with self._lock:
            self._last = None
