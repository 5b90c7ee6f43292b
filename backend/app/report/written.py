"""What the model writes, made fit to keep: the checks every written section passes.

The model cites short labels ("F3") for the facts tools showed it; here the labels become fact ids,
citations of facts no tool showed are removed, and a sentence left with no real citation goes with
them (protocol.py holds each step). A write whose JSON is broken (cut short, bare quotes, wrapped
twice) is parsed for its text; it never lands verbatim.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.report.grounding import stated_sources
from app.report.llm import parse_json_object
from app.report.protocol import (
    citations_before_the_stop, cite_copied_facts, cut_loops, looks_like_json_action, remove_unsupported_claims,
    resolve_labels, resolve_sources, salvage_write, tidy_pasted_results, unwrap_write, verify_citations,
)
from app.report.views import FactView


@dataclass(frozen=True)
class CheckedText:
    """A model's text after the checks, with what they took out."""
    content: str
    cited: list[str]
    removed_citations: list[str]
    removed_claims: list[str]
    loop_words: int
    unstated_sources: list[str]  # listed under "sources" but neither cited nor said in the text


def check_written(content: str, sources: Any, by_label: dict[str, str], known: dict[str, FactView]) -> CheckedText:
    """The model's text with its labels resolved and only the citations of facts in `known` kept."""
    content, sources = unwrap_write(content, sources)  # never the model's JSON as the section's text
    content, loop_words = cut_loops(content)
    content, unknown = resolve_labels(tidy_pasted_results(content), by_label)
    content = citations_before_the_stop(content)
    content = cite_copied_facts(content, known)  # after the labels: a labelled fact is cited already
    listed, unknown_listed = resolve_sources(sources, by_label)
    listed, unstated = stated_sources(content, listed, known)
    content, cited, removed = verify_citations(content, known, listed)
    content, removed_claims = remove_unsupported_claims(content)
    return CheckedText(content, cited, list(dict.fromkeys(unknown + unknown_listed + removed)), removed_claims,
                       loop_words, unstated)


def final_answer(text: str) -> tuple[tuple[str, Any] | None, str]:
    """((content, sources), "") from an answer that must be the section, or (None, what is wrong with it).
    Unlike a turn of the tool loop, prose is accepted here."""
    reply = parse_json_object(text)
    salvaged = salvage_write(text) if reply is None else None
    if salvaged is not None:  # cut short by max_tokens: the section so far
        return salvaged, ""
    if reply is None and looks_like_json_action(text):  # JSON that does not parse is no prose
        return None, "the final answer was broken JSON with no section text in it"
    content = reply.get("content") if reply is not None else text
    if isinstance(content, str) and content.strip():
        return (content.strip(), reply.get("sources") if reply is not None else None), ""
    return None, "the final answer held no section text"
