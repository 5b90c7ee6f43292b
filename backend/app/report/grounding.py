"""Whether a text says what a fact says, judged by the words they share.

Two questions, two directions. A sentence the agent adds is held to its facts: most of the
sentence's words must be theirs, or the model copied an example or put one fact's id on another's
words. A fact the model only lists under "sources" is held to the text: most of the fact's words
must be in one of the text's sentences, or the model listed it without using it (the 1.5B often
lists every id it was shown, planted distractors included).
"""

from __future__ import annotations

import re

from app.report.planning import content_words, stem
from app.report.protocol import sentences_of
from app.report.views import UUID_PATTERN, FactView

_WORD = re.compile(r"[a-z0-9]+")
GROUNDED_SHARE = 0.6  # of an added sentence's words, at least this share must be words of the facts it cites
# Of a listed fact's content words (stop words out, plurals folded), at least two thirds must be in
# one sentence of the text. On the sample reports, listed facts that only share a subject with a
# sentence ("The Port Alder Water Authority ...") reached 0.50-0.62 of their content words; sentences
# that state the fact in other words reached 0.67-0.88.
STATED_SHARE = 2 / 3


def _content(text: str) -> list[str]:
    return [stem(word) for word in content_words(UUID_PATTERN.sub(" ", text))]


def words(text: str) -> tuple[str, ...]:
    """The text's lower-case words, fact ids left out."""
    return tuple(_WORD.findall(UUID_PATTERN.sub(" ", text.lower())))


def grounded(sentence: str, facts: list[str]) -> bool:
    """Whether at least GROUNDED_SHARE of the sentence's words are words of `facts`."""
    said = words(sentence)
    theirs = {word for fact in facts for word in words(fact)}
    return bool(said) and sum(word in theirs for word in said) >= GROUNDED_SHARE * len(said)


def states(text: str, fact: str) -> bool:
    """Whether one sentence of `text` holds at least STATED_SHARE of the fact's content words."""
    wanted = _content(fact)
    if not wanted:
        return False
    for sentence in sentences_of(text):
        present = set(_content(sentence))
        if sum(word in present for word in wanted) >= STATED_SHARE * len(wanted) - 1e-9:
            return True
    return False


def stated_sources(content: str, listed: list[str], known: dict[str, FactView]) -> tuple[list[str], list[str]]:
    """(the listed ids to check as citations, the known ones the text neither cites nor states).

    Only a text that cites inline is held to its list: the model showed where its citations go, and
    the rest of the list is what it saw. A text with no inline citation has only the list to go by
    (a paraphrase may share few words with its fact), so the list stands. Unknown ids stay in the
    first list so that the citation check reports them as removed."""
    written = {uuid.lower() for uuid in UUID_PATTERN.findall(content)}
    if not written:
        return list(listed), []
    kept, unstated = [], []
    for uuid in listed:
        used = uuid not in known or uuid in written or states(content, known[uuid].fact)
        (kept if used else unstated).append(uuid)
    return kept, unstated
