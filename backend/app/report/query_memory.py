"""What the agent already asked in this report, so a repeated query costs no search.

Two calls are the same question when they use the same tool and their query text has the same
content words (case, word order, punctuation, stop words and plural endings aside): "causes of the
crisis" and "the crisis causes" are one query. A repeat is answered from memory and the model is
told so; the step log counts it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.report.planning import content_words, stem
from app.report.tool_registry import TOOLS

def query_text(tool: str, arguments: dict[str, Any]) -> str:
    return TOOLS[tool].asked(arguments)


def query_key(tool: str, arguments: dict[str, Any]) -> str:
    """The tool and its query's content words, stemmed and sorted: equal keys ask the same thing."""
    text = query_text(tool, arguments)
    words = sorted({stem(word) for word in content_words(text)}) or [text.casefold()]
    return f"{tool}:" + " ".join(words)


def _plain(text: str) -> str:
    """Case and spacing aside: what "the identical query" means in the counts."""
    return " ".join(text.split()).casefold()


@dataclass
class Asked:
    tool: str
    query: str
    section: int
    call: int  # the section's tool call that asked it (1-based)
    text: str  # what the model was shown


@dataclass
class QueryMemory:
    asked: dict[str, Asked] = field(default_factory=dict)
    repeats: list[dict] = field(default_factory=list)

    def recall(self, tool: str, arguments: dict[str, Any]) -> Asked | None:
        return self.asked.get(query_key(tool, arguments))

    def remember(self, tool: str, arguments: dict[str, Any], section: int, call: int, text: str) -> None:
        self.asked.setdefault(query_key(tool, arguments), Asked(tool, query_text(tool, arguments), section, call,
                                                                text))

    def note_repeat(self, tool: str, arguments: dict[str, Any], earlier: Asked, section: int) -> None:
        query = query_text(tool, arguments)
        self.repeats.append({"tool": tool, "query": query, "earlier_query": earlier.query,
                             "identical": _plain(query) == _plain(earlier.query),
                             "earlier_section": earlier.section, "section": section})

    def queries(self) -> list[str]:
        """Every distinct query asked so far, oldest first, as 'tool: text'."""
        return [f"{asked.tool}: {asked.query}" for asked in self.asked.values()]
