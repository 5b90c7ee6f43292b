"""The circuit breaker every cross-encoder client shares: stop calling a model that keeps failing."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable


class CircuitBreaker:
    """closed --threshold failures in a row--> open --cooldown--> half_open --success--> closed.

    In half_open every call may try the model; one failure re-opens it for another cooldown.
    `report_to(callback)` has each state it enters told to `callback` (the process-wide breakers tell
    /metrics, app/metrics.py).
    """

    def __init__(self, threshold: int, cooldown_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if threshold < 1 or cooldown_s < 0:
            raise ValueError("breaker_threshold must be >= 1 and breaker_cooldown_s >= 0")
        self.threshold = threshold
        self.cooldown_s = float(cooldown_s)
        self._clock = clock
        self._lock = threading.Lock()
        self._state = "closed"
        self._consecutive_failures = 0
        self._opened_at = 0.0
        self._times_opened = 0
        self._report: Callable[[str], None] | None = None

    def report_to(self, callback: Callable[[str], None]) -> None:
        """Tell `callback` the state now, and each state the breaker enters from now on."""
        with self._lock:
            self._report = callback
            callback(self._state)

    def _enter(self, state: str) -> None:
        """Move to `state` (lock held)."""
        if state != self._state:
            self._state = state
            if self._report is not None:
                self._report(state)

    def allow(self) -> bool:
        """May a call use the model now? Moves open -> half_open once the cooldown is over."""
        with self._lock:
            if self._state == "open":
                if self._clock() - self._opened_at < self.cooldown_s:
                    return False
                self._enter("half_open")
            return True

    def record_success(self) -> None:
        with self._lock:
            self._enter("closed")
            self._consecutive_failures = 0

    def record_failure(self) -> bool:
        """Count a whole-call failure; True when this failure opened the breaker."""
        with self._lock:
            self._consecutive_failures += 1
            if self._state == "open":
                return False
            if self._state == "half_open" or self._consecutive_failures >= self.threshold:
                self._enter("open")
                self._opened_at = self._clock()
                self._times_opened += 1
                return True
            return False

    def retry_in_s(self) -> float:
        with self._lock:
            if self._state != "open":
                return 0.0
            return max(0.0, self.cooldown_s - (self._clock() - self._opened_at))

    def snapshot(self) -> dict[str, Any]:
        retry_in = self.retry_in_s()
        with self._lock:
            return {
                "state": self._state,
                "consecutive_failures": self._consecutive_failures,
                "threshold": self.threshold,
                "cooldown_s": self.cooldown_s,
                "retry_in_s": round(retry_in, 3),
                "times_opened": self._times_opened,
            }
