"""Reports on disk: `<data_dir>/reports/<report_id>/` holds meta.json, outline.json, one markdown
file per section, report.md and steps.jsonl (one line per agent step).

Report ids are generated here and validated before they become paths, so an id from a request
can never leave the reports folder. Whole files are replaced atomically (a failed write leaves no
temporary file); the step log is only appended to, and a reader skips a last line still being written.
A report stored as queued or running whose writing process is gone reads as "interrupted".
"""

from __future__ import annotations

import json
import os
import re
import secrets
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from app.tasks import owner_alive

REPORT_ID_PATTERN = re.compile(r"^r_[0-9a-f]{16}$")
_lock = threading.Lock()  # meta.json is read-modify-written by the agent and the API
ACTIVE_STATUSES = ("queued", "running")
INTERRUPTED = "interrupted"  # was active when the process writing it stopped (a restart, a crash)


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


def _write_atomic(path: Path, text: str) -> None:
    temporary = path.with_name(path.name + ".tmp")
    try:
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, path)
    except BaseException:  # text that cannot be encoded, a full disk: no half-written file stays behind
        temporary.unlink(missing_ok=True)
        raise


class ReportStore:
    def __init__(self, data_dir: Path) -> None:
        self.root = Path(data_dir).resolve() / "reports"

    def folder(self, report_id: str) -> Path:
        folder = (self.root / validate_report_id(report_id)).resolve()
        if folder.parent != self.root:  # cannot happen with a valid id; kept as a second guard
            raise ValueError("report id escapes the reports folder")
        return folder

    def create(self, report_id: str, meta: dict[str, Any]) -> None:
        folder = self.folder(report_id)
        folder.mkdir(parents=True, exist_ok=False)
        _write_atomic(folder / "meta.json", json.dumps({"report_id": report_id, **meta}, indent=2))

    def update_meta(self, report_id: str, **changes: Any) -> dict[str, Any]:
        path = self.folder(report_id) / "meta.json"
        with _lock:
            meta = json.loads(path.read_text(encoding="utf-8"))
            meta.update(changes)
            _write_atomic(path, json.dumps(meta, indent=2))
        return meta

    def write_outline(self, report_id: str, outline: dict[str, Any]) -> None:
        _write_atomic(self.folder(report_id) / "outline.json", json.dumps(outline, indent=2))

    def write_section(self, report_id: str, index: int, markdown: str) -> str:
        name = f"section_{index:02d}.md"
        _write_atomic(self.folder(report_id) / name, markdown)
        return name

    def write_report(self, report_id: str, markdown: str) -> None:
        _write_atomic(self.folder(report_id) / "report.md", markdown)

    def append_step(self, report_id: str, step: dict[str, Any]) -> None:
        line = json.dumps(step, ensure_ascii=False, default=str)
        with open(self.folder(report_id) / "steps.jsonl", "a", encoding="utf-8") as log:
            log.write(line + "\n")

    def exists(self, report_id: str) -> bool:
        return (self.folder(report_id) / "meta.json").is_file()

    def read(self, report_id: str) -> dict[str, Any]:
        """Meta, the final markdown (None until written), the sections written so far and the log."""
        folder = self.folder(report_id)
        if not (folder / "meta.json").is_file():
            raise UnknownReportError(f"report {report_id!r} does not exist")
        meta = _current(json.loads((folder / "meta.json").read_text(encoding="utf-8")))
        report = folder / "report.md"
        sections = [
            {**entry, "markdown": _read_text(folder / entry["file"])}
            for entry in meta.get("sections", []) if entry.get("file")
        ]
        return {**meta, "markdown": report.read_text(encoding="utf-8") if report.is_file() else None,
                "sections": sections, "log": self.read_log(report_id)}

    def read_log(self, report_id: str) -> list[dict[str, Any]]:
        path = self.folder(report_id) / "steps.jsonl"
        if not path.is_file():
            return []
        steps = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                steps.append(json.loads(line))
            except ValueError:  # the line being written right now
                continue
        return steps


def _current(meta: dict[str, Any]) -> dict[str, Any]:
    """The stored meta, with an active status its writer can no longer change said as it is."""
    if meta.get("status") in ACTIVE_STATUSES and not owner_alive(meta.get("owner")):
        return {**meta, "status": INTERRUPTED, "error": f"the app stopped while the report was {meta['status']}; "
                "what was written so far is kept, start a new report for the rest"}
    return meta


def _read_text(path: Path) -> str | None:
    return path.read_text(encoding="utf-8") if path.is_file() else None
