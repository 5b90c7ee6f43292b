"""Reading the strategies' JSON answers. Defensive, like score_parsing: <think> blocks and markdown
fences are dropped, a JSON object embedded in prose is found, and (lenient, `repair=True`) near-miss
rankings and selections are repaired (counted) rather than rejected. Strict callers pass
`repair=False`: a ranking or selection that would need a repair raises RerankParseError, as does an
answer with nothing usable."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from graphiti_llm_rerank.permutation import PermutationReport, repair_permutation
from graphiti_llm_rerank.score_parsing import strip_reasoning
from graphiti_llm_rerank.strategies.strategy_prompts import PAIR_LABELS
from graphiti_llm_rerank.types import RerankParseError

_OBJECT = re.compile(r"\{.*\}", re.DOTALL)
_LIST_KEYS = ("reranked_indices", "ranking", "indices", "order")
_SELECT_KEYS = ("selected_indices", "selected", "indices")
_PAIR_KEYS = ("more_relevant", "answer", "winner")
_PASSAGE_LABEL = re.compile(r"\bpassage\s+([AB])\b", re.IGNORECASE)


def _excerpt(text: str) -> str:
    return text if len(text) <= 120 else text[:117] + "..."


def load_answer(text: str) -> Any:
    """The JSON value of an answer, or RerankParseError."""
    cleaned = strip_reasoning(text or "")
    for candidate in (cleaned, *(m.group(0) for m in [_OBJECT.search(cleaned)] if m)):
        try:
            return json.loads(candidate)
        except (ValueError, RecursionError):
            continue
    raise RerankParseError(f"the model's answer is not JSON: {_excerpt(text or '')!r}")


def _list_under(value: Any, keys: tuple[str, ...], what: str, text: str) -> list:
    if isinstance(value, list):
        return value
    if isinstance(value, dict):
        lowered = {str(key).lower(): item for key, item in value.items()}
        for key in keys:
            if isinstance(lowered.get(key), list):
                return lowered[key]
    raise RerankParseError(f"the model's answer has no {what} list: {_excerpt(text)!r}")


@dataclass
class ListAnswer:
    order: list[int]
    report: PermutationReport | None  # None: the unit fell back to the incoming order
    rejected: bool = False
    rejection_reason: str | None = None


def _unrepaired(report: PermutationReport, what: str, text: str) -> RerankParseError:
    return RerankParseError(
        f"the model's {what} needs repairs ({_problems(report)}) and strict mode does not repair: {_excerpt(text)!r}"
    )


def _problems(report: PermutationReport) -> str:
    named = {"missing": report.missing, "duplicates": report.duplicates, "out of range": report.out_of_range,
             "not an index": [repr(item) for item in report.not_indices]}
    return "; ".join(f"{label} {values}" for label, values in named.items() if values)


def listwise_answer(text: str, size: int, *, repair: bool = True) -> ListAnswer:
    """A complete order from {"reranked_indices": [...], "is_rejected": bool, "rejection_reason": str}."""
    value = load_answer(text)
    rejected = isinstance(value, dict) and value.get("is_rejected") is True
    reason = value.get("rejection_reason") if isinstance(value, dict) else None
    try:
        raw = _list_under(value, _LIST_KEYS, "reranked_indices", text)
    except RerankParseError:
        if not rejected:
            raise
        raw = []
    if rejected and raw:  # the contract: a rejection comes with an empty list, anything else contradicts it
        raise RerankParseError(f"the model's answer rejects every passage yet ranks some: {_excerpt(text)!r}")
    order, report = repair_permutation(raw, size)
    if report.named == 0 and size > 1 and not rejected:
        raise RerankParseError(f"the model's ranking names no valid passage index: {_excerpt(text)!r}")
    if not repair and not rejected and not report.valid:
        raise _unrepaired(report, "ranking", text)
    return ListAnswer(order, report, rejected, reason if isinstance(reason, str) and reason.strip() else None)


def selection_answer(text: str, size: int, select: int, *, repair: bool = True) -> tuple[list[int], int]:
    """Exactly `select` distinct positions from {"selected_indices": [...]}, and the repairs needed.

    Too few named: filled up in incoming order; too many: the first `select` are kept (lenient only)."""
    raw = _list_under(load_answer(text), _SELECT_KEYS, "selected_indices", text)
    order, report = repair_permutation(raw, size)
    if report.named == 0:
        raise RerankParseError(f"the model's selection names no valid passage index: {_excerpt(text)!r}")
    repairs = len(report.duplicates) + len(report.extra) + abs(report.named - select)
    if not repair and repairs:
        raise RerankParseError(f"the model's selection names {report.named} valid distinct indices where {select} "
                               f"were asked ({_problems(report) or 'count differs'}) and strict mode does not "
                               f"repair: {_excerpt(text)!r}")
    return order[:select], repairs


def pairwise_answer(text: str) -> str:
    """'A' or 'B' from {"more_relevant": "A"} (or a bare label / "Passage B" in prose)."""
    cleaned = strip_reasoning(text or "")
    try:
        value = json.loads(cleaned)
    except (ValueError, RecursionError):
        value = cleaned
    if isinstance(value, dict):
        lowered = {str(key).lower(): item for key, item in value.items()}
        value = next((lowered[key] for key in _PAIR_KEYS if key in lowered), None)
    if isinstance(value, str):
        bare = value.strip().strip("'\".:() ").upper()
        if bare in PAIR_LABELS:
            return bare
        match = _PASSAGE_LABEL.search(value)
        if match:
            return match.group(1).upper()
    raise RerankParseError(f"the model's answer names neither A nor B: {_excerpt(text or '')!r}")
