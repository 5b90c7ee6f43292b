"""Reports where every API process and worker reads them: on the task broker (a Redis server, the
one the background tasks queue on), beside the task that writes them.

A report is a hash of meta fields (each a JSON value, so one field changes without rewriting the
others), a hash of its files (the outline, one markdown file per section, report.md) and a list of
steps (one JSON line per agent step), all under `mirofish:report:<report_id>:`, and its id in an
index sorted by creation time. Every write after the creation lands only while the report exists
(one server-side script checks and writes), so a report deleted while its task still runs is never
written back. A report stored as queued or running whose task has failed or is gone reads as
"interrupted", with the task's reason.

Report ids are generated here and validated before they become keys.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from datetime import datetime, timezone
from typing import Any

import redis

from app.config import Config
from app.graph.runtime import GraphitiAdapter
from app.tasks import TaskQueue

REPORT_ID_PATTERN = re.compile(r"^r_[0-9a-f]{16}$")
ACTIVE_STATUSES = ("queued", "running")
INTERRUPTED = "interrupted"  # was active when the task writing it stopped (a killed worker, a timeout)
CANCELED = "canceled"
_PREFIX = "mirofish:report:"
_INDEX = "mirofish:reports"  # report ids by creation time
OUTLINE_FILE = "outline.json"
REPORT_FILE = "report.md"

# Write only while the report's meta exists: KEYS[1] the meta, KEYS[2] the target; ARGV[1] the command.
_WRITE_IF_EXISTS = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call(ARGV[1], KEYS[2], unpack(ARGV, 2))
return 1
"""


class UnknownReportError(LookupError):
    pass


def new_report_id() -> str:
    return "r_" + secrets.token_hex(8)


def validate_report_id(report_id: Any) -> str:
    if not isinstance(report_id, str) or not REPORT_ID_PATTERN.fullmatch(report_id):
        raise ValueError("report id must look like 'r_' followed by 16 lowercase hex digits")
    return report_id


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat()


def ms_since(started: float) -> float:
    """Milliseconds since `started` (a time.perf_counter() reading), as the step log writes them."""
    return round((time.perf_counter() - started) * 1000, 1)


def report_store(config: Config) -> "ReportStore":
    """The reports on the broker that the app's background tasks share."""
    return ReportStore(GraphitiAdapter(config).tasks.queue.connection)


class ReportStore:
    def __init__(self, connection: redis.Redis) -> None:
        self.connection = connection
        self._write = connection.register_script(_WRITE_IF_EXISTS)

    def _key(self, report_id: str, part: str) -> str:
        return f"{_PREFIX}{validate_report_id(report_id)}:{part}"

    def create(self, report_id: str, meta: dict[str, Any]) -> None:
        fields = {name: json.dumps(value) for name, value in {"report_id": report_id, **meta}.items()}
        with self.connection.pipeline() as pipeline:
            pipeline.hset(self._key(report_id, "meta"), mapping=fields)
            pipeline.zadd(_INDEX, {report_id: time.time()})
            pipeline.execute()

    def _write_if_exists(self, report_id: str, target: str, command: str, *args: Any) -> bool:
        return bool(self._write(keys=[self._key(report_id, "meta"), self._key(report_id, target)],
                                args=[command, *args]))

    def update_meta(self, report_id: str, **changes: Any) -> bool:
        """Whether the report still existed to take the changes."""
        pairs = [item for name, value in changes.items() for item in (name, json.dumps(value))]
        return self._write_if_exists(report_id, "meta", "HSET", *pairs)

    def write_outline(self, report_id: str, outline: dict[str, Any]) -> None:
        self._write_if_exists(report_id, "files", "HSET", OUTLINE_FILE, json.dumps(outline, indent=2))

    def write_section(self, report_id: str, index: int, markdown: str) -> str:
        name = f"section_{index:02d}.md"
        self._write_if_exists(report_id, "files", "HSET", name, markdown)
        return name

    def write_report(self, report_id: str, markdown: str) -> None:
        self._write_if_exists(report_id, "files", "HSET", REPORT_FILE, markdown)

    def append_step(self, report_id: str, step: dict[str, Any]) -> None:
        line = json.dumps(step, ensure_ascii=False, default=str)
        self._write_if_exists(report_id, "steps", "RPUSH", line)

    def exists(self, report_id: str) -> bool:
        return bool(self.connection.exists(self._key(report_id, "meta")))

    def meta(self, report_id: str) -> dict[str, Any]:
        """The stored meta, with an active status whose task has ended said as it is."""
        raw = self.connection.hgetall(self._key(report_id, "meta"))
        if not raw:
            raise UnknownReportError(f"report {report_id!r} does not exist")
        return self._current({name.decode(): json.loads(value) for name, value in raw.items()})

    def read(self, report_id: str) -> dict[str, Any]:
        """Meta, the final markdown (None until written), the sections written so far and the log."""
        meta = self.meta(report_id)
        files = {name.decode(): value.decode("utf-8")
                 for name, value in self.connection.hgetall(self._key(report_id, "files")).items()}
        sections = [{**entry, "markdown": files.get(entry["file"])}
                    for entry in meta.get("sections", []) if entry.get("file")]
        return {**meta, "markdown": files.get(REPORT_FILE), "sections": sections, "log": self.read_log(report_id)}

    def read_outline(self, report_id: str) -> dict[str, Any] | None:
        raw = self.connection.hget(self._key(report_id, "files"), OUTLINE_FILE)
        return json.loads(raw) if raw is not None else None

    def read_log(self, report_id: str) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.connection.lrange(self._key(report_id, "steps"), 0, -1)]

    def list(self, *, graph_id: str | None = None, limit: int = 50, offset: int = 0) -> list[dict[str, Any]]:
        """Reports newest first, as their meta (no text); `graph_id` keeps one graph's."""
        listed: list[dict[str, Any]] = []
        skipped = 0
        for report_id in self.connection.zrevrange(_INDEX, 0, -1):
            try:
                meta = self.meta(report_id.decode())
            except UnknownReportError:  # deleted between the two reads
                continue
            if graph_id is not None and meta.get("graph_id") != graph_id:
                continue
            if skipped < offset:
                skipped += 1
                continue
            listed.append(meta)
            if len(listed) >= limit:
                break
        return listed

    def delete(self, report_id: str) -> bool:
        """Remove the report and every part of it; whether it existed."""
        with self.connection.pipeline() as pipeline:
            pipeline.delete(*(self._key(report_id, part) for part in ("meta", "files", "steps")))
            pipeline.zrem(_INDEX, report_id)
            removed, _ = pipeline.execute()
        return bool(removed)

    def _current(self, meta: dict[str, Any]) -> dict[str, Any]:
        if meta.get("status") not in ACTIVE_STATUSES or not meta.get("task_id"):
            return meta
        task = TaskQueue(self.connection).get(meta["task_id"])
        if task is not None and task["state"] in ("pending", "running"):
            return meta
        if task is not None and task["state"] == "canceled":
            return {**meta, "status": CANCELED}
        reason = "; ".join(task["errors"]) if task is not None and task["errors"] else "its task is gone"
        return {**meta, "status": INTERRUPTED,
                "error": f"the report's task stopped while the report was {meta['status']} ({reason}); "
                         "what was written so far is kept, start a new report for the rest"}
