"""What one rank call learned about its candidates.

The cross-encoder interface returns only (passage, score) pairs. Graph search needs more: which
candidates the model actually judged, whether the scores are relevance or only encode an order, and
when each arrived. `GuardedReranker.judge_positions` answers with a `Judgement` that carries this.
"""

from __future__ import annotations

import logging
from collections import defaultdict, deque
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)

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

    @property
    def judged(self) -> int:
        return len(self.judged_at_s)

    @property
    def reranked(self) -> bool:
        """Did the model order at least one candidate?"""
        return not self.fell_back and self.judged > 0


def fallback_judgement(candidates: int) -> Judgement:
    return Judgement(candidates, fell_back=True)


def ranked_positions(passages: list[str], ranked: list[tuple[str, float]]) -> list[tuple[int, float]]:
    """A (passage, score) answer as (position, score), best first, each position once.

    Texts map back to positions in first-stage order, so duplicate texts keep both candidates. A
    position the answer left out (it should never) is appended in first-stage order, scored at the
    answer's lowest score, rather than lost."""
    positions: dict[str, deque[int]] = defaultdict(deque)
    for index, passage in enumerate(passages):
        positions[passage].append(index)
    ordered: list[tuple[int, float]] = []
    for passage, score in ranked:
        if positions.get(passage):
            ordered.append((positions[passage].popleft(), float(score)))
    missing = sorted(index for queue in positions.values() for index in queue)
    if missing:
        logger.warning("Reranker returned %d of %d passages; appending the rest", len(ordered), len(passages))
    floor = min((score for _, score in ordered), default=0.0)
    return ordered + [(index, floor) for index in missing]
