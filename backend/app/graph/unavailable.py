"""A graph database that cannot be used: one 503 `graph_unavailable` that says which database and
what is wrong, at start and at any later moment, on both backends; nothing left running; a retry later.

Which database: "Neo4j at host:port", "FalkorDB at host:port" (from FALKORDB_URL) or "the embedded
FalkorDB"; never a password or a URL's credentials. What: it does not answer, it is loading its data
(starting or restarting), or it refused the credentials. `as_unavailable()` is the one place an
exception is recognised as one of these, wherever it was raised and however it was wrapped: the
graph operations (so background tasks and report tools too) and the API's error handler use it.

At start, without this a failed start (Neo4j down, a wrong password) left its driver and the
driver's background index task behind, and every later request built another one, waited out the
driver's 30 s of transaction retries and answered 500. Now the half-built driver is closed, the
request gets a 503 that names the cause, and for RETRY_AFTER_S later requests with the same settings
get that answer at once instead of piling up behind another attempt.
"""

from __future__ import annotations

import threading
import time
from urllib.parse import urlparse

import redis.exceptions as redis_errors
from neo4j.exceptions import AuthError, ClientError, Neo4jError, ServiceUnavailable, SessionExpired

from app.config import Config
from app.graph.local_neo4j import LocalNeo4jError

RETRY_AFTER_S = 5.0  # how long a failed start is answered from memory before the next attempt
CONNECT_TIMEOUT_S = 15.0  # Neo4j's connectivity check at start (the driver's own default is 30 s)


class GraphUnavailableError(RuntimeError):
    """The graph database could not be reached or refused us; the message says which and why.

    `details` go into the error body beside code and message (an import says `stored: 0`)."""

    retry_after_s = RETRY_AFTER_S

    def __init__(self, message: str, **details) -> None:
        super().__init__(message)
        self.details = details


# Both clients raise these when the server refuses who we are: redis AUTH (a wrong or missing
# password in FALKORDB_URL), Neo4j's authentication failure (also after start, once the password
# was changed under a running app).
_REFUSED = (AuthError, redis_errors.AuthenticationError, redis_errors.AuthorizationError)
# A FalkorDB (redis) server answers LOADING while it replays its data after a start or restart.
_LOADING = (redis_errors.BusyLoadingError,)
_NEO4J_LOADING_CODES = ("Neo.TransientError.General.DatabaseUnavailable",)
# The server is gone, or the connection to it broke: both clients wrap the socket's own error in one
# of these. Not the bare socket errors (ConnectionRefusedError...): a view or task also talks to the
# model and embedding servers, and such an error in a chain may be theirs. Nor builtins.TimeoutError:
# after start that is a query past its deadline (GraphTimeoutError, 504).
_NO_ANSWER = (ServiceUnavailable, SessionExpired, redis_errors.ConnectionError, redis_errors.TimeoutError)


def _kind(error: BaseException) -> str | None:
    """'refused', 'loading' or 'no_answer' when this one exception says the database cannot be used."""
    if isinstance(error, _REFUSED):
        return "refused"
    if isinstance(error, _LOADING) or (
            isinstance(error, Neo4jError) and getattr(error, "code", None) in _NEO4J_LOADING_CODES):
        return "loading"
    if isinstance(error, _NO_ANSWER):
        return "no_answer"
    return None


def unavailable_cause(error: BaseException | None) -> BaseException | None:
    """The exception in `error`'s chain that says the database cannot be used, or None.

    The chain is followed because such an error often arrives wrapped: by an import that failed part
    way (ImportFailedError from a ConnectionError), or by graphiti and our own code raising while
    handling it. A context the code chose to hide (`raise ... from None`) is not followed."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if _kind(error) is not None:
            return error
        seen.add(id(error))
        error = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
    return None


def where(config: Config) -> str:
    """The database the settings name, as an operator knows it: host and port only, since a URI
    (FALKORDB_URL, NEO4J_URI) may carry credentials."""
    if config.graph_backend == "neo4j":
        if not config.neo4j_uri:
            return "the local Neo4j"
        url = urlparse(config.neo4j_uri)
        return f"Neo4j at {url.hostname or 'localhost'}:{url.port or 7687}"
    if config.falkordb_url:
        url = urlparse(config.falkordb_url)
        return f"FalkorDB at {url.hostname or 'localhost'}:{url.port or 6379}"
    return "the embedded FalkorDB"


def setting_of(config: Config) -> str:
    """The setting that says where the database is, as set but without credentials: what an
    operator checks when it cannot be used (the start step's one line names it)."""
    def without_credentials(value: str) -> str:
        url = urlparse(value)
        try:
            port = f":{url.port}" if url.port else ""
        except ValueError:  # a port that is not a number: the host alone says where
            port = ""
        return f"{url.scheme}://{url.hostname or ''}{port}" if url.scheme else "(not a URL)"

    if config.graph_backend == "neo4j":
        if not config.neo4j_uri:
            return f"NEO4J_URI unset: the app runs its own Neo4j under DATA_DIR={config.data_dir}"
        return f"NEO4J_URI={without_credentials(config.neo4j_uri)}"
    if config.falkordb_url:
        return f"FALKORDB_URL={without_credentials(config.falkordb_url)}"
    return f"FALKORDB_URL unset: the app runs its own FalkorDB under DATA_DIR={config.data_dir}"


def _what(kind: str, error: BaseException, config: Config) -> str:
    name = type(error).__name__
    if kind == "refused":
        if config.graph_backend == "neo4j":
            return "refused the credentials: check NEO4J_USER and NEO4J_PASSWORD"
        return "refused the credentials: check the user name and password in FALKORDB_URL"
    if kind == "loading":
        return f"is loading its data (starting or restarting, {name}); try again shortly"
    if config.graph_backend == "falkordb" and not config.falkordb_url:
        return f"does not answer ({name}); the app restarts it with the next request"
    return f"does not answer ({name}); is it running and reachable?"


def as_unavailable(error: BaseException, config: Config) -> GraphUnavailableError | None:
    """`error` as the 503 it means when its chain says the database cannot be used; else None."""
    if isinstance(error, GraphUnavailableError):
        return error
    cause = unavailable_cause(error)
    if cause is None:
        return None
    return GraphUnavailableError(f"{where(config)} {_what(_kind(cause), cause, config)}")


def describe(error: BaseException, config: Config) -> str:
    """Why a start failed, in words an operator can act on; never the password or a stack trace."""
    unavailable = as_unavailable(error, config)
    if unavailable is not None:
        return str(unavailable)
    place = where(config)
    if isinstance(error, LocalNeo4jError):
        return f"{place} did not start: {str(error).splitlines()[0]}"
    if isinstance(error, ClientError) and "DatabaseNotFound" in str(getattr(error, "code", "")):
        return f"{place} has no database {config.neo4j_database!r}: check NEO4J_DATABASE"
    if isinstance(error, (OSError, TimeoutError)):  # at start a timeout is the connectivity check's
        return f"{place} does not answer ({type(error).__name__}); is it running and reachable?"
    return f"{place} failed at start ({type(error).__name__}); the server log says why"


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
