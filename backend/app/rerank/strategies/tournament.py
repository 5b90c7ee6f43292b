"""Tournament (TourRank-r): stages of groups; in each group the model selects the top m, the selected
documents advance to the next stage and earn one point per stage won. The whole tournament runs
`rounds` times with different groupings (round 0 deals the incoming order round-robin, later rounds
a seeded shuffle); documents are ranked by total points, ties in incoming order.

A plan is a sequence of stages (groups, select): a stage deals its n candidates over `groups` groups
as evenly as possible and each group selects `select`, so groups * select advance. Common candidate
counts have tuned plans (PLANS); other counts get one derived by `derived_plan` (groups of at most
`group_size`, each keeping half); an explicit `plan` may be given and is checked against the count.
Groups within a stage run concurrently, at most `max_parallel_groups` at once (the judge's bound
still applies). A group whose answer is unusable advances its first m in dealt order (counted).
"""

from __future__ import annotations

from app.config import DEFAULT_MAX_DOCUMENT_CHARS
import asyncio
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from app.rerank.judge_call import JudgeCall
from app.rerank.strategies.answer_parsing import selection_answer
from app.rerank.strategies.base import (
    check_count, judge_call_for, gather_or_fail, longest_id, results_in_order, shown_texts,
)
from app.rerank.strategies.strategy_prompts import select_messages
from app.rerank.types import Document, RerankError, RerankResult, TournamentPlanError


@dataclass(frozen=True)
class Stage:
    groups: int
    select: int


PLANS: dict[int, tuple[Stage, ...]] = {
    10: (Stage(1, 5), Stage(1, 2), Stage(1, 1)),
    20: (Stage(2, 5), Stage(1, 5), Stage(1, 2), Stage(1, 1)),
    50: (Stage(5, 4), Stage(2, 5), Stage(1, 5), Stage(1, 2), Stage(1, 1)),
    100: (Stage(5, 10), Stage(5, 4), Stage(2, 5), Stage(1, 5), Stage(1, 2), Stage(1, 1)),
}


def derived_plan(n_documents: int, group_size: int = 20) -> tuple[Stage, ...]:
    """Groups of at most group_size keep half of their smallest group (at least one), down to one winner."""
    stages, remaining = [], n_documents
    while remaining > 1:
        groups = math.ceil(remaining / group_size)
        select = max(1, (remaining // groups) // 2)
        stages.append(Stage(groups, select))
        remaining = groups * select
    return tuple(stages)


def check_plan(plan: Sequence[Stage], n_documents: int) -> None:
    """Refuse a plan that cannot run on n_documents, naming the stage that breaks."""
    remaining = n_documents
    for number, stage in enumerate(plan, start=1):
        smallest = remaining // stage.groups if stage.groups >= 1 else 0
        if stage.groups < 1 or stage.select < 1 or smallest <= stage.select:
            raise TournamentPlanError(
                f"tournament plan stage {number} cannot run: {remaining} candidates in {stage.groups} groups "
                f"(smallest {smallest}) cannot each select {stage.select}; every group needs more candidates "
                "than it selects"
            )
        remaining = stage.groups * stage.select


def deal(candidates: Sequence[int], groups: int) -> list[list[int]]:
    """Round-robin, so each group gets a spread of the current order."""
    return [list(candidates[group::groups]) for group in range(groups)]


class TournamentStrategy:
    name = "tournament"

    def __init__(
        self,
        *,
        rounds: int = 2,
        plan: Sequence[Stage | tuple[int, int]] | None = None,
        group_size: int = 20,
        max_parallel_groups: int = 4,
        max_document_chars: int = DEFAULT_MAX_DOCUMENT_CHARS,
        max_documents: int = 500,
    ):
        if rounds < 1 or group_size < 2 or max_parallel_groups < 1 or max_document_chars < 1:
            raise ValueError("rounds, max_parallel_groups, max_document_chars must be >= 1 and group_size >= 2")
        self.rounds = rounds
        self.explicit_plan = tuple(s if isinstance(s, Stage) else Stage(*s) for s in plan) if plan else None
        self.group_size = group_size
        self.max_parallel_groups = max_parallel_groups
        self.max_document_chars = max_document_chars
        self.max_documents = max_documents

    def plan_for(self, n_documents: int) -> tuple[Stage, ...]:
        if n_documents <= 1:
            return ()
        plan = self.explicit_plan or PLANS.get(n_documents) or derived_plan(n_documents, self.group_size)
        check_plan(plan, n_documents)
        return plan

    def estimate_calls(self, n_documents: int, top_k: int | None = None) -> int:
        return self.rounds * sum(stage.groups for stage in self.plan_for(n_documents))

    async def rerank(self, query: str, documents: list[Document], provider, top_k: int | None = None) -> list[RerankResult]:
        session = judge_call_for(provider)
        check_count(self, documents)
        plan = self.plan_for(len(documents))
        texts = shown_texts(session, documents, self.max_document_chars)
        points = [0] * len(documents)
        limit = asyncio.Semaphore(self.max_parallel_groups)
        for round_number in range(self.rounds if plan else 0):
            candidates = list(range(len(documents)))
            if round_number:
                random.Random(round_number).shuffle(candidates)
            for stage_number, stage in enumerate(plan, start=1):
                groups = deal(candidates, stage.groups)
                what = f"tournament round {round_number + 1} stage {stage_number}"
                winners = await gather_or_fail(
                    [self._select(session, limit, query, documents, texts, group, stage.select, what) for group in groups]
                )
                candidates = [index for group_winners in winners for index in group_winners]
                for index in candidates:
                    points[index] += 1
        if plan:
            session.raise_if_nothing_worked()
        order = sorted(range(len(documents)), key=lambda index: -points[index])  # stable: ties keep order
        metadata = {index: {"points": points[index]} for index in range(len(documents))}
        return results_in_order(documents, order, top_k, metadata=metadata)

    async def _select(
        self, session: JudgeCall, limit: asyncio.Semaphore, query: str, documents, texts, group: list[int], select: int,
        what: str,
    ) -> list[int]:
        members = [documents[index] for index in group]
        try:
            messages = select_messages(query, [texts[index] for index in group], select, session.instructions)
            max_tokens = 24 + 4 * select
            session.check_fits(messages, max_tokens, longest_id(members), "tournament")
            async with limit:
                text, _ = await session.complete(messages, max_tokens=max_tokens, json_object=True)
            chosen, repairs = session.parsed(selection_answer, text, len(group), select, repair=not session.strict)
        except RerankError as error:
            session.unit_failed(error, f"{what} group")
            return group[:select]
        session.repairs += repairs
        session.unit_succeeded()
        return [group[position] for position in chosen]
