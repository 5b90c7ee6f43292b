"""The one result of judging passages (`Judgement`), and every order made from it (RERANKER_FUSION).

`Judgement` is what a rank call learned about its candidates, by first-stage position: the judge's
evidence for each position it placed, which ones the model (or its cache) really judged and when,
whether its values are relevance or only an order, and whether (and why) the call fell back or was
cut short. Fusing it (`fuse_judgement`) fills in its `order`: every candidate once, best first, as
a `Placed` (position, fused score, first-stage score, the judge's own score or None). Graph search
reads that one object; Graphiti's `rank` pairs are made from it only at the edge (ollama_reranker.py).

The final order combines the judge's evidence with the first stage's (RERANKER_FUSION).

A weak judge must not make search worse. The first stage (Graphiti's hybrid BM25 + cosine RRF) is
evidence too, so instead of replacing its order with the judge's, graph search can fuse the two:

- `none`: the judge's order alone (scores: the judge's).
- `rrf`: reciprocal-rank fusion, `weight / (K + judge rank) + (1 - weight) / (K + first-stage rank)`
  with K = 60 (Cormack et al.); `weight` 0.5 orders as plain (unweighted) RRF.
- `linear`: `weight * judge + (1 - weight) * first stage`, both min-max normalised over the judged
  candidates of this query (a side whose values are all equal counts 0 for everyone).
- `zscore`: as `linear`, but each side scaled to mean 0 and standard deviation 1 over the judged
  candidates: one outlying value (a first hit far ahead, a single confident judgement) does not squeeze
  the others of its side into a small span, as min-max scaling does. Its scores can be negative.

A third signal can join: the embedder's cosine between the query and each candidate
(`cosine`, `cosine_weight` = RERANKER_COSINE_WEIGHT). It costs no model call, and on some data it
orders as well as the judge, so with it the three shares are judge `weight`, cosine `cosine_weight` and
first stage the rest: `rrf` adds `cosine_weight / (K + cosine rank)`, `linear` and `zscore` add
`cosine_weight *` the cosine scaled as they scale the other two. Without the judge's evidence the
cheap order is the first stage fused with the cosine alone, in the same proportion (`cheap_order`).

`weight` (RERANKER_FUSION_WEIGHT) is the judge's share. The judge's evidence is read by score when it
is a relevance score (pointwise, `by_score=True`) and by rank otherwise: the other strategies' scores
only encode their order. Ranks are 1-based; ties break by first-stage position.

Candidates the judge did not place (time ran out first, or it was asked about the first few only) keep
their place in the cheap order (the first stage's own order when the cosine has no share): the judged
ones are reordered among the places they hold. A call that judged nothing gives the first stage's own
order and scores, exactly as with the reranker off. An unjudged candidate carries the fused score of the hit
above it (the best fused score at the top), so scores never rise down the list.

Everything here is pure arithmetic on plain lists, so a benchmark can replay a fusion offline from
stored scores and get what graph search would have answered.

Every order made from a judgement is made here, once per answer: graph search's (`fuse_judgement`,
RERANKER_FUSION), Graphiti's `rank` (`judged_order`: the judge's order alone, ollama_reranker.py)
and the judge's own verdict on passages a caller gathered (`Judgement.judge_order`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from graphiti_llm_rerank.config import FUSIONS as RERANKER_FUSIONS, JUDGE_FOCI as RERANKER_JUDGE_FOCI

logger = logging.getLogger(__name__)

RRF_K = 60
BUDGET = "budget"
DEADLINE = "deadline"
# Real scores are floored here so a failed passage can always sit strictly below them and > 0.
SCORE_FLOOR = 1e-6


@dataclass(frozen=True)
class Placed:
    """One candidate in an order made from a judgement."""

    position: int  # its place in the first stage's order, 0-based
    score: float  # the fused score
    judge_score: float | None  # the judge's evidence; None when it was not judged
    first_stage_score: float = 0.0  # the first stage's own score of it

    @property
    def judged(self) -> bool:
        return self.judge_score is not None


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
    # Filled by `fuse_judgement`: every candidate once, best first, and what the order was fused from.
    order: tuple[Placed, ...] = ()
    fusion: str | None = None
    first_scores: tuple[float, ...] = ()
    cosine: tuple[float, ...] | None = None

    @property
    def judged(self) -> int:
        return len(self.judged_at_s)

    @property
    def reranked(self) -> bool:
        """Did the model order at least one candidate?"""
        return not self.fell_back and self.judged > 0

    def judge_order(self) -> list[int]:
        """Positions by the judge's evidence, best first (ties by position), then those it did not place."""
        placed = sorted(self.evidence, key=lambda position: (-self.evidence[position], position))
        return placed + [position for position in range(self.candidates) if position not in self.evidence]


def fallback_judgement(candidates: int, reason: str | None = None) -> Judgement:
    return Judgement(candidates, fell_back=True, fallback_reason=reason)


class JudgedSoFar:
    """Scores a running rank call has finished, by passage position, as they arrive: what survives
    a budget or deadline that ends the call."""

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


def _positions(keys: Iterable[str]) -> Iterator[int]:
    for key in keys:
        if isinstance(key, str) and key.isdecimal():
            yield int(key)


def every_position(count: int, values: Mapping[int, float]) -> dict[int, float]:
    """Evidence for each of positions 0..count-1: an out-of-range position is dropped, a missing one
    (there should be none) placed in first-stage order at the lowest value given, rather than lost."""
    seen = {position: float(value) for position, value in values.items() if 0 <= position < count}
    missing = [position for position in range(count) if position not in seen]
    if missing:
        logger.warning("Reranker returned %d of %d passages; appending the rest", len(seen), count)
    floor = min(seen.values(), default=0.0)
    return {**seen, **{position: floor for position in missing}}


def check_fusion(method: str, weight: float, cosine_weight: float = 0.0) -> None:
    if method not in RERANKER_FUSIONS:
        raise ValueError(f"unknown fusion {method!r}; allowed: {RERANKER_FUSIONS}")
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"fusion weight must be within [0, 1], got {weight}")
    if not 0.0 <= cosine_weight <= 1.0 or weight + cosine_weight > 1.0 + 1e-9:
        raise ValueError(f"the cosine's share must be within [0, 1 - judge's share {weight}], got {cosine_weight}")


def first_stage_share(weight: float, cosine_weight: float = 0.0) -> float:
    """What the judge's and the cosine's shares leave the first stage: `1 - weight - cosine_weight`,
    rounded so that shares meant to sum to 1 leave exactly 0. In floating point 1 - 0.8 - 0.2 is
    -5.6e-17: a negative share would turn candidates the judge and the cosine tie on against the
    first stage's order, where ties break by position everywhere else."""
    return max(0.0, round(1.0 - weight - cosine_weight, 12))


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


def z_scores(values: Mapping[int, float]) -> dict[int, float]:
    """Values scaled to mean 0 and (population) standard deviation 1 over this set; all equal gives 0 for each."""
    mean = sum(values.values()) / len(values)
    spread = (sum((value - mean) ** 2 for value in values.values()) / len(values)) ** 0.5
    if spread == 0:
        return dict.fromkeys(values, 0.0)
    return {key: (value - mean) / spread for key, value in values.items()}


def rank_values(ranks: Mapping[int, int]) -> dict[int, float]:
    """Ranks as values in [0, 1]: 1 for the best, 0 for the last (one rank alone: 0)."""
    count = len(ranks)
    if count < 2:
        return dict.fromkeys(ranks, 0.0)
    return {key: 1.0 - (rank - 1) / (count - 1) for key, rank in ranks.items()}


def cosine_ranks(cosine: Sequence[float]) -> dict[int, int]:
    """1-based ranks of every candidate by its cosine to the query; ties by first-stage position."""
    return judge_ranks(dict(enumerate(cosine)))


def fused_values(
    first_scores: Sequence[float], evidence: Mapping[int, float], *, method: str, weight: float, by_score: bool,
    cosine: Sequence[float] | None = None, cosine_weight: float = 0.0,
) -> dict[int, float]:
    """The fused score of every judged position (the keys of `evidence`)."""
    check_fusion(method, weight, cosine_weight)
    if method == "none":
        return {position: float(value) for position, value in evidence.items()}
    with_cosine = cosine is not None and cosine_weight > 0
    first_weight = first_stage_share(weight, cosine_weight if with_cosine else 0.0)
    ranks = judge_ranks(evidence)
    if method == "rrf":
        by_cosine = cosine_ranks(cosine) if with_cosine else {}
        return {position: weight / (RRF_K + ranks[position]) + first_weight / (RRF_K + position + 1)
                + (cosine_weight / (RRF_K + by_cosine[position]) if with_cosine else 0.0)
                for position in evidence}
    scale = z_scores if method == "zscore" else min_max
    judge = scale(evidence) if by_score else scale(rank_values(ranks))
    first = scale({position: float(first_scores[position]) for position in evidence})
    near = scale({position: float(cosine[position]) for position in evidence}) if with_cosine else {}
    return {position: weight * judge[position] + first_weight * first[position]
            + (cosine_weight * near[position] if with_cosine else 0.0) for position in evidence}


def cheap_order(first_scores: Sequence[float], cosine: Sequence[float] | None, *, method: str, weight: float,
                cosine_weight: float) -> list[int]:
    """Every position, best first, by the signals that cost no model call: the first stage fused with
    the cosine in the proportion the full fusion gives them (the first stage's order when the cosine
    has no share, or no judge share is left to scale by)."""
    count = len(first_scores)
    if cosine is None or cosine_weight <= 0 or method == "none":
        return list(range(count))
    rest = cosine_weight + first_stage_share(weight, cosine_weight)  # what the judge's share leaves
    share = cosine_weight / rest if rest > 0 else 1.0
    # The two-signal fusion of the first stage with the cosine read as the evidence of every position.
    values = fused_values(first_scores, dict(enumerate(float(value) for value in cosine)), method=method,
                          weight=share, by_score=True)
    return sorted(range(count), key=lambda position: (-values[position], position))


def cascade_positions(places: Sequence[int], depth: int, cut: int, focus: str = "top",
                      cosine: Sequence[float] | None = None) -> list[int] | None:
    """The positions a cascade asks the judge about, in the order to ask; None: every candidate.

    `places`: the cheap order (`cheap_order`); `cut`: how many the answer returns. `top` asks about
    its first `depth`; `cut` about the `depth` places around the cut, nearest it first: whether those
    make the answer is what the cheap signals are least sure of. `disagree` asks first about the
    candidates that the first stage and the `cosine` place on opposite sides of the cut (one would
    return it, the other not), then about the cheap order's first: where the two cheap signals agree,
    the judge is least likely to change the answer. Without a cosine it asks as `top` does."""
    if focus not in RERANKER_JUDGE_FOCI:
        raise ValueError(f"unknown judge focus {focus!r}; allowed: {RERANKER_JUDGE_FOCI}")
    count = len(places)
    if not 0 < depth < count:
        return None
    if focus == "disagree":
        disputed = set(disputed_positions(cosine, cut)) if cosine is not None else set()
        return sorted(places, key=lambda position: position not in disputed)[:depth]  # stable: cheap order within
    if focus == "top":
        return list(places[:depth])
    start = min(max(0, cut - (depth + 1) // 2), count - depth)
    nearest = sorted(range(start, start + depth), key=lambda index: (abs(index + 0.5 - cut), index))
    return [places[index] for index in nearest]


def disputed_positions(cosine: Sequence[float], cut: int) -> list[int]:
    """The positions inside the first stage's first `cut` but not the cosine's, or the other way round."""
    by_cosine = cosine_ranks(cosine)
    return [position for position in range(len(cosine)) if (position < cut) != (by_cosine[position] <= cut)]


def fuse(
    first_scores: Sequence[float],
    evidence: Mapping[int, float],
    *,
    method: str,
    weight: float = 0.5,
    by_score: bool = True,
    cosine: Sequence[float] | None = None,
    cosine_weight: float = 0.0,
) -> list[Placed]:
    """Every first-stage position once, best first (see the module docstring).

    `first_scores[i]` is the first stage's score of its i-th candidate, `cosine[i]` its cosine to the
    query; `evidence` maps the positions the judge placed to its value (higher is better)."""
    check_fusion(method, weight, cosine_weight)
    count = len(first_scores)
    places = cheap_order(first_scores, cosine, method=method, weight=weight, cosine_weight=cosine_weight)
    judged = [position for position in places if position in evidence]
    if not judged:  # nothing judged (the call failed): exactly the order with the reranker off
        return [Placed(position, float(score), None, float(score)) for position, score in enumerate(first_scores)]
    values = fused_values(first_scores, {p: evidence[p] for p in judged}, method=method, weight=weight,
                          by_score=by_score, cosine=cosine, cosine_weight=cosine_weight)
    reordered = sorted(judged, key=lambda position: (-values[position], position))
    holder = dict(zip(judged, reordered))  # a judged candidate's place -> the judged candidate that now takes it
    result: list[Placed] = []
    above = values[reordered[0]]
    for position in places:
        taker = holder.get(position)
        if taker is None:
            result.append(Placed(position, above, None, float(first_scores[position])))
        else:
            result.append(Placed(taker, values[taker], float(evidence[taker]), float(first_scores[taker])))
        above = result[-1].score
    return result


def fuse_judgement(first_scores: Sequence[float], judgement: Judgement, *, method: str,
                   weight: float = 0.5, cosine: Sequence[float] | None = None,
                   cosine_weight: float = 0.0) -> Judgement:
    """The judgement with graph search's order filled in: the first stage fused with what the judge
    judged (RERANKER_FUSION), and the inputs it was fused from (a benchmark replays other fusions).

    A call that judged nothing (it failed, and said why) orders exactly as with the reranker off;
    `judge_score` is the judge's own: a passage whose request failed is placed, not judged (None)."""
    evidence = judgement.evidence if judgement.reranked else {}
    fused = fuse(first_scores, evidence, method=method, weight=weight, by_score=judgement.by_score,
                 cosine=cosine, cosine_weight=cosine_weight)
    order = tuple(hit if hit.position in judgement.judged_at_s else replace(hit, judge_score=None) for hit in fused)
    return replace(judgement, order=order, fusion=method if judgement.reranked else None,
                   first_scores=tuple(float(score) for score in first_scores),
                   cosine=None if cosine is None else tuple(float(value) for value in cosine))


def incoming_scores(count: int) -> list[float]:
    """Scores for the incoming order: 1.0 descending, always > 0."""
    return [1.0 - index / (count + 1) for index in range(count)]


def judged_order(judgement: Judgement) -> list[Placed]:
    """The judge's order alone, over the incoming one (what Graphiti's `rank` answers): the placed
    candidates reordered among the places they hold, the rest (and a fallen-back call's all) in
    incoming order, scored 1.0 descending; every score > 0."""
    return fuse(incoming_scores(judgement.candidates), judgement.evidence, method="none")
