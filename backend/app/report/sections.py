"""A report section: the draft the agent fills in, and how it lands in the report.

The draft carries what the section's turns did (tool calls, facts shown, what the checks took out)
alongside its text, so the report's metadata and summary say per section how it was written.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from app.report.protocol import drop_uncited_section
from app.report.views import FactView


@dataclass
class SectionDraft:
    index: int
    title: str
    goal: str
    content: str = ""
    written_by: str = "model"  # "model" | "fallback"
    part: str = ""
    tool_hint: str | None = None
    tool_calls: int = 0
    invalid_calls: int = 0
    repeated_queries: int = 0
    nudged: bool = False
    reminded_to_cite: bool = False  # a draft citing nothing was sent back once to be written with labels
    tools_used: list[str] = field(default_factory=list)
    shown: set[str] = field(default_factory=set)  # facts the section's conversation holds
    evidence: list[list[str]] = field(default_factory=list)  # per tool result, shown facts within a page, best first
    completed: list[str] = field(default_factory=list)  # facts cited by sentences added after writing
    listed: list[str] = field(default_factory=list)  # best judged facts the text left out, listed beneath it
    off_question: list[str] = field(default_factory=list)  # citations taken out: under the floor for its question
    judged_without_names: str | None = None  # the question without its names, when the floor judged that too
    cited: list[str] = field(default_factory=list)
    removed_citations: list[str] = field(default_factory=list)
    removed_claims: list[str] = field(default_factory=list)


def note_if_uncited(draft: SectionDraft) -> None:
    """A section left citing nothing (nothing the tools showed supports any of it) becomes a note."""
    if not draft.cited and draft.content:
        draft.content, uncited = drop_uncited_section(draft.content)
        draft.removed_claims += uncited


def section_markdown(draft: SectionDraft, known: dict[str, FactView]) -> str:
    """The section as the report shows it: heading, text, the facts listed beneath it, and the facts the
    text cites, each with its time."""
    lines = [f"## {draft.index}. {draft.title}", "", draft.content]
    if draft.listed:
        lines += ["", "Also found for this question:"]
        lines += [f"- {known[uuid].fact} ({known[uuid].time_label()}) [{uuid}]" for uuid in draft.listed]
    sources = [uuid for uuid in draft.cited if uuid not in draft.listed]
    if sources:
        lines += ["", "Sources:"]
        lines += [f"- [{uuid}] {known[uuid].fact} ({known[uuid].time_label()})" for uuid in sources]
    return "\n".join(lines) + "\n"


def report_markdown(title: str, requirement: str, section_bodies: list[str]) -> str:
    """The whole report: its title, the requirement, then each section as `section_markdown` rendered it."""
    body = "\n".join(section_bodies)
    return f"# {title}\n\n> Requirement: {requirement}\n\n{body}"


def section_entry(draft: SectionDraft, file: str) -> dict[str, Any]:
    """What the report's metadata keeps of a section."""
    return {"index": draft.index, "title": draft.title, "part": draft.part, "file": file,
            "written_by": draft.written_by, "tool_calls": draft.tool_calls, "tools_used": draft.tools_used,
            "tool_hint": draft.tool_hint, "nudged": draft.nudged, "reminded_to_cite": draft.reminded_to_cite,
            "invalid_calls": draft.invalid_calls, "repeated_queries": draft.repeated_queries,
            "cited": draft.cited, "completed": draft.completed, "listed": draft.listed,
            "off_question": draft.off_question, "judged_without_names": draft.judged_without_names,
            "removed_citations": draft.removed_citations, "removed_claims": draft.removed_claims}


def section_totals(sections: list[SectionDraft]) -> dict[str, Any]:
    """The report summary's figures that add up over its sections."""
    return {
        "sections": len(sections),
        "sections_by_model": sum(1 for d in sections if d.written_by == "model"),
        "tool_calls_by_tool": dict(Counter(tool for d in sections for tool in d.tools_used)),
        "nudged_sections": sum(1 for d in sections if d.nudged),
        "reminded_to_cite": sum(1 for d in sections if d.reminded_to_cite),
        "citations": sum(len(d.cited) for d in sections),
        "removed_citations": sum(len(d.removed_citations) for d in sections),
        "removed_claims": sum(len(d.removed_claims) for d in sections),
    }
