"""Every fact a tool showed the model in one report, under the short label the model reads.

The model reads and cites "F12" instead of a 36-character fact id (about 25 tokens less per citation,
and nothing to mistype); the agent turns labels back into ids before it checks a citation. A fact
keeps its label for the whole report, so a fact shown again in a later section is cited the same way.
"""

from __future__ import annotations

from app.report.views import UUID_PATTERN, FactView


class FactBook:
    def __init__(self) -> None:
        self.known: dict[str, FactView] = {}  # uuid -> the fact as a tool showed it
        self.labels: dict[str, str] = {}  # uuid -> "F1"
        self.by_label: dict[str, str] = {}  # "F1" -> uuid

    def show(self, facts: list[FactView]) -> dict[str, str]:
        """Record `facts` as shown; {label: uuid} of those shown for the first time."""
        new = {}
        for fact in facts:
            self.known.setdefault(fact.uuid, fact)
            if fact.uuid not in self.labels:
                label = f"F{len(self.labels) + 1}"
                self.labels[fact.uuid], self.by_label[label] = label, fact.uuid
                new[label] = fact.uuid
        return new

    def labels_of(self, uuids: list[str]) -> list[str]:
        return [self.labels[uuid] for uuid in uuids]

    def with_labels(self, text: str) -> str:
        """`text` with each fact id the model was shown replaced by its label."""
        return UUID_PATTERN.sub(lambda match: self.labels.get(match.group(0).lower(), match.group(0)), text)

    def longest_label_after(self, more: int) -> int:
        """How long a label gets once `more` facts have been shown."""
        return len(f"F{len(self.labels) + more}")
