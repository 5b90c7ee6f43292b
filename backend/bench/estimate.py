"""The cost gate: print estimated model calls before any call, and refuse or ask above a threshold."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass

DEFAULT_CONFIRM_ABOVE = 200  # model calls; about 5 minutes of a 1.5B model on 2 CPU cores


class ConfirmationRefused(Exception):
    """The estimate is above the threshold and nobody agreed to it."""


def describe_estimate(per_label: Mapping[str, tuple[int, int, int]]) -> list[str]:
    """Lines for {label: (calls, queries to run, queries reused)} and the total."""
    lines = ["Estimated model calls before running:"]
    for label, (calls, to_run, reused) in per_label.items():
        lines.append(f"  {label:<34} {calls:>7} calls  ({to_run} queries to run, {reused} reused from earlier runs)")
    lines.append(f"  {'total':<34} {sum(calls for calls, _, _ in per_label.values()):>7} calls")
    return lines


def confirm_estimate(
    total_calls: int,
    *,
    threshold: int,
    yes: bool,
    ask: Callable[[str], bool] | None,
    stdin_is_tty: bool | None = None,
) -> None:
    """Return when the run may go ahead; raise ConfirmationRefused otherwise.

    Above `threshold` without `yes`: ask (`ask(question) -> bool`) only when stdin is a terminal,
    so a script or CI never hangs on a prompt; otherwise refuse and say what to add.
    """
    if yes or total_calls <= threshold:
        return
    interactive = sys.stdin.isatty() if stdin_is_tty is None else stdin_is_tty
    if interactive and ask is not None:
        if ask(f"About {total_calls} model calls (above {threshold}). Run them?"):
            return
        raise ConfirmationRefused("Not confirmed; nothing was run.")
    raise ConfirmationRefused(
        f"The estimate of {total_calls} model calls is above {threshold}: add --yes to run them "
        f"(or lower --max-queries / --candidates, or raise --confirm-above)."
    )


@dataclass(frozen=True)
class TokenPrices:
    """Prices per million tokens (any currency), given on the command line; 0 for a local model."""

    prompt_per_mtok: float = 0.0
    completion_per_mtok: float = 0.0

    def cost(self, prompt_tokens: float, completion_tokens: float) -> float:
        return (prompt_tokens * self.prompt_per_mtok + completion_tokens * self.completion_per_mtok) / 1_000_000
