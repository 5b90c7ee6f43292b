"""Byte progress on stderr for long copies (assembling a 1 GB model takes a while)."""

from __future__ import annotations

import sys
import time


def human_bytes(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(count) < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")


class ByteProgress:
    """Prints `label: done / total (pct%)` to stderr, at most every `interval_s` seconds.

    On a terminal the line is rewritten in place; otherwise (logs, CI, pytest capture) one line
    is printed per step so the output stays readable.
    """

    def __init__(self, label: str, total: int, interval_s: float = 1.0) -> None:
        self.label = label
        self.total = max(total, 1)
        self.done = 0
        self.interval_s = interval_s
        self._started = time.monotonic()
        self._last_print = 0.0
        self._tty = sys.stderr.isatty()

    def advance(self, count: int) -> None:
        self.done += count
        now = time.monotonic()
        if now - self._last_print >= self.interval_s:
            self._last_print = now
            self._print(final=False)

    def finish(self) -> None:
        self._print(final=True)

    def _print(self, final: bool) -> None:
        elapsed = time.monotonic() - self._started
        rate = self.done / elapsed if elapsed > 0 else 0.0
        line = (
            f"{self.label}: {human_bytes(self.done)} / {human_bytes(self.total)} "
            f"({100 * self.done / self.total:5.1f}%) {human_bytes(rate)}/s"
        )
        if self._tty:
            sys.stderr.write("\r" + line + ("\n" if final else ""))
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()
