"""Holding a written section's citations to its own question.

A small writer cites what it was shown, and a follow-up search on a name shows that name's other
facts too: the reporter's journalism prize next to his interview, the club's floodlights next to the
council's repair budget. With a reranker, the section's question judges every fact the section
cites; a fact it scores under REPORT_CITATION_FLOOR loses its citation, and a sentence that cited
only such facts goes with it. The floor is an absolute score, not a share of the best: gold the
judge ranks low for its section (a flood for "what caused the crisis", 0.07-0.08 of the best
score) is still far above it, while the planted facts cited in the session 8-10 sample reports
scored 0.006-0.013 for their section.
"""

from __future__ import annotations

import re

from app.report.protocol import drop_sentences
from app.report.views import UUID_PATTERN

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


def _cut(sentence: str, dropped: set[str]) -> str:
    if not {uuid.lower() for uuid in UUID_PATTERN.findall(sentence)} & dropped:
        return sentence  # nothing of its own to tidy
    sentence = UUID_PATTERN.sub(lambda match: "" if match.group(0).lower() in dropped else match.group(0), sentence)
    for pattern, replacement in _LEFTOVERS:
        sentence = pattern.sub(replacement, sentence)
    return sentence
