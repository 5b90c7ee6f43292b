"""Validate and repair a model's answer that should be a permutation of 0..n-1.

Small models return near-permutations: an index twice, one past the end, a label instead of a
number, or half the list. Repair keeps the model's order for the valid indices (first occurrence
wins), drops duplicates and unknown entries, and appends the missing indices in their incoming
order, so the result is always a complete ranking. The report says what was wrong, with the fields
of the listwise contract's validation (`is_valid`, `missing`, `extra`, `out_of_range`) and two more:

- `is_valid`: the answer was a permutation as it stood (nothing below);
- `missing`: indices in 0..n-1 the answer never named (appended, in incoming order);
- `extra`: entries that are not one of the indices 0..n-1 (dropped): `out_of_range` + `not_indices`;
- `out_of_range`: integers outside 0..n-1;
- `not_indices`: entries that are not an index at all, e.g. "first", 1.5, null, true;
- `duplicates`: indices named again after their first occurrence (dropped).

Integral floats (3.0) and digit strings ("3") count as indices: they are unambiguous.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class PermutationReport:
    size: int
    missing: list[int] = field(default_factory=list)
    duplicates: list[int] = field(default_factory=list)
    out_of_range: list[int] = field(default_factory=list)
    not_indices: list[Any] = field(default_factory=list)

    @property
    def extra(self) -> list[Any]:
        """Every entry that is not one of the indices 0..n-1."""
        return [*self.out_of_range, *self.not_indices]

    @property
    def repairs(self) -> int:
        """How many entries had to be added or dropped."""
        return len(self.missing) + len(self.duplicates) + len(self.extra)

    @property
    def is_valid(self) -> bool:
        return self.repairs == 0

    valid = is_valid

    @property
    def named(self) -> int:
        """How many distinct valid indices the answer named."""
        return self.size - len(self.missing)

    def as_dict(self) -> dict[str, Any]:
        """JSON-safe; entries that are not integers are shown as their repr."""
        return {
            "is_valid": self.is_valid,
            "missing": list(self.missing),
            "extra": [item if isinstance(item, int) and not isinstance(item, bool) else repr(item)
                      for item in self.extra],
            "out_of_range": list(self.out_of_range),
            "duplicates": list(self.duplicates),
            "not_indices": [repr(item) for item in self.not_indices],
            "repairs": self.repairs,
        }


def as_index(item: Any) -> int | None:
    """The integer an answer entry stands for, or None when it is not an index."""
    if isinstance(item, bool):
        return None
    if isinstance(item, int):
        return item
    if isinstance(item, float) and item.is_integer():
        return int(item)
    if isinstance(item, str) and item.strip().lstrip("-").isdigit():
        return int(item.strip())
    return None


def repair_permutation(answer: list[Any], size: int) -> tuple[list[int], PermutationReport]:
    """A complete permutation of range(size) built from `answer`, and what had to be repaired."""
    report = PermutationReport(size=size)
    order: list[int] = []
    seen: set[int] = set()
    for item in answer:
        index = as_index(item)
        if index is None:
            report.not_indices.append(item)
        elif not 0 <= index < size:
            report.out_of_range.append(index)
        elif index in seen:
            report.duplicates.append(index)
        else:
            seen.add(index)
            order.append(index)
    report.missing = [index for index in range(size) if index not in seen]
    return order + report.missing, report
