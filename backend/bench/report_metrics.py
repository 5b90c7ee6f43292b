"""Report-quality figures: what a finished report cited, held against hand-written gold points and
planted distractors. Pure functions over fact texts, so they can be checked on worked examples.

A gold point is something a good report must say, with the facts that state it; citing any one of
them covers the point (two facts telling the same cause are one point, not two). Recall is the
share of gold points covered. A distractor is a fact that shares words with the requirement but not
its topic; each one cited is counted.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class GoldPoint:
    point: str
    facts: frozenset[str]


@dataclass(frozen=True)
class BenchRequirement:
    id: str
    requirement: str
    sections: int
    gold: tuple[GoldPoint, ...]
    distractors: frozenset[str]

    def gold_facts(self) -> frozenset[str]:
        """Every fact that covers one of the gold points."""
        return frozenset().union(*(point.facts for point in self.gold))

    def known_facts(self) -> frozenset[str]:
        return self.gold_facts() | self.distractors


def score_citations(cited: list[str], requirement: BenchRequirement) -> dict[str, Any]:
    """Gold recall and distractors for the cited fact texts (each fact counted once)."""
    cited_set = set(cited)
    covered = [point.point for point in requirement.gold if point.facts & cited_set]
    gold_facts = requirement.gold_facts()
    distractors = [fact for fact in dict.fromkeys(cited) if fact in requirement.distractors]
    return {
        "gold_points": len(requirement.gold),
        "gold_covered": len(covered),
        "gold_recall": round(len(covered) / len(requirement.gold), 4) if requirement.gold else 0.0,
        "covered_points": covered,
        "missed_points": [point.point for point in requirement.gold if point.point not in covered],
        "cited_facts": len(cited_set),
        "cited_gold_facts": len(cited_set & gold_facts),
        "distractors_cited": len(distractors),
        "cited_distractors": distractors,
        "cited_other": len(cited_set - gold_facts - requirement.distractors),
    }


def tool_calls_of(log: list[dict]) -> dict[str, Any]:
    """Tool use from a report's step log: calls by tool, repeated and identical queries, nudges."""
    tools = [step["tool"] for step in log if step.get("kind") == "tool"]
    repeats = [step for step in log if step.get("kind") == "repeated_query"]
    return {
        "tool_calls": len(tools),
        "tool_calls_by_tool": dict(Counter(tools)),
        "repeated_queries": len(repeats),
        "identical_repeats": sum(1 for step in repeats if step.get("identical")),
        "nudged_calls": sum(1 for step in log if step.get("kind") == "tool" and step.get("nudged_from")),
        "invalid_calls": sum(1 for step in log if step.get("kind") == "invalid_call"),
        "tool_errors": sum(1 for step in log if step.get("kind") == "tool_error"),
        "searches_moved_by_reranker": sum(
            1 for step in log if step.get("kind") == "tool"
            and (step.get("search") or {}).get("moved_up")),
    }


def aggregate(records: list[dict]) -> dict[str, Any]:
    """One row of the results table from the per-report records of one setting."""
    count = len(records)
    if not count:
        return {"reports": 0}

    def total(key: str) -> float:
        return float(sum(record.get(key) or 0 for record in records))

    by_tool: Counter = Counter()
    for record in records:
        by_tool.update(record.get("tool_calls_by_tool") or {})
    return {
        "reports": count,
        "gold_recall": round(total("gold_recall") / count, 4),
        "gold_covered": int(total("gold_covered")),
        "gold_points": int(total("gold_points")),
        "gold_shown": int(total("gold_shown")),
        "gold_in_text": int(total("gold_in_text")),
        "listed_facts": int(total("listed_facts")),
        "completion_citations": int(total("completion_citations")),
        "unstated_sources": int(total("unstated_sources")),
        "distractors_cited": int(total("distractors_cited")),
        "removed_claims": int(total("removed_claims")),
        "removed_citations": int(total("removed_citations")),
        "tool_calls": int(total("tool_calls")),
        "tool_calls_by_tool": dict(sorted(by_tool.items())),
        "repeated_queries": int(total("repeated_queries")),
        "identical_repeats": int(total("identical_repeats")),
        "agent_calls": int(total("agent_calls")),
        "judge_calls": int(total("judge_calls")),
        "judge_cache_hits": int(total("judge_cache_hits")),  # scores another setting's run already paid for
        "wall_s": round(total("wall_s"), 1),
        "wall_per_report_s": round(total("wall_s") / count, 1),
        "sections_by_fallback": int(total("sections_by_fallback")),
    }
