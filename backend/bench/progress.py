"""A progress bar with an ETA on stderr, weighted by expected work (estimated model calls).

On a terminal it redraws one line; otherwise (nohup, CI logs) it prints one line per step.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


def format_duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


class ProgressBar:
    def __init__(self, total_weight: float, total_steps: int, stream: TextIO | None = None, width: int = 28) -> None:
        self.total_weight = max(float(total_weight), 1e-9)
        self.total_steps = total_steps
        self.stream = stream or sys.stderr
        self.width = width
        self.done_weight = 0.0
        self.steps = 0
        self.started = time.monotonic()
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def eta_s(self) -> float | None:
        if self.done_weight <= 0:
            return None
        elapsed = time.monotonic() - self.started
        return elapsed * (self.total_weight - self.done_weight) / self.done_weight

    def advance(self, weight: float, label: str) -> None:
        self.done_weight = min(self.total_weight, self.done_weight + weight)
        self.steps += 1
        fraction = self.done_weight / self.total_weight
        filled = int(round(fraction * self.width))
        eta = self.eta_s()
        line = (
            f"[{'#' * filled}{'.' * (self.width - filled)}] {self.steps}/{self.total_steps} "
            f"{fraction:4.0%} elapsed {format_duration(time.monotonic() - self.started)} "
            f"ETA {format_duration(eta) if eta is not None else '?'}  {label}"
        )
        if self._tty:
            self.stream.write("\r\x1b[2K" + line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self._tty and self.steps:
            self.stream.write("\n")
            self.stream.flush()
