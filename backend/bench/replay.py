"""Offline replays of graph-search reranking from stored per-candidate scores: no model call.

`bench graph` stores, for every query of its reranked phase, what graph search handed the reranker
and what the judge answered (`candidate_trace`): each first-stage candidate's passage id and score,
the judge's evidence, when each score arrived, and the embedder's cosine. From that, the same
`graphiti_llm_rerank.fusion.fuse` that graph search runs gives any fusion's ranking (`fused_ranking`), with the
cosine as a third signal, a cascade's (the judge asked about a few of the cheap order only), a time
budget's (only the scores that had arrived by then count), or the embedder's cosine order alone
(`cosine_ranking`). `sure_stop` counts how many judgements a cascade that stops only when it is sure of
its answer would need.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.config import RERANKER_JUDGE_FOCI
from graphiti_llm_rerank.fusion import cascade_positions, cheap_order
from graphiti_llm_rerank.fusion import check_fusion, fuse

TRACE_VERSION = 1
# How a replay's label names each judge focus (RERANKER_JUDGE_FOCI).
FOCUS_LABELS = {"top": "", "cut": " around the cut", "disagree": " where first stage and cosine disagree"}


@dataclass(frozen=True)
class Replay:
    """One replayed setting: a fusion (judge share `weight`, cosine share `cosine_weight`), optionally
    a cascade (`depth`: RERANKER_JUDGE_DEPTH, `focus`: RERANKER_JUDGE_FOCUS) and a budget."""

    method: str
    weight: float
    budget_s: float | None = None
    cosine_weight: float = 0.0
    depth: int = 0
    focus: str = "top"

    @property
    def label(self) -> str:
        name = "judge alone" if self.method == "none" else f"{self.method} w={self.weight:g}"
        name += f" cos={self.cosine_weight:g}" if self.cosine_weight else ""
        name += f", judge {self.depth}" if self.depth else ""
        name += FOCUS_LABELS[self.focus] if self.depth else ""
        return f"replay: {name}" + (f", budget {self.budget_s:g} s" if self.budget_s is not None else "")


def parse_replays(text: str, default_weight: float) -> list[Replay]:
    """'none,rrf:0.5,linear:0.4+0.3#8@30,linear:0.6+0.2#cut6' -> replays:
    METHOD[:WEIGHT[+COSINE_WEIGHT]][#[FOCUS]DEPTH][@BUDGET_SECONDS] (the weight defaults to
    RERANKER_FUSION_WEIGHT; FOCUS: RERANKER_JUDGE_FOCUS other than `top`, e.g. `cut`: the judge asks
    about the DEPTH around the cut, not the first DEPTH);
    ValueError naming the bad entry."""
    replays = []
    for part in (piece.strip() for piece in text.split(",")):
        if not part:
            continue
        setting, _, budget = part.partition("@")
        setting, _, depth = setting.partition("#")
        # `top` is written as the depth alone: '#6', not '#top6'.
        focus = next((name for name in RERANKER_JUDGE_FOCI if name != "top" and depth.startswith(name)), "top")
        depth = depth.removeprefix(focus) if focus != "top" else depth
        method, _, weights = setting.partition(":")
        weight, _, cosine_weight = weights.partition("+")
        try:
            value = float(weight) if weight else default_weight
            cosine = float(cosine_weight) if cosine_weight else 0.0
            seconds = float(budget) if budget else None
            judged = int(depth) if depth else 0
        except ValueError:
            raise ValueError(f"{part!r}: the weights, the depth and the budget must be numbers") from None
        check_fusion(method, value, cosine)
        if seconds is not None and seconds <= 0:
            raise ValueError(f"{part!r}: a budget is seconds > 0")
        if judged < 0 or (focus != "top" and not depth):
            raise ValueError(f"{part!r}: a depth is a count >= 0")
        replays.append(Replay(method, value, seconds, cosine, judged, focus))
    return list(dict.fromkeys(replays))


def candidate_trace(trace: Any, cosine: Sequence[float] | None) -> dict:
    """A search's RerankTrace (app/graph/search.py) as JSON-safe lists aligned by candidate position."""
    judgement = trace.judgement
    count = len(trace.passages)
    return {
        "version": TRACE_VERSION,
        "doc_ids": [_doc_id(metadata) for metadata in trace.metadata],
        "first_scores": [float(score) for score in trace.first_scores],
        "evidence": [judgement.evidence.get(position) for position in range(count)],
        "judged_at_s": [judgement.judged_at_s.get(position) for position in range(count)],
        "by_score": judgement.by_score,
        "fell_back": judgement.fell_back,
        "cut_short": judgement.cut_short,
        "cosine": None if cosine is None else [float(value) for value in cosine],
    }


def _doc_id(metadata: dict) -> str | None:
    value = (metadata or {}).get("doc_id")
    return None if value is None else str(value)


def doc_ranking(doc_ids: Sequence[str | None], positions: Sequence[int]) -> list[str]:
    """Passage/abstract ids of these candidate positions, best first, each once."""
    return list(dict.fromkeys(doc_ids[position] for position in positions if doc_ids[position] is not None))


def evidence_of(trace: dict, budget_s: float | None = None) -> dict[int, float]:
    """The judge's evidence as graph search fuses it: none when nothing was judged; under a budget,
    only the scores that had arrived by then (a passage that failed meanwhile is left in place)."""
    judged_at = trace["judged_at_s"]
    if not any(seconds is not None for seconds in judged_at):
        return {}
    evidence = {position: value for position, value in enumerate(trace["evidence"]) if value is not None}
    if budget_s is None:
        return evidence
    return {position: value for position, value in evidence.items()
            if judged_at[position] is not None and judged_at[position] <= budget_s}


def asked_positions(trace: dict, replay: Replay, cut: int) -> set[int] | None:
    """The positions a cascade would have asked the judge about (`cut`: how many the answer returns);
    None: all of them."""
    asked = cascade_positions(_cheap_places(trace, replay), replay.depth, cut, replay.focus, trace["cosine"])
    return None if asked is None else set(asked)


def _cheap_places(trace: dict, replay: Replay) -> list[int]:
    """The candidates in the cheap order this replay's shares give (what a cascade picks from)."""
    return cheap_order(trace["first_scores"], trace["cosine"], method=replay.method, weight=replay.weight,
                       cosine_weight=replay.cosine_weight)


def replay_evidence(trace: dict, replay: Replay, cut: int) -> dict[int, float]:
    evidence = evidence_of(trace, replay.budget_s)
    asked = asked_positions(trace, replay, cut)
    return evidence if asked is None else {position: value for position, value in evidence.items() if position in asked}


def fused_ranking(trace: dict, replay: Replay, limit: int) -> list[str]:
    fused = fuse(trace["first_scores"], replay_evidence(trace, replay, limit), method=replay.method,
                 weight=replay.weight, by_score=trace["by_score"], cosine=trace["cosine"],
                 cosine_weight=replay.cosine_weight)
    return doc_ranking(trace["doc_ids"], [hit.position for hit in fused[:limit]])


def judged_in(trace: dict, replay: Replay, cut: int) -> int:
    """How many candidates the judge would have judged under this replay: those judged within the
    budget, among the ones a cascade asks about (`cut`: how many the answer returns)."""
    asked = asked_positions(trace, replay, cut)
    judged_at = trace["judged_at_s"]
    return sum(1 for position, seconds in enumerate(judged_at)
               if seconds is not None and (replay.budget_s is None or seconds <= replay.budget_s)
               and (asked is None or position in asked))


def asking_order(trace: dict, replay: Replay, cut: int) -> list[int]:
    """Every position in the order a cascade of this focus asks the judge about them (a cascade of all
    but one, then the one left)."""
    places = _cheap_places(trace, replay)
    first = cascade_positions(places, len(places) - 1, cut, replay.focus, trace["cosine"]) or []
    return first + [position for position in places if position not in first]


def sure_stop(trace: dict, replay: Replay, limit: int) -> int:
    """The fewest judgements, asked in the cascade's order, after which no candidate left unjudged could
    change the top `limit` when judged alone at either end of the judge's scale. A lower bound on what a
    cascade that stops only when no further judgement can change its answer would judge (several
    candidates judged at once can change more): all of them when it never is sure."""
    evidence = evidence_of(trace)
    order = asking_order(trace, replay, limit)
    ends = (min(0.0, *evidence.values()), max(1.0, *evidence.values()))

    def answer(judged: dict[int, float]) -> set[int]:
        fused = fuse(trace["first_scores"], judged, method=replay.method, weight=replay.weight,
                     by_score=trace["by_score"], cosine=trace["cosine"], cosine_weight=replay.cosine_weight)
        return {hit.position for hit in fused[:limit]}

    for count in range(1, len(order)):
        judged = {position: evidence[position] for position in order[:count] if position in evidence}
        now = answer(judged)
        if all(answer({**judged, other: end}) == now for other in order[count:] for end in ends):
            return count
    return len(order)


def cosine_ranking(trace: dict, limit: int) -> list[str]:
    """The candidates by the embedder's cosine to the query alone (ties keep first-stage order)."""
    cosine = trace["cosine"]
    order = sorted(range(len(cosine)), key=lambda position: (-cosine[position], position))
    return doc_ranking(trace["doc_ids"], order[:limit])
