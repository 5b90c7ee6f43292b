"""Tournament (TourRank-r): stages of groups; in each group the model selects the top m, the selected
documents advance to the next stage and earn one point per stage won. The whole tournament runs
`rounds` times with different groupings (round 0 deals the incoming order round-robin, later rounds
a seeded shuffle); documents are ranked by total points, ties in incoming order.

A plan is a sequence of stages (groups, select): a stage deals its n candidates over `groups` groups
as evenly as possible and each group selects `select`, so groups * select advance.

- The default plan is the paper's, for exactly 100 candidates: 100 -> 50 -> 20 -> 10 -> 5 -> 2
  (PAPER_STAGES, 13 selections a round: 26 calls with the default 2 rounds). For any other count the
  strategy fails fast (TournamentPlanError) instead of inventing stages.
- `plan="halving"`: one group per stage, each keeping half, down to one winner (`halving_plan`):
  20 candidates -> 10 -> 5 -> 2 -> 1, 4 calls a round. This is what everything built from settings
  (graph search, /api/rerank, the benchmark) uses, because their candidate counts vary.
- An explicit plan (a list of stages) is checked against the count, naming the stage that breaks.

Groups within a stage run concurrently, at most `max_parallel_groups` at once (the judge's bound
still applies). A group whose answer is unusable advances its first m in dealt order (counted).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from dataclasses import dataclass

from graphiti_llm_rerank.config import DEFAULT_MAX_DOCUMENT_CHARS
from graphiti_llm_rerank.strategies.answer_parsing import selection_answer
from graphiti_llm_rerank.strategies.base import (
    JudgeCall, check_count, judge_call_for, gather_or_fail, longest_id, results_in_order, shown_texts,
)
from graphiti_llm_rerank.strategies.strategy_prompts import select_messages
from graphiti_llm_rerank.types import Document, RerankError, RerankResult, TournamentPlanError


@dataclass(frozen=True)
class Stage:
    groups: int
    select: int


PAPER_CANDIDATES = 100
# TourRank's stages for 100 candidates: 5 groups of 20 keep 10 each, 5 groups of 10 keep 4,
# then one group keeps 10 of 20, 5 of 10 and 2 of 5.
PAPER_STAGES: tuple[Stage, ...] = (Stage(5, 10), Stage(5, 4), Stage(1, 10), Stage(1, 5), Stage(1, 2))
HALVING = "halving"


def halving_plan(n_documents: int) -> tuple[Stage, ...]:
    """One group per stage keeping half (at least one), down to one winner."""
    stages, remaining = [], n_documents
    while remaining > 1:
        stages.append(Stage(1, remaining // 2))
        remaining //= 2
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
        plan: str | Sequence[Stage | tuple[int, int]] | None = None,
        max_parallel_groups: int = 4,
        max_document_chars: int = DEFAULT_MAX_DOCUMENT_CHARS,
        max_documents: int = 500,
    ):
        if rounds < 1 or max_parallel_groups < 1 or max_document_chars < 1:
            raise ValueError("rounds, max_parallel_groups and max_document_chars must be >= 1")
        if isinstance(plan, str) and plan != HALVING:
            raise ValueError(f"plan must be {HALVING!r} or a list of (groups, select) stages, got {plan!r}")
        self.rounds = rounds
        self.plan = plan if isinstance(plan, str) or plan is None else tuple(
            stage if isinstance(stage, Stage) else Stage(*stage) for stage in plan)
        self.max_parallel_groups = max_parallel_groups
        self.max_document_chars = max_document_chars
        self.max_documents = max_documents

    def plan_for(self, n_documents: int) -> tuple[Stage, ...]:
        """The stages for this many candidates, or TournamentPlanError before anything is spent."""
        if n_documents <= 1:
            return ()
        if self.plan == HALVING:
            return halving_plan(n_documents)
        if self.plan is None and n_documents != PAPER_CANDIDATES:
            raise TournamentPlanError(
                f"the tournament's default stages are TourRank's for exactly {PAPER_CANDIDATES} candidates "
                f"(100 -> 50 -> 20 -> 10 -> 5 -> 2), not {n_documents}: give explicit stages "
                f"(plan=[(groups, select), ...]) or plan={HALVING!r}"
            )
        plan = self.plan or PAPER_STAGES
        check_plan(plan, n_documents)
        return plan

    def estimate_calls(self, n_documents: int, top_k: int | None = None) -> int:
        return self.rounds * sum(stage.groups for stage in self.plan_for(n_documents))

    async def rerank(self, query: str, documents: list[Document], provider, top_k: int | None = None) -> list[RerankResult]:
        call = judge_call_for(provider)
        check_count(self, documents)
        plan = self.plan_for(len(documents))
        texts = shown_texts(call, documents, self.max_document_chars)
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
                    [self._select(call, limit, query, documents, texts, group, stage.select, what) for group in groups]
                )
                candidates = [index for group_winners in winners for index in group_winners]
                for index in candidates:
                    points[index] += 1
        if plan:
            call.raise_if_nothing_worked()
        order = sorted(range(len(documents)), key=lambda index: -points[index])  # stable: ties keep order
        metadata = {index: {"points": points[index]} for index in range(len(documents))}
        return results_in_order(documents, order, top_k, metadata=metadata)

    async def _select(
        self, call: JudgeCall, limit: asyncio.Semaphore, query: str, documents, texts, group: list[int], select: int,
        what: str,
    ) -> list[int]:
        members = [documents[index] for index in group]
        try:
            messages = select_messages(query, [texts[index] for index in group], select, call.instructions)
            max_tokens = 24 + 4 * select
            call.check_fits(messages, max_tokens, longest_id(members), "tournament")
            async with limit:
                text, _ = await call.complete(messages, max_tokens=max_tokens, json_object=True)
            chosen, repairs = call.parsed(selection_answer, text, len(group), select, repair=not call.strict)
        except RerankError as error:
            call.unit_failed(error, f"{what} group")
            return group[:select]
        call.repairs += repairs
        call.unit_succeeded()
        return [group[position] for position in chosen]
