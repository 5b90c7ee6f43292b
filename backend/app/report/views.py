"""How the report tools show facts and entities, and the character budget of their texts.

Every tool text has a budget. What does not fit is left out whole (never cut mid-line) and
counted, and the text ends with a note saying how much was left out, so the reader always knows
that more exists.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from app.graph.search import EdgeHit, NodeHit
from app.report.time_words import describe_validity

_NOTE_RESERVE = 200  # room kept for the truncation note itself
# Graphiti names facts with uuid4 strings; citations in model answers are found by this shape.
UUID_CHARS = 36
UUID_PATTERN = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.IGNORECASE)


@dataclass
class FactView:
    """One fact (edge) as the tools show it; score and ranks are set when a search found it."""

    uuid: str
    fact: str
    relation: str
    source: str | None
    target: str | None
    source_uuid: str
    target_uuid: str
    valid_at: str | None = None
    invalid_at: str | None = None
    expired_at: str | None = None
    created_at: str | None = None
    score: float | None = None
    rank: int | None = None
    first_stage_rank: int | None = None
    found_by: list[str] = field(default_factory=list)  # the (sub-)queries that found it
    from_neighbourhood: bool = False  # a fact of a top entity the first stage did not return (app/graph/search.py)

    @classmethod
    def from_hit(cls, hit: EdgeHit, query: str | None = None) -> "FactView":
        return cls(uuid=hit.uuid, fact=hit.fact, relation=hit.relation, source=hit.source, target=hit.target,
                   source_uuid=hit.source_uuid, target_uuid=hit.target_uuid, valid_at=hit.valid_at,
                   invalid_at=hit.invalid_at, expired_at=hit.expired_at, created_at=hit.created_at,
                   score=hit.score, rank=hit.rank, first_stage_rank=hit.first_stage_rank,
                   found_by=[query] if query else [], from_neighbourhood=hit.from_neighbourhood)

    @classmethod
    def from_row(cls, row: dict) -> "FactView":
        """A row of the graph's paged edge reads (graph.edges / graph.node)."""
        keys = ("uuid", "fact", "relation", "source", "target", "source_uuid", "target_uuid",
                "valid_at", "invalid_at", "expired_at", "created_at")
        return cls(**{key: row.get(key) for key in keys})

    @property
    def is_historical(self) -> bool:
        return bool(self.expired_at or self.invalid_at)

    @property
    def relation_chain(self) -> str:
        return f"{self.source or '?'} -[{self.relation}]-> {self.target or '?'}"

    def time_label(self) -> str:
        """Event time in words; the import date (created_at, expired_at) is never shown as an event."""
        return describe_validity(self.valid_at, self.invalid_at, self.expired_at)

    def line(self) -> str:
        """The fact as a model reads it: id, text and when it held. Who relates to whom is in the fact's
        own words, and score and ranks are in `to_dict()`: on the line they cost a small model's budget
        a third of the room (a chain and ranking of ~80 characters on a ~140-character fact) and
        told it nothing it cites."""
        return f"- [{self.uuid}] {self.fact} ({self.time_label()})"

    def to_dict(self) -> dict:
        return {**asdict(self), "historical": self.is_historical, "time_label": self.time_label()}


@dataclass
class EntityView:
    uuid: str
    name: str
    summary: str = ""
    labels: list[str] = field(default_factory=list)
    score: float | None = None
    rank: int | None = None
    first_stage_rank: int | None = None

    @classmethod
    def from_hit(cls, hit: NodeHit) -> "EntityView":
        return cls(uuid=hit.uuid, name=hit.name, summary=hit.summary or "", labels=list(hit.labels),
                   score=hit.score, rank=hit.rank, first_stage_rank=hit.first_stage_rank)

    @classmethod
    def from_row(cls, row: dict) -> "EntityView":
        return cls(uuid=row["uuid"], name=row.get("name") or "?", summary=row.get("summary") or "",
                   labels=list(row.get("labels") or []))

    def line(self) -> str:
        labels = f" ({', '.join(self.labels)})" if self.labels else ""
        summary = f": {self.summary}" if self.summary else ""
        return f"- {self.name}{labels}{summary}"  # score and ranks: to_dict(), as for facts

    def to_dict(self) -> dict:
        return asdict(self)


class BudgetedText:
    """Lines within `max_chars`; whole lines that do not fit are left out and counted per kind.

    `cap` limits how many characters one kind may use, so a long first section cannot crowd out
    the next one. Once a kind overflows, its later items are left out too (order is kept).
    """

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self._lines: list[str] = []
        self._used = 0
        self._used_by: dict[str, int] = {}
        self.left_out: dict[str, int] = {}

    def _fits(self, line: str) -> bool:
        return self._used + len(line) + 1 <= self.max_chars - _NOTE_RESERVE

    def header(self, line: str) -> None:
        if self._fits(line):
            self._lines.append(line)
            self._used += len(line) + 1

    def item(self, line: str, kind: str, cap: int | None = None) -> bool:
        used = self._used_by.get(kind, 0)
        over_cap = cap is not None and used + len(line) + 1 > cap
        if kind in self.left_out or over_cap or not self._fits(line):
            self.left_out[kind] = self.left_out.get(kind, 0) + 1
            return False
        self._lines.append(line)
        self._used += len(line) + 1
        self._used_by[kind] = used + len(line) + 1
        return True

    @property
    def truncated(self) -> bool:
        return bool(self.left_out)

    def text(self) -> str:
        lines = list(self._lines)
        if self.left_out:
            counts = ", ".join(f"{count} {kind}" for kind, count in self.left_out.items())
            lines.append(f"[truncated to stay within {self.max_chars} characters; left out: {counts}]")
        return "\n".join(lines)
