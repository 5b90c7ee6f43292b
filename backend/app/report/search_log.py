"""What a search did for the report, for the step log: the facts that came back and how the
reranker moved them.

Every hit carries its place in the first stage (`first_stage_rank`, hybrid RRF) and its place in
the answer (`rank`). Moved up means the reranker placed it higher than the first stage did; with
the reranker off both are equal; a fact brought in from the neighbourhood of the top entities says
`from_neighbourhood` (its first-stage place is after the first stage's own candidates). Facts of the first stage's top `limit` that are missing from the
answer were pushed out by facts the reranker brought up from further down (only their first-stage
places are known: search returns the answer, not the candidates it dropped).
"""

from __future__ import annotations

from typing import Any

from app.report.results import InsightResult, SearchResult, ToolResult
from app.report.views import FactView

FACT_CHARS = 120  # each fact's text in the log is cut to this; the uuid names it in full


def _entry(fact: FactView, shown: str) -> dict[str, Any]:
    entry = {"uuid": fact.uuid, "fact": fact.fact[:FACT_CHARS], "rank": fact.rank,
             "first_stage_rank": fact.first_stage_rank, "moved": fact.first_stage_rank - fact.rank,
             "shown": fact.uuid in shown}
    if fact.from_neighbourhood:  # its first_stage_rank is its place after the first stage's own candidates
        entry["from_neighbourhood"] = True
    return entry


def ranked_facts(result: ToolResult) -> list[FactView]:
    """The facts a search ranked (not the ones a tool only read), in the order the model saw them."""
    return [fact for fact in result.all_facts() if fact.rank is not None and fact.first_stage_rank is not None]


def search_movement(result: ToolResult, shown: str, limit: int | None = None) -> dict[str, Any]:
    """{reranked, facts: [...], moved_up, moved_down, kept, pushed_out_first_stage_ranks, summary}."""
    facts = [_entry(fact, shown) for fact in ranked_facts(result)]
    if isinstance(result, InsightResult):  # each fact's ranks are those of the sub-query that found it best
        for entry, fact in zip(facts, ranked_facts(result)):
            entry["found_by"] = fact.found_by
    up = [entry["uuid"] for entry in facts if entry["moved"] > 0]
    down = [entry["uuid"] for entry in facts if entry["moved"] < 0]
    kept = len(facts) - len(up) - len(down)
    log: dict[str, Any] = {"reranked": bool(getattr(result, "reranked", False)), "facts": facts,
                           "moved_up": up, "moved_down": down, "kept": kept}
    pushed_out: list[int] = []
    if isinstance(result, SearchResult) and facts:
        top = limit or len(facts)
        present = {entry["first_stage_rank"] for entry in facts}
        pushed_out = [rank for rank in range(1, top + 1) if rank not in present]
        log["pushed_out_first_stage_ranks"] = pushed_out
    log["summary"] = movement_summary(log["reranked"], len(facts), len(up), len(down), kept, pushed_out)
    return log


def movement_summary(reranked: bool, total: int, up: int, down: int, kept: int, pushed_out: list[int]) -> str:
    if not total:
        return "no facts came back"
    if not reranked:
        return f"{total} facts in first-stage order (not reranked)"
    text = f"{total} facts reranked: {up} moved up, {down} moved down, {kept} kept their place"
    if pushed_out:
        places = ", ".join(f"#{rank}" for rank in pushed_out)
        text += f"; first-stage {places} pushed out"
    return text
