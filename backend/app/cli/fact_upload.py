"""A large JSONL file of facts sent to a running API in batches, resumable.

The API's `POST /api/graph/<id>/facts` already does an import in bulk: it embeds a batch's texts in
large calls, writes entities and edges with batched queries, stores all of a batch or none of it,
answers only for facts the database holds, and skips facts already stored. A file of a million facts
is many such batches; this module is the client that sends them:

- the whole file is checked first (JSON, and every fact as the API checks it), so a bad line 900,000
  stops the import before anything is stored rather than after hours;
- one batch travels at a time by default: with the in-process embedder a server spends about 97% of
  an import embedding, on every core, so a second batch in flight only waits (measured: the same 49
  facts/s with one or two). `in_flight` 2 or more is for a server whose embedder is a remote
  service or whose API several workers serve (not measured here);
- after every acknowledged batch the count of facts acknowledged in file order is saved to a small
  state file; the same command run again after Ctrl-C, a crash or a lost server starts from there.
  A batch that was in flight when it stopped is sent again and its stored facts come back as
  `skipped_duplicates`, never stored twice. The state also records the graph's creation time, so a
  graph deleted and made again is filled from the start.

The API answers with the one server it talks to, on any database and with any number of workers;
this client never opens the database itself.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from app.graph.fact_parsing import FactValidationError, parse_fact

logger = logging.getLogger(__name__)

MAX_BATCH = 5000  # what one POST .../facts accepts (MAX_FACTS_PER_IMPORT)
RETRIES = 3  # a batch the server could not store (503 import_failed: rolled back) is sent again
RETRY_WAIT_S = 2.0
REQUEST_TIMEOUT_S = 1800.0  # one batch of 5,000 facts at 30 facts/s is under 3 minutes
STATE_VERSION = 1


class UploadError(RuntimeError):
    """The import stopped; the message is one line for the user (no traceback)."""


class ServerUnreachable(UploadError):
    pass


@dataclass
class UploadState:
    """What survives a stop: how far, in file order, the API has acknowledged the file."""

    file: str
    size: int
    mtime_ns: int
    graph_id: str
    graph_created_at: str
    acknowledged: int = 0  # facts, counted in file order, every one before it acknowledged
    imported: int = 0
    skipped_duplicates: int = 0
    version: int = STATE_VERSION

    def matches(self, other: UploadState) -> bool:
        keys = ("file", "size", "mtime_ns", "graph_id", "graph_created_at", "version")
        return all(getattr(self, key) == getattr(other, key) for key in keys)


def default_state_path(path: Path, graph_id: str) -> Path:
    return path.with_name(f"{path.name}.{graph_id}.import-state.json")


def read_state(state_path: Path) -> UploadState | None:
    try:
        return UploadState(**json.loads(state_path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return None


def write_state(state_path: Path, state: UploadState) -> None:
    """Written beside and renamed over: a crash mid-write leaves the previous state, never half of one."""
    partial = state_path.with_name(state_path.name + ".partial")
    partial.write_text(json.dumps(asdict(state), indent=1), encoding="utf-8")
    os.replace(partial, state_path)


def checked_facts(path: Path) -> int:
    """Reads the whole file once and checks every line as the API would; answers the fact count."""
    count = 0
    for line_number, item in _items(path):
        try:
            parse_fact(item, line_number, unit="line")
        except FactValidationError as error:
            raise UploadError(f"{path}: {error}") from None
        count += 1
    if count == 0:
        raise UploadError(f"{path}: the file holds no facts")
    return count


def _items(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, parsed JSON) for every non-blank line."""
    try:
        with path.open(encoding="utf-8-sig") as lines:
            for line_number, line in enumerate(lines, start=1):
                if not line.strip():
                    continue
                try:
                    yield line_number, json.loads(line)
                except ValueError:
                    raise UploadError(f"{path}: line {line_number}: not valid JSON") from None
    except UnicodeDecodeError as error:
        raise UploadError(f"{path}: not valid UTF-8 ({error.reason})") from None
    except OSError as error:
        raise UploadError(f"{path}: cannot be read ({error.strerror})") from None


def batches(path: Path, batch_size: int, skip: int) -> Iterator[tuple[int, list[Any]]]:
    """(index of the batch's first fact, facts) after the first `skip` facts, in file order."""
    batch: list[Any] = []
    first = skip
    for index, (_, item) in enumerate(_items(path)):
        if index < skip:
            continue
        batch.append(item)
        if len(batch) == batch_size:
            yield first, batch
            first, batch = first + len(batch), []
    if batch:
        yield first, batch


class Api:
    """The few calls the upload makes, each on a connection of its own (a batch takes seconds, a
    connection under a millisecond on loopback), with the API's bearer token when there is one."""

    def __init__(self, base_url: str, token: str | None = None):
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UploadError(f"--url must be an http(s) URL such as http://127.0.0.1:5001, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self._parts = parts
        self._auth = {"Authorization": f"Bearer {token}"} if token else {}

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        connection_class = http.client.HTTPSConnection if self._parts.scheme == "https" else http.client.HTTPConnection
        connection = connection_class(self._parts.hostname, self._parts.port, timeout=REQUEST_TIMEOUT_S)
        payload = None if body is None else json.dumps(body)
        try:
            connection.request(method, self._parts.path.rstrip("/") + path, payload,
                               {**self._auth, **({"Content-Type": "application/json"} if payload else {})})
            response = connection.getresponse()
            text = response.read()
        except (OSError, http.client.HTTPException) as error:
            raise ServerUnreachable(
                f"cannot reach the API at {self.base_url} ({type(error).__name__}: {error}); start it with "
                "`make serve` (or pass --url)") from None
        finally:
            connection.close()
        if response.status == 401:  # no retry can help: the token is missing or not the server's
            raise UploadError(f"the API at {self.base_url} answered HTTP 401: "
                              + ("API_TOKEN is not its token" if self._auth else "set API_TOKEN to its token"))
        try:
            return response.status, json.loads(text or b"null")
        except ValueError:
            return response.status, {"error": text[:200].decode("utf-8", "replace")}

    def graph_created_at(self, graph_id: str, create: bool) -> str:
        if create:
            status, body = self.request("POST", "/api/graph", {"graph_id": graph_id})
            if status not in (201, 409):
                raise UploadError(f"could not create graph {graph_id!r}: HTTP {status} {_message(body)}")
        status, body = self.request("GET", "/api/graph")
        if status != 200:
            raise UploadError(f"could not list the graphs: HTTP {status} {_message(body)}")
        for graph in body.get("graphs", []):
            if graph.get("graph_id") == graph_id:
                return str(graph.get("created_at"))
        raise UploadError(f"graph {graph_id!r} does not exist; create it first, or add --create")

    def import_batch(self, graph_id: str, first: int, facts: list[Any]) -> dict:
        """POST one batch; a rolled-back import (503) is sent again a few times."""
        attempt = 1
        while True:
            status, body = self.request("POST", f"/api/graph/{graph_id}/facts", {"facts": facts})
            if status == 201:
                return body
            if status != 503 or attempt == RETRIES:
                raise UploadError(f"facts {first + 1}-{first + len(facts)} of the file were refused: "
                                  f"HTTP {status} {_message(body)}")
            logger.warning("Facts %d-%d were not stored (HTTP 503 %s); sending them again",
                           first + 1, first + len(facts), _message(body))
            time.sleep(RETRY_WAIT_S * attempt)
            attempt += 1


def _message(body: Any) -> str:
    if isinstance(body, dict):
        return str(body.get("message") or body.get("error") or body)
    return str(body)


@dataclass
class Progress:
    """What one run did; `rate` counts only this run's facts and seconds."""

    total: int
    acknowledged: int
    started_at: int
    seconds: float = 0.0
    # One entry per acknowledged batch, in file order: its facts and the run's seconds when it was.
    batches: list[dict[str, float]] = field(default_factory=list)

    @property
    def rate(self) -> float:
        done = self.acknowledged - self.started_at
        return done / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        remaining = (self.total - self.acknowledged) / self.rate if self.rate else 0.0
        return (f"{self.acknowledged:,}/{self.total:,} facts acknowledged ({self.rate:.1f} facts/s, "
                f"about {remaining / 60:.0f} min left)")


class Upload:
    """Sends one file to one graph; `run` answers the final Progress or raises UploadError."""

    def __init__(self, api: Api, path: Path, graph_id: str, *, batch_size: int = 2000, in_flight: int = 1,
                 state_path: Path | None = None, create: bool = False):
        if not 1 <= batch_size <= MAX_BATCH:
            raise UploadError(f"--batch-size must be 1-{MAX_BATCH} (what one request may carry), got {batch_size}")
        if in_flight < 1:
            raise UploadError(f"--in-flight must be at least 1, got {in_flight}")
        self.api, self.path, self.graph_id = api, path, graph_id
        self.batch_size, self.in_flight, self.create = batch_size, in_flight, create
        self.state_path = state_path or default_state_path(path, graph_id)

    def run(self, echo: Callable[[str], None] = print) -> Progress:
        total = checked_facts(self.path)
        state = self._starting_state(echo)
        progress = Progress(total, state.acknowledged, state.acknowledged)
        began = time.monotonic()
        try:
            self._send(state, progress, began, echo)
        finally:
            progress.seconds = time.monotonic() - began
        return progress

    def _starting_state(self, echo: Callable[[str], None]) -> UploadState:
        stat = self.path.stat()
        fresh = UploadState(str(self.path.resolve()), stat.st_size, stat.st_mtime_ns, self.graph_id,
                            self.api.graph_created_at(self.graph_id, self.create))
        saved = read_state(self.state_path)
        if saved is not None and saved.matches(fresh):
            echo(f"Resuming after {saved.acknowledged:,} acknowledged facts ({self.state_path})")
            return saved
        if saved is not None:
            echo(f"{self.state_path} is for another file or an earlier graph {self.graph_id!r}; starting over")
        write_state(self.state_path, fresh)
        return fresh

    def _send(self, state: UploadState, progress: Progress, began: float, echo: Callable[[str], None]) -> None:
        done: dict[int, tuple[int, dict]] = {}  # first fact -> (facts, answer), acknowledged out of order
        pool = ThreadPoolExecutor(self.in_flight, thread_name_prefix="upload")
        pending: set[Future] = set()
        try:
            for first, facts in batches(self.path, self.batch_size, state.acknowledged):
                if len(pending) >= self.in_flight:
                    pending = self._settle(pending, done, state, progress, began, echo)
                pending.add(pool.submit(self._batch, first, facts))
            while pending:
                pending = self._settle(pending, done, state, progress, began, echo)
        finally:
            # Ctrl-C or a failure: requests already sent finish on the server or not at all; a
            # later run sends them again and their stored facts come back as duplicates.
            pool.shutdown(wait=False, cancel_futures=True)

    def _batch(self, first: int, facts: list[Any]) -> tuple[int, int, dict]:
        return first, len(facts), self.api.import_batch(self.graph_id, first, facts)

    def _settle(self, pending: set[Future], done: dict[int, tuple[int, dict]], state: UploadState,
                progress: Progress, began: float, echo: Callable[[str], None]) -> set[Future]:
        """Wait for at least one batch, then save how far the file is acknowledged without a gap."""
        finished, still = wait(pending, return_when=FIRST_COMPLETED)
        for future in finished:
            first, count, answer = future.result()  # an UploadError stops the import here
            done[first] = (count, answer)
        before = state.acknowledged
        while state.acknowledged in done:
            count, answer = done.pop(state.acknowledged)
            state.acknowledged += count
            state.imported += int(answer.get("imported", 0))
            state.skipped_duplicates += int(answer.get("skipped_duplicates", 0))
            progress.batches.append({"facts": count, "acknowledged_at_s": round(time.monotonic() - began, 2)})
        if state.acknowledged > before:  # a batch after a gap waits for the gap before it counts
            write_state(self.state_path, state)
            progress.acknowledged, progress.seconds = state.acknowledged, time.monotonic() - began
            echo(progress.line())
        return still
