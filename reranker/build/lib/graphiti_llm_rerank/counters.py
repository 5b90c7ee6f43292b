"""Thread-safe named counters with an error tally: what /health shows about a reranker's work.

Each client declares its own counter names once; adding to an undeclared name is a bug and raises
KeyError, so a typo cannot silently start a new counter.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable
from typing import Any


class CounterSet:
    """Counters named at construction; `snapshot()` is JSON-safe."""

    def __init__(self, names: Iterable[str]) -> None:
        self._lock = threading.Lock()
        self._values = dict.fromkeys(names, 0)
        self._errors: Counter[str] = Counter()
        self._last_error: str | None = None
        self._last_error_detail: str | None = None  # what the last failure said (the unknown model's name...)

    def add(self, name: str, amount: int = 1) -> None:
        with self._lock:
            self._values[name] += amount

    def record_error(self, error_class: str, detail: str | None = None) -> None:
        """Count a failure of `error_class`; `detail` (never a secret) is shown as the last error's."""
        with self._lock:
            self._errors[error_class] += 1
            self._last_error = error_class
            self._last_error_detail = detail

    def get(self, name: str) -> int:
        with self._lock:
            return self._values[name]

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {**self._values, "errors": dict(self._errors), "last_error": self._last_error,
                    "last_error_detail": self._last_error_detail}
