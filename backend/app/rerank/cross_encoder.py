"""The edge where Graphiti's cross-encoder contract meets ours.

Graphiti's `CrossEncoderClient.rank(query, passages)` answers (passage, score) pairs, best first.
Everything beneath this edge works by position: a reranker of ours answers
`judge_positions(query, passages)` with a `Judgement` (app/rerank/judgement.py): the score of each
position it judged, how many it judged, whether (and why) the call fell back. `JudgingCrossEncoder`
is the thin adapter on top: its `rank` turns that Judgement into Graphiti's pairs (every passage
once, byte for byte, the judged ones in the judge's order, scores > 0) and never raises.

`judge_positions(reranker, query, passages)` asks any cross encoder that one question: ours directly,
any other through its `rank`, whose texts are mapped back to positions here and nowhere else.
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections import defaultdict, deque
from dataclasses import replace

from graphiti_core.cross_encoder.client import CrossEncoderClient

from app.rerank.fusion import judged_order
from app.rerank.judgement import Judgement

logger = logging.getLogger(__name__)


class JudgingCrossEncoder(CrossEncoderClient):
    """A Graphiti cross encoder whose real answer is a `Judgement` by position."""

    @abstractmethod
    async def judge_positions(self, query: str, passages: list[str]) -> Judgement:
        """What the judge made of each position of `passages`. Never raises (cancellation aside)."""

    def start_warmup(self, timeout_s: float) -> None:
        """Load the model in the background before the first call needs it (the LLM judge does)."""

    async def rank(self, query: str, passages: list[str]) -> list[tuple[str, float]]:
        passages = list(passages)
        judgement = await self.judge_positions(query, passages)
        return [(passages[hit.position], hit.score) for hit in judged_order(judgement)]


async def judge_positions(reranker: CrossEncoderClient, query: str, passages: list[str],
                          only: list[int] | None = None) -> Judgement:
    """`reranker`'s judgement of `passages`, by position. Ours say what they judged and how; any
    other cross encoder's order is taken as a judgement of every passage, by rank.

    `only`: the positions to ask about, in the order to ask (the cascade's first few of the cheap
    order); the judgement still covers every position, the others unjudged."""
    passages = list(passages)
    if only is not None and len(only) < len(passages):
        asked = await judge_positions(reranker, query, [passages[position] for position in only])
        return on_positions(asked, only, len(passages))
    if isinstance(reranker, JudgingCrossEncoder):
        return await reranker.judge_positions(query, passages)
    if not passages:
        return Judgement(0)
    evidence = dict(ranked_positions(passages, await reranker.rank(query, passages)))
    return Judgement(len(passages), evidence, dict.fromkeys(evidence, 0.0), by_score=False)


def on_positions(asked: Judgement, positions: list[int], candidates: int) -> Judgement:
    """A judgement of a sublist (its position i is `positions[i]`) as one of all `candidates`."""
    return replace(asked, candidates=candidates,
                   evidence={positions[index]: value for index, value in asked.evidence.items()},
                   judged_at_s={positions[index]: seconds for index, seconds in asked.judged_at_s.items()})


async def rerank_positions(reranker: CrossEncoderClient, query: str, passages: list[str]) -> list[tuple[int, float]]:
    """`rank`'s answer by position: (position, score), best first, each position once."""
    if not passages:
        return []
    return [(hit.position, hit.score) for hit in judged_order(await judge_positions(reranker, query, passages))]


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
