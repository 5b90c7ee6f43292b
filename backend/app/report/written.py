"""What the model writes, made fit to keep: the checks every written section passes.

The model cites short labels ("F3") for the facts tools showed it; here the labels become fact ids,
citations of facts no tool showed are removed, and a sentence left with no real citation goes with
them (protocol.py holds each step). In a text that cites inline, a sentence citing nothing goes too,
unless it says what the graph does not tell; a sentence the text already said is said once. A write
whose JSON is broken (cut short, bare quotes, wrapped twice) is parsed for its text, without the
sentence max_tokens cut it in; it never lands verbatim.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from app.report.grounding import stated_sources, states
from app.report.llm import parse_json_object
from app.report.protocol import (
    citations_before_the_stop, cite_copied_facts, cut_loops, drop_sentences, looks_like_json_action,
    remove_unsupported_claims, resolve_labels, resolve_sources, salvage_write, tidy_pasted_results, unwrap_write,
    verify_citations,
)
from app.report.views import UUID_PATTERN, FactView


@dataclass(frozen=True)
class CheckedText:
    """A model's text after the checks, with what they took out."""
    content: str
    cited: list[str]
    removed_citations: list[str]
    removed_claims: list[str]
    loop_words: int
    repeated_sentences: int  # copies of a sentence the text already said, taken out
    unstated_sources: list[str]  # listed under "sources" but neither cited nor said in the text


def check_written(content: str, sources: Any, by_label: dict[str, str], known: dict[str, FactView]) -> CheckedText:
    """The model's text with its labels resolved and only the citations of facts in `known` kept."""
    content, sources = unwrap_write(content, sources)  # never the model's JSON as the section's text
    content, loop_words = cut_loops(content)
    content, repeated = without_repeated_sentences(content)
    content, unknown = resolve_labels(tidy_pasted_results(content), by_label)
    content = citations_before_the_stop(content)
    content = cite_copied_facts(content, known)  # after the labels: a labelled fact is cited already
    listed, unknown_listed = resolve_sources(sources, by_label)
    listed, unstated = stated_sources(content, listed, known)
    content, cited, removed = verify_citations(content, known, listed)
    content, removed_claims = remove_unsupported_claims(content)
    content, uncited = without_uncited_claims(content, [known[uuid].fact for uuid in cited if uuid not in content])
    return CheckedText(content, cited, list(dict.fromkeys(unknown + unknown_listed + removed)),
                       removed_claims + uncited, loop_words, len(repeated), unstated)


# A sentence that says what the graph does not tell ("The graph does not say who paid.") cites
# nothing by nature, and the prompt asks for it: a negation with a word about what is known or said.
_SAYS_WHAT_IS_NOT_KNOWN = re.compile(
    r"(?=.*\b(?:not|no|nothing|none|neither|nor)\b)(?=.*\b(?:graph|facts?|known|information|records?|says?|said|"
    r"tells?|told|mentions?|mentioned|states?|stated|shows?|shown|unclear|clear)\b)", re.IGNORECASE)


def without_uncited_claims(content: str, listed_facts: list[str]) -> tuple[str, list[str]]:
    """(`content` without the sentences that cite no fact, those sentences), for a text that cites
    inline: there the model showed where its citations go, and a sentence without one rests on
    nothing the graph holds (real runs: "Erik Halvorsen was also arrested", a storm that "caused
    PFAS to enter Well 4", a pasted "(valid from 2 May 2025; still true)", half a sentence). A
    heading stays, and so does a sentence saying what the graph does not tell or stating one of
    `listed_facts` (cited only under "sources"). A text citing only under "sources" is left as it is:
    a paraphrase there may share few words with its fact."""
    if not UUID_PATTERN.search(content):
        return content, []

    def uncited(sentence: str) -> bool:
        text = sentence.strip()
        return bool(text) and not text.startswith("#") and not UUID_PATTERN.search(text) \
            and not _SAYS_WHAT_IS_NOT_KNOWN.match(text) and not any(states(text, fact) for fact in listed_facts)

    return drop_sentences(content, uncited)


# Shorter sentences ("Yes.", "See below.") may come back on purpose; a loop repeats whole claims.
MIN_REPEATED_WORDS = 4


def without_repeated_sentences(content: str) -> tuple[str, list[str]]:
    """(`content` with each sentence it already said taken out, the copies taken out). A loop whose
    stretch is longer than cut_loops looks for (a real run: five sentences, 181 words, four and a
    half times over) or not in a row still says each of its sentences once."""
    said: set[str] = set()

    def said_before(sentence: str) -> bool:
        key = " ".join(sentence.split())
        if len(key.split()) < MIN_REPEATED_WORDS:
            return False
        seen = key in said
        said.add(key)
        return seen

    return drop_sentences(content, said_before)


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
