"""Does a judge tell a report set's planted distractors from its gold facts? (the report bench's distractor target)

The report agent takes a citation out when its section's question scores the fact under
REPORT_CITATION_FLOOR, an absolute score (app/report/citation_floor.py). So a planted distractor stays
out of reports only if the judge scores it under the gold. This asks the reranker the app builds
(graphiti_llm_rerank/providers.py, pointwise) about every gold fact and every distractor of each requirement,
with the requirement as the question and, as REPORT_FLOOR_WITHOUT_NAMES does, the lower of that score
and the score for the requirement without its names. It prints, per requirement, the gold's lowest and
median score and each distractor's; pooled, the AUC (a gold fact scored over a distractor), the
distractors at or over their own requirement's gold median, and what one floor for all would do: the
distractors a floor keeping every gold fact keeps, and the gold a floor removing every distractor removes.

It takes minutes with a local model, a report run takes hours: run it first when a new judge is at hand,

    python -m bench distractor-judge --base-url http://localhost:11434/v1 --model qwen2.5:3b

The section questions the agent really asks are narrower than the requirement, so this is the judge's
side of the target only; `bench report` measures the rest.
"""

from __future__ import annotations

import asyncio
import json
import statistics
from dataclasses import dataclass
from typing import Any

from bench.report_metrics import BenchRequirement
from app.config import Config
from app.graph.search import judge_passages
from graphiti_llm_rerank import build_reranker
from graphiti_llm_rerank.providers import build_judge
from app.report.citation_floor import lower_of, without_names
from app.report.tools import FactJudgement


@dataclass(frozen=True)
class _JudgeOnly:
    """What judge_passages reads of a graph runtime: a reranker, switched on."""

    reranker: Any
    reranking_enabled: bool = True


@dataclass(frozen=True)
class RequirementScores:
    id: str
    gold: dict[str, float]  # fact -> score
    distractors: dict[str, float]

    def gold_median(self) -> float:
        return statistics.median(self.gold.values())


async def score_requirement(reranker: Any, requirement: BenchRequirement) -> RequirementScores:
    """Each gold fact's and distractor's score for the requirement: the lower of as asked and without
    its names. A fact the judge gave no score (its request failed) gets none and is left out."""
    gold = list(dict.fromkeys(fact for point in requirement.gold for fact in sorted(point.facts)))
    distractors = sorted(requirement.distractors)
    passages = gold + distractors

    async def judged(question: str | None) -> FactJudgement:  # keyed by position, as the agent keys by uuid
        verdict = await judge_passages(_JudgeOnly(reranker), question, passages) if question else None
        return FactJudgement([], {str(at): score for at, score in (verdict.scores if verdict else {}).items()})

    as_asked = await judged(requirement.requirement)
    scores = lower_of(as_asked, await judged(without_names(requirement.requirement))).scores

    def scored(facts: list[str], first: int) -> dict[str, float]:
        return {fact: scores[str(at)] for at, fact in enumerate(facts, first) if str(at) in scores}

    return RequirementScores(requirement.id, scored(gold, 0), scored(distractors, len(gold)))


def summary(results: list[RequirementScores]) -> dict[str, Any]:
    """The pooled figures described in the module's docstring."""
    gold = [score for result in results for score in result.gold.values()]
    distractors = [score for result in results for score in result.distractors.values()]
    pairs = [(g > d) + 0.5 * (g == d) for g in gold for d in distractors]
    over_median = [fact for result in results if result.gold
                   for fact, score in result.distractors.items() if score >= result.gold_median()]
    return {
        "gold_facts": len(gold), "distractors": len(distractors),
        "auc": round(sum(pairs) / len(pairs), 4) if pairs else None,
        "distractors_at_or_over_their_gold_median": over_median,
        "distractors_kept_by_a_floor_keeping_all_gold": sum(d >= min(gold) for d in distractors) if gold else None,
        "gold_removed_by_a_floor_removing_all_distractors":
            sum(g <= max(distractors) for g in gold) if distractors else None,
    }


def report(results: list[RequirementScores]) -> str:
    """A Markdown table per requirement, then the pooled figures."""
    lines = ["| requirement | gold: lowest / median | distractors |", "|---|---|---|"]
    for result in results:
        low = f"{min(result.gold.values()):.4f} / {result.gold_median():.4f}" if result.gold else "-"
        shown = "; ".join(f"{score:.4f} {fact[:60]}" for fact, score in
                          sorted(result.distractors.items(), key=lambda item: -item[1]))
        lines.append(f"| {result.id} | {low} | {shown} |")
    return "\n".join(lines) + "\n\n" + json.dumps(summary(results), indent=2)


async def run(config: Config, requirements: list[BenchRequirement]) -> list[RequirementScores]:
    reranker = build_reranker(config, judge=build_judge(config))
    try:
        return [await score_requirement(reranker, requirement) for requirement in requirements]
    finally:
        close = getattr(reranker, "aclose", None)
        if close is not None:
            await close()
