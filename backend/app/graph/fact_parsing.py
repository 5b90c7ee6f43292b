"""Facts given as data, checked before anything is written: `parse_fact` turns one JSON object into a
`FactInput` or raises `FactValidationError` naming its position and what is wrong (a 400, never a
half-done import). Limits keep every value storable: the database would reject some mid-import (NaN,
Infinity), clamp others silently (integers beyond 64 bits) or strip them (NUL).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

MAX_TEXT_CHARS = {"source": 256, "target": 256, "relation": 128, "fact": 4000,
                  "source_summary": 2000, "target_summary": 2000}
MAX_LABELS = 8
_LABEL = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
_METADATA_KEY = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
_RESERVED_KEYS = {"uuid", "name", "fact", "group_id", "episodes", "created_at", "expired_at", "valid_at",
                  "invalid_at", "reference_time", "fact_embedding", "source_node_uuid", "target_node_uuid"}


class FactValidationError(ValueError):
    """One fact is malformed; `position` is its 1-based index (or line number in a JSONL upload)."""

    def __init__(self, position: int, message: str, unit: str = "fact"):
        super().__init__(f"{unit} {position}: {message}")
        self.position = position


@dataclass
class FactInput:
    source: str
    target: str
    relation: str
    fact: str
    source_summary: str = ""
    target_summary: str = ""
    source_labels: list[str] = field(default_factory=list)
    target_labels: list[str] = field(default_factory=list)
    valid_at: datetime | None = None
    invalid_at: datetime | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


def _text(item: dict, key: str, required: bool) -> str:
    value = item.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"'{key}' must be a string" if value is not None else f"'{key}' is required")
    if required and not value.strip():
        raise ValueError(f"'{key}' must not be empty")
    if len(value) > MAX_TEXT_CHARS[key]:
        raise ValueError(f"'{key}' is longer than {MAX_TEXT_CHARS[key]} characters")
    if "\x00" in value:
        raise ValueError(f"'{key}' contains a NUL character")
    return value.strip() if key in ("source", "target", "relation") else value


def _labels(item: dict, key: str) -> list[str]:
    value = item.get(key) or []
    if not isinstance(value, list) or len(value) > MAX_LABELS:
        raise ValueError(f"'{key}' must be a list of at most {MAX_LABELS} labels")
    for label in value:
        if not isinstance(label, str) or not _LABEL.fullmatch(label):
            raise ValueError(f"'{key}' entries must be identifiers like 'Person' (got {label!r})")
    return list(dict.fromkeys(value))


def _time(item: dict, key: str) -> datetime | None:
    value = item.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"'{key}' must be an ISO-8601 string")
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"'{key}' is not ISO-8601: {value!r}") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def _metadata(item: dict) -> dict[str, Any]:
    value = item.get("metadata") or {}
    if not isinstance(value, dict) or len(value) > 16:
        raise ValueError("'metadata' must be an object with at most 16 keys")
    for key, entry in value.items():
        if not _METADATA_KEY.fullmatch(key) or key in _RESERVED_KEYS:
            raise ValueError(f"metadata key {key!r} must be lower_snake_case and not a reserved name")
        if not isinstance(entry, (str, int, float, bool)) or (isinstance(entry, str) and len(entry) > 512):
            raise ValueError(f"metadata value for {key!r} must be a short string, number or boolean")
        _check_storable(key, entry)
    return dict(value)


def _check_storable(key: str, entry: Any) -> None:
    """Values the database would reject mid-import (NaN, Infinity: JSON bodies may carry them),
    clamp silently (integers beyond 64 bits) or strip (NUL) are refused up front."""
    if isinstance(entry, float) and not math.isfinite(entry):
        raise ValueError(f"metadata value for {key!r} must be a finite number")
    if isinstance(entry, int) and not isinstance(entry, bool) and not -(2**63) <= entry < 2**63:
        raise ValueError(f"metadata value for {key!r} does not fit in 64 bits")
    if isinstance(entry, str) and "\x00" in entry:
        raise ValueError(f"metadata value for {key!r} contains a NUL character")


def parse_fact(item: Any, position: int, unit: str = "fact") -> FactInput:
    if not isinstance(item, dict):
        raise FactValidationError(position, "must be a JSON object", unit)
    try:
        fact = FactInput(
            source=_text(item, "source", True),
            target=_text(item, "target", True),
            relation=_text(item, "relation", True),
            fact=_text(item, "fact", True),
            source_summary=_text(item, "source_summary", False),
            target_summary=_text(item, "target_summary", False),
            source_labels=_labels(item, "source_labels"),
            target_labels=_labels(item, "target_labels"),
            valid_at=_time(item, "valid_at"),
            invalid_at=_time(item, "invalid_at"),
            metadata=_metadata(item),
        )
    except ValueError as error:
        raise FactValidationError(position, str(error), unit) from None
    if fact.valid_at and fact.invalid_at and fact.invalid_at < fact.valid_at:
        raise FactValidationError(position, "'invalid_at' is before 'valid_at'", unit)
    return fact


def parse_facts(items: Any) -> list[FactInput]:
    if not isinstance(items, list) or not items:
        raise ValueError("'facts' must be a non-empty list")
    return [parse_fact(item, position) for position, item in enumerate(items, start=1)]
