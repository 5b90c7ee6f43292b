"""What one rank call learned about its candidates, and how finished work survives a cut-off call.

Graphiti's cross-encoder interface returns only (passage, score) pairs. Graph search needs more: which
candidates the model actually judged (a call cut short by RERANKER_BUDGET_S or the deadline keeps
its finished scores), whether the scores are relevance or only encode an order, and when each
arrived, and whether (and why) the call fell back. `GuardedReranker.judge_positions` answers with a
`Judgement` that carries all of it; it is the one result of judging passages by position
(`graphiti_llm_rerank.judge_positions`), and Graphiti's pairs are made from it only at the edge
(graphiti_llm_rerank/cross_encoder.py).

Finished work: while a rank call runs, the wrapper installs a `JudgedSoFar` for it in a context
variable, and a strategy that scores candidates one by one (pointwise) reports each finished score
with `report_judged(document_ids, score)` and each failed one with `report_failed`. Inside a rank
call documents are numbered by their position in the passage list ("0", "1", ...), which is how the
wrapper knows which candidates a cancelled call had finished. Outside a rank call (/api/rerank, the
rerank benchmark) nothing is installed and reporting does nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)

BUDGET = "budget"
DEADLINE = "deadline"
# Real scores are floored here so a failed passage can always sit strictly below them and > 0.
SCORE_FLOOR = 1e-6

@dataclass(frozen=True)
class Judgement:
    """One rank call's answer about candidates 0..candidates-1 (their first-stage positions)."""

    candidates: int
    # Positions the judge placed -> its value, higher is better: relevance (`by_score`) or rank-derived.
    # A passage whose own request failed is placed below every judged one but is not judged.
    evidence: dict[int, float] = field(default_factory=dict)
    # Positions the model (or the score cache) judged -> seconds into the call when the score arrived.
    judged_at_s: dict[int, float] = field(default_factory=dict)
    by_score: bool = True
    fell_back: bool = False  # the whole call failed: no evidence, first-stage order
    cut_short: str | None = None  # BUDGET or DEADLINE: time ended the call; the unjudged keep their place
    fallback_reason: str | None = None  # why the call fell back ("ErrorClass: detail"), for the answer

    @property
    def judged(self) -> int:
        return len(self.judged_at_s)

    @property
    def reranked(self) -> bool:
        """Did the model order at least one candidate?"""
        return not self.fell_back and self.judged > 0


def fallback_judgement(candidates: int, reason: str | None = None) -> Judgement:
    return Judgement(candidates, fell_back=True, fallback_reason=reason)


class JudgedSoFar:
    """Scores a running rank call has finished, by passage position, as they arrive."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.scores: dict[int, float] = {}
        self.judged_at_s: dict[int, float] = {}
        self.failed: set[int] = set()

    def elapsed_s(self) -> float:
        return round(time.perf_counter() - self.started, 4)

    def add_scored(self, keys: Iterable[str], score: float) -> None:
        elapsed = self.elapsed_s()
        for position in _positions(keys):
            self.scores[position] = float(score)
            self.judged_at_s[position] = elapsed

    def add_failed(self, keys: Iterable[str]) -> None:
        self.failed.update(_positions(keys))

    def evidence(self) -> dict[int, float]:
        """Finished scores (floored above 0), and failed passages below all of them."""
        scores = {position: max(score, SCORE_FLOOR) for position, score in self.scores.items()}
        below = min(scores.values(), default=2 * SCORE_FLOOR) / 2
        return {**scores, **{position: below for position in self.failed - scores.keys()}}


_CURRENT: ContextVar[JudgedSoFar | None] = ContextVar("judged_so_far", default=None)


@contextmanager
def collecting(progress: JudgedSoFar) -> Iterator[JudgedSoFar]:
    """Make `progress` the sink of reports from the code run inside (tasks it starts inherit it)."""
    token = _CURRENT.set(progress)
    try:
        yield progress
    finally:
        _CURRENT.reset(token)


def report_judged(document_ids: Iterable[str], score: float) -> None:
    """A score has arrived for these documents (no-op outside a guarded rank call)."""
    progress = _CURRENT.get()
    if progress is not None:
        progress.add_scored(document_ids, score)


def report_failed(document_ids: Iterable[str]) -> None:
    """These documents' own request failed (no-op outside a guarded rank call)."""
    progress = _CURRENT.get()
    if progress is not None:
        progress.add_failed(document_ids)


def _positions(keys: Iterable[str]) -> Iterator[int]:
    for key in keys:
        if isinstance(key, str) and key.isdecimal():
            yield int(key)


def every_position(count: int, ranked: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """(position, score) best first with each of positions 0..count-1 once: a repeated or out-of-range
    position is dropped, a missing one (there should be none) appended in first-stage order at the
    answer's lowest score, rather than lost."""
    seen: dict[int, float] = {}
    for position, score in ranked:
        if 0 <= position < count and position not in seen:
            seen[position] = float(score)
    missing = [position for position in range(count) if position not in seen]
    if missing:
        logger.warning("Reranker returned %d of %d passages; appending the rest", len(seen), count)
    floor = min(seen.values(), default=0.0)
    return [*seen.items(), *((position, floor) for position in missing)]
