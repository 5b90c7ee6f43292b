"""Holding a written section's citations to its own question.

A small writer cites what it was shown, and a follow-up search on a name shows that name's other
facts too: the reporter's journalism prize next to his interview, the club's floodlights next to the
council's repair budget. With a reranker, the section's question judges every fact the section
cites; a fact it scores under REPORT_CITATION_FLOOR loses its citation, and a sentence that cited
only such facts goes with it. The floor is an absolute score, not a share of the best: gold the
judge ranks low for its section (a flood for "what caused the crisis", 0.07-0.08 of the best
score) is still far above it, while the planted facts cited in the sample reports
scored 0.006-0.013 for their section.

A planted fact that shares only a name with the question passes that floor: the 1.5B judge reads
"What part did the Lindgren Dairy Farm play in the outbreak" and "The Lindgren Dairy Farm's milk goes
to the regional dairy cooperative" as related (0.059, three times the floor). With the names taken out
("What part did it play in the outbreak") the same judge scores that fact 0.013 and the farm's cheese
0.007, while the gold it had listed or the text cited kept 0.03 and more (replays of nine
sample reports). So, with REPORT_FLOOR_WITHOUT_NAMES, a fact must clear the floor for the question as asked
and for the question without its names; the order stays the question's own.
"""

from __future__ import annotations

import re

from app.report.planning import content_words
from app.report.protocol import drop_sentences
from app.report.time_words import MONTHS
from app.report.tools import FactJudgement
from app.report.views import UUID_PATTERN

# A name: capitalised words (with "St."-like abbreviations, numbers and a possessive), "the" before
# them included: "St. Brigid's Hospital", "the Lindgren Dairy Farm", "Well 4". Acronyms such as PFAS
# and "E. coli" are what a question is about, not who, so they stay.
_NAME = re.compile(r"\b(?:the\s+)?[A-Z][a-z][\w.\-]*(?:'s)?(?:\s+(?:[A-Z][a-z][\w.\-]*|[A-Z]\.|\d+)(?:'s)?)*")
_NOT_NAMES = frozenset(month.lower() for month in MONTHS) | frozenset(
    "monday tuesday wednesday thursday friday saturday sunday".split())
MIN_WORDS_WITHOUT_NAMES = 2  # fewer ("Who is it") leaves the judge nothing to read but the pronoun

# What a dropped id leaves in a bracket of citations: "[, b]", "[a, ]", "[a, , b]" or "[]".
_LEFTOVERS = ((re.compile(r"\[\s*,\s*"), "["), (re.compile(r"\s*,\s*\]"), "]"),
              (re.compile(r",\s*,"), ","), (re.compile(r"\s?\[\s*\]"), ""))


def without_citations(content: str, dropped: set[str]) -> tuple[str, list[str]]:
    """(`content` without its citations of `dropped`, the sentences removed because every fact they
    cited was dropped). A sentence that keeps one citation stays."""
    def cites_only_dropped(sentence: str) -> bool:
        cited = {uuid.lower() for uuid in UUID_PATTERN.findall(sentence)}
        return bool(cited) and cited <= dropped

    return drop_sentences(content, cites_only_dropped, edit=lambda sentence: _cut(sentence, dropped))


def without_names(question: str) -> str | None:
    """`question` with each name replaced by "it" ("its" for a possessive); None when it names no one
    or what is left has fewer than MIN_WORDS_WITHOUT_NAMES content words. The first word is left as it
    is: a question's capital says nothing."""
    first, space, rest = question.strip().partition(" ")

    def pronoun(match: re.Match) -> str:
        words = match.group(0).split()
        if words[1 if words[0] == "the" else 0].lower() in _NOT_NAMES:  # "March 2025" is a time, not a name
            return match.group(0)
        return "its" if match.group(0).endswith("'s") else "it"

    plain = first + space + _NAME.sub(pronoun, rest)
    if plain == question.strip() or len(content_words(plain)) < MIN_WORDS_WITHOUT_NAMES:
        return None
    return plain


def lower_of(as_asked: FactJudgement, without: FactJudgement | None) -> FactJudgement:
    """`as_asked`'s order with each fact's lower score of the two judgements (a fact one of them did not
    score keeps the other's): under the floor for either is under the floor."""
    if without is None:
        return as_asked
    scores = {uuid: min(score, without.scores.get(uuid, score)) for uuid, score in as_asked.scores.items()}
    return FactJudgement(as_asked.best_first, scores | {
        uuid: score for uuid, score in without.scores.items() if uuid not in scores})


def _cut(sentence: str, dropped: set[str]) -> str:
    if not {uuid.lower() for uuid in UUID_PATTERN.findall(sentence)} & dropped:
        return sentence  # nothing of its own to tidy
    sentence = UUID_PATTERN.sub(lambda match: "" if match.group(0).lower() in dropped else match.group(0), sentence)
    for pattern, replacement in _LEFTOVERS:
        sentence = pattern.sub(replacement, sentence)
    return sentence
