"""What the report agent accepts from the model: one JSON action per turn, and citations of
facts that a tool really showed it."""

from __future__ import annotations

import json
import re
from typing import Any, Callable

from app.report.llm import parse_json_object
from app.report.views import UUID_PATTERN, FactView

REMOVED_CITATION = "unverified citation removed"


class InvalidCall(ValueError):
    pass


def parse_action(reply: dict[str, Any]) -> tuple[str, Any, Any]:
    """('write', content, sources) or ('tool', name, arguments); InvalidCall says what is wrong."""
    action = str(reply.get("action") or "").strip().lower()
    if action == "write" or (not action and "content" in reply):
        content = reply.get("content")
        if not isinstance(content, str) or not content.strip():
            raise InvalidCall("'content' must be the section as non-empty markdown text")
        return "write", content.strip(), reply.get("sources")
    if action == "tool" or (not action and "tool" in reply):
        tool = reply.get("tool")
        if not isinstance(tool, str) or not tool.strip():
            raise InvalidCall("'tool' must be the name of a tool")
        return "tool", tool.strip(), reply.get("arguments")
    raise InvalidCall('the JSON object needs "action": "tool" (with "tool" and "arguments") or "write" '
                      '(with "content")')


def listed_ids(sources: Any) -> list[str]:
    """Fact ids from a 'sources' field: a list (or one string) of ids, brackets and text tolerated."""
    items = [sources] if isinstance(sources, str) else sources if isinstance(sources, list) else []
    return [match.lower() for item in items if isinstance(item, str) for match in UUID_PATTERN.findall(item)]


def verify_citations(content: str, known: dict[str, FactView],
                     sources: Any = None) -> tuple[str, list[str], list[str]]:
    """(content with unknown fact ids removed, cited known ids, removed ids), ids in order of use:
    first those written in the text, then those only listed in `sources`."""
    cited: list[str] = []
    removed: list[str] = []

    def check(match) -> str:
        uuid = match.group(0).lower()
        if uuid in known:
            cited.append(uuid)
            return match.group(0)
        removed.append(uuid)
        return REMOVED_CITATION

    content = UUID_PATTERN.sub(check, content)
    for uuid in listed_ids(sources):
        (cited if uuid in known else removed).append(uuid)
    return content, list(dict.fromkeys(cited)), list(dict.fromkeys(removed))


# Sentence ends, but not after an initial or a short title ("E. coli", "St. Brigid's", "Dr. Nwosu").
_SENTENCE_END = re.compile(r"(?<=[.!?])(?<!\b[A-Z]\.)(?<!\b[A-Z][a-z]\.)\s+")


def remove_unsupported_claims(content: str) -> tuple[str, list[str]]:
    """Drop each sentence whose every citation was removed: it claims support that no tool showed.

    A sentence that keeps one real citation stays (with the removal marked); a sentence without
    any citation stays too, since the model may list its sources only under "sources".
    """
    return drop_sentences(content, lambda sentence: REMOVED_CITATION in sentence
                          and not UUID_PATTERN.search(sentence))


def drop_sentences(content: str, drop: Callable[[str], bool],
                   edit: Callable[[str], str] = lambda sentence: sentence) -> tuple[str, list[str]]:
    """(`content` without the sentences `drop` picks and the others passed through `edit`, the
    sentences dropped, stripped). Line breaks stay."""
    removed: list[str] = []
    lines = []
    for line in content.split("\n"):
        kept = []
        for sentence in _SENTENCE_END.split(line):
            if drop(sentence):
                removed.append(sentence.strip())
            else:
                kept.append(edit(sentence))
        lines.append(" ".join(kept))
    return "\n".join(lines).strip(), removed


# A small model sometimes falls into a loop and repeats a stretch of text until max_tokens (a real
# run: the InsightForge entity list, 330 characters, 12 times over). Three copies in a row are a loop.
LOOP_COPIES = 3
LOOP_MAX_WORDS = 150


def cut_loops(content: str) -> tuple[str, int]:
    """Each stretch of words repeated LOOP_COPIES or more times in a row kept once, with a copy cut
    short at the end (where max_tokens stopped the loop); (text, words cut). Line breaks stay."""
    lines, cut = [], 0
    for line in content.split("\n"):
        words = line.split(" ")
        kept: list[str] = []
        i = 0
        while i < len(words):
            period = _loop_period(words, i)
            if period:
                end = i + period
                while words[end:end + period] == words[i:i + period]:
                    end += period
                while end < len(words) and words[end] == words[i + (end - i) % period]:
                    end += 1  # the last copy, cut short
                kept += words[i:i + period]
                cut += end - i - period
                i = end
            else:
                kept.append(words[i])
                i += 1
        lines.append(" ".join(kept))
    return "\n".join(lines), cut


def _loop_period(words: list[str], start: int) -> int:
    """The shortest stretch starting at `start` that follows itself LOOP_COPIES times, or 0."""
    longest = min(LOOP_MAX_WORDS, (len(words) - start) // LOOP_COPIES)
    for period in range(2, longest + 1):
        if words[start + period] == words[start] and all(
                words[start + copy * period:start + (copy + 1) * period] == words[start:start + period]
                for copy in range(1, LOOP_COPIES)):
            return period
    return 0


# Short fact labels: the model reads [F12] instead of a 36-character uuid (about 25 tokens less per
# citation, and nothing to mistype); the agent turns them back into uuids before checking citations.
LABEL_PATTERN = re.compile(r"\bF(\d{1,5})\b")
_LABEL_GROUP = re.compile(r"\[\s*(F\d{1,5}(?:\s*[,;]\s*F\d{1,5})*)\s*\]", re.IGNORECASE)
_CONTENT_START = re.compile(r'"content"\s*:\s*"')
_JSON_STRING_BODY = re.compile(r'(?:[^"\\]|\\.)*', re.DOTALL)
# Where the content string of a write ends: before the "sources" field, or at the object's last brace.
_BEFORE_SOURCES = re.compile(r'"\s*,\s*"sources"\s*:')
_BEFORE_LAST_BRACE = re.compile(r'"\s*\}[^"]*$')
_UNESCAPED_QUOTE = re.compile(r'(?<!\\)"')
# A JSON action the model meant to send: '{"action": ...', "{'content': ..." and the like.
_JSON_ACTION = re.compile(r'\{\s*["\']?(?:action|content|tool|sources)["\']?\s*:')


# Tool-result text a small model copies into its section: a fact line with its time in brackets
# ("(valid from 9 March 2025; no longer true (when it ended is not known))"), a relation chain in
# brackets, the truncation note, an interview answer's "[cites: F3]".
_RELATION_CHAIN = r"\(([^()]*-\[[^\]]*\]->[^()]*)\)"  # "(A -[R]-> B; ...)"
_FACT_NOTE = r"\(((?:[^()]*-\[[^\]]*\]->|valid |no date given)[^()]*(?:\([^()]*\)[^()]*)?)\)"
_PASTED_FACT = re.compile(r"^(\s*-\s*)\[([^\]]+)\]\s*(.+?)\s*" + _FACT_NOTE + r"\s*$")
_TRUNCATION_NOTE = re.compile(r"^\s*\[truncated to stay within \d+ characters[^\]]*\]\s*$")
_CITES_NOTE = re.compile(r"\[cites:\s*([^\]]*)\]", re.IGNORECASE)


def tidy_pasted_results(content: str) -> str:
    """Tool-result lines pasted into a section as plain cited lines: "- [F3] fact (valid ...; still
    true)" becomes "- fact [F3]", "[cites: F3, F4]" becomes "[F3, F4]", and
    the tool's truncation note goes (it speaks of the tool's text, not of the report)."""
    lines = []
    for line in content.split("\n"):
        if _TRUNCATION_NOTE.match(line):
            continue
        line = _PASTED_FACT.sub(lambda match: f"{match.group(1)}{match.group(3)} [{match.group(2)}]", line)
        lines.append(_CITES_NOTE.sub(lambda match: f"[{match.group(1).strip()}]", line))
    return "\n".join(lines)


_PASTED_CHAIN = re.compile(r"\s*" + _RELATION_CHAIN)


# A sentence that copies this many words in a row from a fact the tools showed rests on that fact.
COPIED_RUN_WORDS = 8


def _word_runs(text: str, length: int = COPIED_RUN_WORDS) -> set[tuple[str, ...]]:
    words = re.findall(r"\w+", text.lower())
    return {tuple(words[i:i + length]) for i in range(len(words) - length + 1)}


def cite_copied_facts(content: str, known: dict[str, FactView]) -> str:
    """Text copied from a fact a tool returned cites that fact, and the relation chains pasted with
    facts go, as in tidy_pasted_results. Small models write from the facts and leave out the labels:
    real runs lost whole sections of exact facts, and of sentences that reword a fact around a long
    copied stretch of it ("... manure runoff from the Lindgren Dairy Farm, carried by the flood into
    the cracked Well 4"). So a whole fact found word for word cites itself where it stands, and a
    sentence citing nothing cites every fact it shares COPIED_RUN_WORDS words in a row with."""
    content = _PASTED_CHAIN.sub("", content)
    for uuid, view in known.items():
        fact = view.fact.strip()
        if fact and fact in content and uuid not in content:
            content = content.replace(fact, _cite(fact, [uuid]), 1)
    runs = {uuid: _word_runs(view.fact) for uuid, view in known.items()}
    lines = []
    for line in content.split("\n"):
        sentences = []
        for sentence in _SENTENCE_END.split(line):
            if sentence.strip() and not UUID_PATTERN.search(sentence):
                copied = _word_runs(sentence)
                sentence = _cite(sentence, [uuid for uuid, fact_runs in runs.items() if copied & fact_runs])
            sentences.append(sentence)
        lines.append(" ".join(sentences))
    return "\n".join(lines)


# "It closed. [id]" puts the citation after the sentence's end, where a split at the full stop would
# give it to the next sentence; the 1.5B writes most of its citations so.
_CITATION_AFTER_END = re.compile(r"([.!?])[ \t]*((?:\[[^\[\]\n]+\][ \t,;]*)+)")


def citations_before_the_stop(content: str) -> str:
    """"It closed. [id] Then ..." as "It closed [id]. Then ...": each citation inside its sentence."""
    def move(match) -> str:
        follows = match.end() < len(match.string) and match.string[match.end()] != "\n"
        return f" {match.group(2).strip().rstrip(',;').strip()}{match.group(1)}" + (" " if follows else "")

    return _CITATION_AFTER_END.sub(move, content)


def _cite(sentence: str, uuids: list[str]) -> str:
    """The sentence with the ids before its full stop."""
    ids = "".join(f" [{uuid}]" for uuid in uuids)
    body = sentence.rstrip()
    if body[-1:] in (".", "!", "?"):
        return body[:-1] + ids + body[-1] + sentence[len(body):]
    return body + ids + sentence[len(body):]


def resolve_labels(content: str, by_label: dict[str, str]) -> tuple[str, list[str]]:
    """Bracketed labels ("[F3]", "[F3, F7]") as "[uuid]" each; an unknown label becomes the removal
    marker (so its sentence is judged like an invented id). Returns (text, unknown labels)."""
    unknown: list[str] = []

    def one(label: str) -> str:
        uuid = by_label.get(label.upper())
        if uuid is None:
            unknown.append(label.upper())
            return f"[{REMOVED_CITATION}]"
        return f"[{uuid}]"

    def group(match) -> str:
        return " ".join(one(label) for label in re.split(r"\s*[,;]\s*", match.group(1)))

    return _LABEL_GROUP.sub(group, content), list(dict.fromkeys(unknown))


def resolve_sources(sources: Any, by_label: dict[str, str]) -> tuple[list[str], list[str]]:
    """A 'sources' field with labels and/or uuids as uuids; (uuids, unknown labels)."""
    items = [sources] if isinstance(sources, str) else sources if isinstance(sources, list) else []
    resolved, unknown = [], []
    for item in (str(item) for item in items if isinstance(item, (str, int))):
        resolved += [match.lower() for match in UUID_PATTERN.findall(item)]
        for number in LABEL_PATTERN.findall(item.upper()):
            label = f"F{number}"
            (resolved.append(by_label[label]) if label in by_label else unknown.append(label))
    return resolved, list(dict.fromkeys(unknown))


def salvage_write(text: str) -> tuple[str, list[str]] | None:
    """The section from a write answer whose JSON does not parse: cut short (by max_tokens) before it
    closed, or with bare quotes inside the text ('the "boil-water" advisory', as a small model writes
    it). Returns the 'content' string and the labels or ids listed after it; None if there is none."""
    if '"write"' not in text and '"content"' not in text:
        return None
    span = _content_span(text)
    if span is None:
        return None
    raw, end, cut_short = span
    try:
        content = json.loads('"' + _UNESCAPED_QUOTE.sub(r'\\"', raw.rstrip("\\")) + '"', strict=False)
    except ValueError:
        content = raw.replace("\\n", "\n").replace('\\"', '"')
    if cut_short:
        content = without_unfinished_ending(content)
    tail = text[end:]
    cited = [f"F{number}" for number in LABEL_PATTERN.findall(tail)] + UUID_PATTERN.findall(tail)
    return (content.strip(), cited) if content.strip() else None


def _content_span(text: str) -> tuple[str, int, bool] | None:
    """(the raw text of the 'content' string, where it ends in `text`, whether it was cut short). It
    ends before "sources" or at the object's last brace when the answer has them; otherwise (cut
    short) at its first bare quote."""
    start = _CONTENT_START.search(text)
    if start is None:
        return None
    rest = text[start.end():]
    end = _BEFORE_SOURCES.search(rest) or _BEFORE_LAST_BRACE.search(rest)
    if end is not None:
        return rest[:end.start()], start.end() + end.start(), False
    body = _JSON_STRING_BODY.match(rest)
    return body.group(0), start.end() + body.end(), True


# How a finished sentence ends: its stop (with a closing quote or bracket after it), or a citation.
_FINISHED = re.compile(r"""([.!?]["')\]]*|\])\s*$""")


def without_unfinished_ending(cut_short: str) -> str:
    """A text max_tokens cut off, without the sentence it was cut in ("... was a ", "who was the Port
    Ald"): half a sentence says nothing the report can stand by. A text that is one unfinished
    sentence stays: it is all the section has."""
    text = cut_short.rstrip()
    if _FINISHED.search(text):
        return cut_short
    ends = [match.end() for match in _SENTENCE_END.finditer(text)] + [
        match.start() for match in re.finditer("\n", text)]
    return text[:max(ends)].rstrip() if ends else cut_short


def looks_like_json_action(text: str) -> bool:
    """True when an answer is an attempt at a JSON action (such text is never section prose)."""
    return bool(_JSON_ACTION.search(text))


def unwrap_write(content: str, sources: Any) -> tuple[str, Any]:
    """A write whose content is itself a write action (the model wrapped its JSON twice, or wrote its
    JSON inside the prose): the inner section text and its sources; anything else unchanged."""
    if not looks_like_json_action(content):
        return content, sources
    inner = parse_json_object(content)
    if inner is not None and isinstance(inner.get("content"), str) and inner["content"].strip():
        listed = inner.get("sources")
        return inner["content"].strip(), listed if listed is not None else sources
    salvaged = salvage_write(content)
    if salvaged is not None:
        return salvaged[0], salvaged[1] or sources
    return content, sources


NOT_SUPPORTED = ("_No fact the tools returned supports this section: the model cited none, so its text "
                 "was removed._")


def drop_uncited_section(content: str) -> tuple[str, list[str]]:
    """A section that cites no fact a tool showed (inline or under "sources") claims what nothing
    supports, for example an invented fire: (the note NOT_SUPPORTED, its sentences as removed claims)."""
    return NOT_SUPPORTED, sentences_of(content)


def sentences_of(content: str) -> list[str]:
    """The text's sentences, stripped, line breaks ending one too."""
    sentences = [sentence.strip() for line in content.split("\n") for sentence in _SENTENCE_END.split(line)]
    return [sentence for sentence in sentences if sentence]
