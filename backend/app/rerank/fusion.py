"""Fusion: the final order combines the judge's evidence with the first stage's (RERANKER_FUSION).

A weak judge must not make search worse. The first stage (Graphiti's hybrid BM25 + cosine RRF) is
evidence too, so instead of replacing its order with the judge's, graph search can fuse the two:

- `none`: the judge's order alone (scores: the judge's).
- `rrf`: reciprocal-rank fusion, `weight / (K + judge rank) + (1 - weight) / (K + first-stage rank)`
  with K = 60 (Cormack et al.); `weight` 0.5 orders as plain (unweighted) RRF.
- `linear`: `weight * judge + (1 - weight) * first stage`, both min-max normalised over the judged
  candidates of this query (a side whose values are all equal counts 0 for everyone).

`weight` (RERANKER_FUSION_WEIGHT) is the judge's share. The judge's evidence is read by score when it
is a relevance score (pointwise, `by_score=True`) and by rank otherwise: the other strategies' scores
only encode their order. Ranks are 1-based; ties break by first-stage position.

Candidates the judge did not place (time ran out first) keep their first-stage place: the judged ones
are reordered among the places they hold. An unjudged candidate carries the fused score of the hit
above it (the best fused score at the top), so scores never rise down the list.

Everything here is pure arithmetic on plain lists, so a benchmark can replay a fusion offline from
stored scores and get what graph search would have answered.

Every order made from a judgement is made here, once per answer: graph search's (`fuse_judgement`,
RERANKER_FUSION), Graphiti's `rank` (`judged_order`: the judge's order alone, app/rerank/cross_encoder.py)
and the judge's own verdict on passages a caller gathered (`judge_order`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from app.config import RERANKER_FUSIONS
from app.rerank.judgement import Judgement

RRF_K = 60


@dataclass(frozen=True)
class Fused:
    """One candidate in the final order."""

    position: int  # its place in the first stage's order, 0-based
    score: float  # the fused score
    judge_score: float | None  # the judge's evidence; None when it was not judged


def check_fusion(method: str, weight: float) -> None:
    if method not in RERANKER_FUSIONS:
        raise ValueError(f"unknown fusion {method!r}; allowed: {RERANKER_FUSIONS}")
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"fusion weight must be within [0, 1], got {weight}")


def judge_ranks(evidence: Mapping[int, float]) -> dict[int, int]:
    """1-based ranks by evidence, best first; equal evidence ranks by first-stage position."""
    ordered = sorted(evidence, key=lambda position: (-evidence[position], position))
    return {position: rank for rank, position in enumerate(ordered, start=1)}


def min_max(values: Mapping[int, float]) -> dict[int, float]:
    """Values scaled to [0, 1] over this set; all equal (no information) gives 0 for each."""
    low, high = min(values.values()), max(values.values())
    if high == low:
        return dict.fromkeys(values, 0.0)
    return {key: (value - low) / (high - low) for key, value in values.items()}


def rank_values(ranks: Mapping[int, int]) -> dict[int, float]:
    """Ranks as values in [0, 1]: 1 for the best, 0 for the last (one rank alone: 0)."""
    count = len(ranks)
    if count < 2:
        return dict.fromkeys(ranks, 0.0)
    return {key: 1.0 - (rank - 1) / (count - 1) for key, rank in ranks.items()}


def fused_values(
    first_scores: Sequence[float], evidence: Mapping[int, float], *, method: str, weight: float, by_score: bool
) -> dict[int, float]:
    """The fused score of every judged position (the keys of `evidence`)."""
    check_fusion(method, weight)
    if method == "none":
        return {position: float(value) for position, value in evidence.items()}
    ranks = judge_ranks(evidence)
    if method == "rrf":
        return {position: weight / (RRF_K + ranks[position]) + (1 - weight) / (RRF_K + position + 1)
                for position in evidence}
    judge = min_max(evidence) if by_score else rank_values(ranks)
    first = min_max({position: float(first_scores[position]) for position in evidence})
    return {position: weight * judge[position] + (1 - weight) * first[position] for position in evidence}


def fuse(
    first_scores: Sequence[float],
    evidence: Mapping[int, float],
    *,
    method: str,
    weight: float = 0.5,
    by_score: bool = True,
) -> list[Fused]:
    """Every first-stage position once, best first (see the module docstring).

    `first_scores[i]` is the first stage's score of its i-th candidate; `evidence` maps the positions
    the judge placed to its value (higher is better)."""
    count = len(first_scores)
    judged = sorted(position for position in evidence if 0 <= position < count)
    if not judged:
        check_fusion(method, weight)
        return [Fused(position, float(score), None) for position, score in enumerate(first_scores)]
    values = fused_values(first_scores, {p: evidence[p] for p in judged}, method=method, weight=weight,
                          by_score=by_score)
    reordered = sorted(judged, key=lambda position: (-values[position], position))
    holder = dict(zip(judged, reordered))  # place -> the judged candidate that now takes it
    result: list[Fused] = []
    above = values[reordered[0]]
    for place in range(count):
        position = holder.get(place)
        if position is None:
            result.append(Fused(place, above, None))
        else:
            result.append(Fused(position, values[position], float(evidence[position])))
        above = result[-1].score
    return result


def fuse_judgement(first_scores: Sequence[float], judgement: Judgement, *, method: str,
                   weight: float = 0.5) -> list[Fused]:
    """Graph search's order: the first stage fused with what the judge judged (RERANKER_FUSION).

    A call that judged nothing (it failed, and said why) orders exactly as with the reranker off;
    `judge_score` is the judge's own: a passage whose request failed is placed, not judged (None)."""
    evidence = judgement.evidence if judgement.reranked else {}
    fused = fuse(first_scores, evidence, method=method, weight=weight, by_score=judgement.by_score)
    return [hit if hit.position in judgement.judged_at_s else replace(hit, judge_score=None) for hit in fused]


def incoming_scores(count: int) -> list[float]:
    """Scores for the incoming order: 1.0 descending, always > 0."""
    return [1.0 - index / (count + 1) for index in range(count)]


def judged_order(judgement: Judgement) -> list[Fused]:
    """The judge's order alone, over the incoming one (what Graphiti's `rank` answers): the placed
    candidates reordered among the places they hold, the rest (and a fallen-back call's all) in
    incoming order, scored 1.0 descending; every score > 0."""
    return fuse(incoming_scores(judgement.candidates), judgement.evidence, method="none")


def judge_order(judgement: Judgement) -> list[int]:
    """Positions by the judge's evidence, best first (ties by position), then those it did not place."""
    ranks = judge_ranks(judgement.evidence)
    placed = sorted(ranks, key=ranks.__getitem__)
    return placed + [position for position in range(judgement.candidates) if position not in judgement.evidence]
