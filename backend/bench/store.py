"""Per-query results on disk, so an interrupted benchmark keeps what finished and a rerun resumes.

One JSON line per finished query, appended and flushed as soon as the query is done, in a file
named by a hash of everything that changes the result (`run_key`). A line cut short by a kill is
ignored on reading, so that query simply runs again. A query whose whole rerank fell back to the
incoming order (server down, deadline) is reported but not stored: a rerun tries it again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


def run_key(**arguments: Any) -> str:
    """A short stable hash of the arguments that determine a result."""
    canonical = json.dumps(arguments, sort_keys=True, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def safe_label(label: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in label)


class ResultStore:
    """Finished per-query records of one run key: `done` maps qid -> record."""

    def __init__(self, folder: Path, label: str, key: str) -> None:
        self.path = Path(folder) / "runs" / f"{safe_label(label)}-{key}.jsonl"
        self.done: dict[str, dict] = {}
        if self.path.is_file():
            self._load()

    def _load(self) -> None:
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
                self.done[str(record["qid"])] = record
            except (ValueError, KeyError, TypeError):
                logger.info("Ignoring an unfinished line in %s", self.path)

    def add(self, record: dict, persist: bool = True) -> None:
        """Keep a finished record; `persist=False` reports it now but lets a rerun try it again."""
        self.done[str(record["qid"])] = record
        if not persist:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(record, sort_keys=True) + "\n")
            out.flush()
            os.fsync(out.fileno())
