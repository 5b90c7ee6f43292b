"""In-memory LRU cache of relevance scores, so one (query, passage) is scored once per process.

Keys are built by `score_key` from everything that changes the answer: model, prompt version,
scoring mode, query and passage. Only successful scores are stored (a failure may be transient).
Thread-safe, because rank calls may come from more than one event loop thread.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

ScoreKey = tuple[str, str, str, str, str]


def score_key(model: str, prompt_version: str, mode: str, query: str, passage: str) -> ScoreKey:
    return (model, prompt_version, mode, query, passage)


class ScoreCache:
    """A bounded LRU map from ScoreKey to score; `max_entries` 0 disables it."""

    def __init__(self, max_entries: int) -> None:
        if max_entries < 0:
            raise ValueError(f"cache size must be >= 0, got {max_entries}")
        self._max_entries = max_entries
        self._entries: OrderedDict[ScoreKey, float] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self._max_entries > 0

    def get(self, key: ScoreKey) -> float | None:
        with self._lock:
            score = self._entries.get(key)
            if score is not None:
                self._entries.move_to_end(key)
            return score

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._entries

    def put(self, key: ScoreKey, score: float) -> None:
        if not self.enabled:
            return
        with self._lock:
            self._entries[key] = score
            self._entries.move_to_end(key)
            while len(self._entries) > self._max_entries:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
