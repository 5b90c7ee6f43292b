"""The report's plan, tied to the requirement: its parts, the outline kept to them, and which tool
each section's question calls for.

The model proposes the outline; this module decides what stays. A requirement such as "What caused
the drinking-water crisis in Port Alder and who responded how?" has two parts (the causes, the
responses). A proposed section is kept when its title names something (not only generic steps such as
"Identify the Key Entities" or "Analyze the Facts") and its title or goal shares a content word with
the requirement; it is filed under the part it matches best. Other sections are dropped, and a part
no section covers gets a section of its own. So whatever the model
proposes, every part of the requirement is answered and nothing generic takes its place.

Words are compared crudely but deterministically: lower case, "'s" and hyphens split off, stop
words and generic report words ignored, and two words match when they share a prefix of five
letters (caused/causes, responded/responses) or are equal.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from app.report.tool_registry import INSIGHT_FORGE, INTERVIEW_ENTITIES

STOPWORDS = frozenset("""
a an the and or but nor of to in on at by for with from into onto over under about as than then that this these
those it its it's they them their there here he she him her his hers we us our you your i me my mine be been being
is are was were am do does did has have had having can could will would shall should may might must
what who whom whose when where why how which whether if so not no yes all any some each every both either neither
one two also just only very more most much many such own same other another up down out off again once
""".split())
WH_WORDS = frozenset("who whom whose what when where why how which".split())
DO_SUPPORT = frozenset(("do", "does", "did"))  # "What part did X play": X is the subject, "play" its verb
PRONOUNS = frozenset("it they he she we you this".split())
# Prepositions that STOPWORDS leaves out; after one of them a question's subject has ended.
PREPOSITIONS = frozenset("after before during since until against through between within without among".split())
# Words that say nothing about the subject: a section made only of these is not tied to a requirement.
GENERIC_WORDS = frozenset("""
identify identifying key entities entity involved analyze analyse analyzing analysis historical history facts fact
overview introduction background conclusion conclusions summary summarize findings finding data information graph
relationships relationship relations relation details detail report section aspects aspect main important general
discussion discuss examine examining explore exploring understand understanding describe description review
""".split())
# A section asking why, or for causes and origins, is best served by InsightForge's sub-queries.
WHY_WORDS = ("why", "cause", "caused", "causes", "causing", "reason", "reasons", "origin", "origins", "source",
             "sources", "led", "lead", "leads", "because", "come", "comes", "came", "explain", "trace", "traced")
# A section about who did or said what (a stance) is best served by interviewing the entities.
STANCE_WORDS = ("respond", "responded", "response", "responses", "react", "reacted", "reaction", "reactions",
                "said", "say", "says", "stance", "stances", "view", "views", "opinion", "opinions", "position",
                "positions", "dispute", "disputed", "blame", "blamed", "apologise", "apologize", "apologized",
                "criticise", "criticize", "criticized", "argue", "argued", "claim", "claimed", "deny", "denied")
MIN_PREFIX = 5
HUB_MENTIONS = 3  # a name at one end of this many facts shown is a hub (see unexplored_names)

_SENTENCE_END = re.compile(r"\s*(?:[?!;]+|(?<=[a-z]{3})\.(?=\s|$))\s*")
# "..., and who responded how" / "and by whom": a new question joined to the previous one.
_NEW_CLAUSE = re.compile(
    r",?\s+(?:and|or|but|as well as|and also)\s+"
    r"(?=(?:(?:by|to|for|with|from|of|in|on|at|against)\s+)?(?:who|whom|whose|what|when|where|why|how|which)\b)",
    re.IGNORECASE,
)
_TOKEN = re.compile(r"[a-z0-9]+")


def tokens(text: str) -> list[str]:
    """Lower-case words, with "'s" dropped and hyphenated words split ("drinking-water" -> two)."""
    cleaned = re.sub(r"['\u2019]s\b", "", text.lower())
    return _TOKEN.findall(cleaned)


def content_words(text: str) -> list[str]:
    """Words that carry the subject: no stop words, no one- or two-letter tokens, each once, in order."""
    return list(dict.fromkeys(word for word in tokens(text) if len(word) > 2 and word not in STOPWORDS))


def stem(word: str) -> str:
    """Plural endings off ("ferries" -> "ferry", "causes" -> "caus"), so singular and plural match."""
    for ending in ("ies", "es", "s"):
        if len(word) > len(ending) + 3 and word.endswith(ending):
            return word[: -len(ending)] + ("y" if ending == "ies" else "")
    return word


def words_match(first: str, second: str) -> bool:
    first, second = stem(first), stem(second)
    if first == second:
        return True
    shortest = min(len(first), len(second))
    prefix = min(MIN_PREFIX, shortest)
    return shortest >= 4 and first[:prefix] == second[:prefix]


def overlap(words: list[str], others: list[str]) -> int:
    """How many of `words` match one of `others`."""
    return sum(1 for word in words if any(words_match(word, other) for other in others))


def requirement_parts(requirement: str) -> list[str]:
    """The requirement's questions: sentences, then clauses joined by 'and who/what/how...'.

    A fragment with no content word of its own ("and by whom") stays with the question before it.
    """
    parts: list[str] = []
    for sentence in _SENTENCE_END.split(requirement.strip()):
        for piece in _NEW_CLAUSE.split(sentence):
            piece = piece.strip(" ,.:")
            if not piece:
                continue
            if parts and not content_words(piece):
                parts[-1] = f"{parts[-1]}, {piece}"
            else:
                parts.append(piece)
    return parts or [requirement.strip()]


def subject_phrase(part: str) -> str:
    """What a question is about: without its question word and the verb after it.

    "What caused the drinking-water crisis in Port Alder" -> "the drinking-water crisis in Port Alder";
    "What part did the Lindgren Dairy Farm play in the outbreak" -> "the Lindgren Dairy Farm in the outbreak".
    """
    words = part.split()
    if not words or words[0].lower() not in WH_WORDS:
        return " ".join(words)
    words = words[1:]
    do_support = next((index for index, word in enumerate(words[:2]) if word.lower() in DO_SUPPORT), None)
    if do_support is not None:
        return _do_support_subject(words[do_support + 1:])
    auxiliaries = [index for index, word in enumerate(words) if word.lower() in STOPWORDS]
    if words and (not auxiliaries or auxiliaries[0] != 0):
        words = words[1:]  # the verb right after the question word ("caused")
    while words and words[0].lower() in STOPWORDS - {"the", "a", "an"}:
        words = words[1:]
    return " ".join(words)


def _do_support_subject(words: list[str]) -> str:
    """The words after "did" without its bare verb, which would garble a query or a question made from
    them ("the PFAS in Port Alder's drinking water come from" -> "... drinking water").

    The bare verb is told apart without a dictionary: a lower-case content word after the subject's
    first one, followed by a function word other than "of", a capitalised word, or nothing. What follows
    it stays (it keeps the subject on the question), less function words left at the end. A subject
    that is only a pronoun says nothing; "how did it come out that X" is about X.
    """
    if words and words[0].lower() in PRONOUNS:
        lowered = [word.lower() for word in words]
        return " ".join(words[lowered.index("that") + 1:]) if "that" in lowered else ""
    first_content = next((index for index, word in enumerate(words) if word.lower() not in STOPWORDS), len(words))
    for index in range(first_content + 1, len(words)):
        word, following = words[index], words[index + 1] if index + 1 < len(words) else ""
        if word[:1].islower() and word.lower() not in STOPWORDS | PREPOSITIONS and (
                not following or following[:1].isupper()
                or following.lower() in (STOPWORDS | PREPOSITIONS) - {"of"}):
            after = index + 2 if following.lower() == "to" else index + 1  # "respond to", "decide to"
            words = words[:index] + words[after:]
            break
    while words and words[-1].lower() in STOPWORDS | PREPOSITIONS:
        words = words[:-1]
    return " ".join(words)


def with_subject(part: str, subject: str) -> str:
    """A part that leaves its subject to an earlier one ("who responded how") gets it back."""
    if not subject or overlap(content_words(subject), content_words(part)):
        return part
    return f"{part} ({subject})"


def name_in_context(name: str, subject: str) -> str:
    """The query for a name followed up from results: the name with the subject it came up for.

    Alone, a name finds whatever the graph says about it ("Port Alder Fire Brigade" finds a dinghy
    rescue and a festival's foam party); with the subject its search stays on the question
    ("Port Alder Fire Brigade drinking-water crisis in Port Alder" finds the bottled-water deliveries).
    """
    words = subject.split()
    while words and words[0].lower() in ("the", "a", "an"):
        words = words[1:]
    subject = " ".join(words).rstrip("?!.,;: ")
    if not subject or overlap(content_words(subject), content_words(name)) == len(content_words(subject)):
        return name
    return f"{name} {subject}"


def tool_hint(text: str) -> str | None:
    """insight_forge for why/cause or several-part questions, interview_entities for stances, else None."""
    words = tokens(text)
    if any(word in WHY_WORDS for word in words) or len(_several(text)) > 1:
        return INSIGHT_FORGE.name
    if any(word in STANCE_WORDS for word in words) or (words[:1] == ["who"] and "how" in words):
        return INTERVIEW_ENTITIES.name
    return None


def _several(text: str) -> list[str]:
    """A question asking two things at once ("issued and lifted", "when ... and by whom")."""
    return [piece for piece in re.split(r"\s+and\s+|,\s*", text) if content_words(piece)]


@dataclass
class SectionPlan:
    title: str
    goal: str
    part: str  # the part of the requirement this section answers, with its subject
    part_index: int  # 0-based index into OutlineCheck.parts
    proposed: bool  # True: the model's section; False: built here for a part no section covered
    tool_hint: str | None = None
    seed_query: str = ""

    def to_dict(self) -> dict:
        return {"title": self.title, "goal": self.goal, "part": self.part, "proposed": self.proposed,
                "tool_hint": self.tool_hint, "seed_query": self.seed_query}


@dataclass
class OutlineCheck:
    parts: list[str]
    sections: list[SectionPlan]
    dropped: list[str] = field(default_factory=list)  # proposed titles tied to no part
    added: list[str] = field(default_factory=list)  # titles built for parts the proposal left out
    merged_parts: int = 0  # parts beyond max_sections folded into the last section


def is_generic(title: str) -> bool:
    """A title made only of generic report steps ("Identify the Key Entities", "Analyze the Facts")."""
    return not [word for word in content_words(title) if word not in GENERIC_WORDS]


def part_of(title: str, goal: str, part_words: list[list[str]]) -> int | None:
    """The part a section answers: most of the part's words matched (share of them), first on a tie."""
    words = [word for word in content_words(f"{title} {goal}") if word not in GENERIC_WORDS]
    best, best_score = None, 0.0
    for index, wanted in enumerate(part_words):
        if not wanted:
            continue
        score = overlap(wanted, words) / len(wanted)
        if score > best_score:
            best, best_score = index, score
    return best


def _distinct_words(parts: list[str]) -> list[list[str]]:
    """Each part's content words; words every part shares (the common subject) only count when alone."""
    per_part = [[w for w in content_words(part) if w not in GENERIC_WORDS] for part in parts]
    if len(per_part) < 2:
        return per_part
    distinct = []
    for index, words in enumerate(per_part):
        others = [w for other, ws in enumerate(per_part) if other != index for w in ws]
        own = [word for word in words if not any(words_match(word, other) for other in others)]
        distinct.append(own or words)
    return distinct


def _built_section(part: str, index: int) -> SectionPlan:
    title = part[:1].upper() + part[1:]
    title = title if len(title) <= 90 else title[:87].rsplit(" ", 1)[0] + "..."
    return SectionPlan(title=title, goal=f"Answer from the graph: {part}?", part=part, part_index=index,
                       proposed=False)


def check_outline(proposed: list[tuple[str, str]], requirement: str, max_sections: int) -> OutlineCheck:
    """The outline to write: proposed sections tied to the requirement's parts, every part covered,
    in the requirement's order, at most `max_sections`."""
    raw_parts = requirement_parts(requirement)
    subject = subject_phrase(raw_parts[0])
    parts = [with_subject(part, subject) if index else part for index, part in enumerate(raw_parts)]
    part_words = _distinct_words(raw_parts)
    check = OutlineCheck(parts=parts, sections=[])
    for title, goal in proposed:
        index = part_of(title, goal, part_words) if not is_generic(title) else None
        if index is None:
            check.dropped.append(title)
            continue
        check.sections.append(SectionPlan(title=title, goal=goal, part=parts[index], part_index=index,
                                          proposed=True))
    covered = {section.part_index for section in check.sections}
    for index, part in enumerate(parts):
        if index not in covered:
            built = _built_section(part, index)
            check.sections.append(built)
            check.added.append(built.title)
    check.sections.sort(key=lambda section: section.part_index)  # stable: the model's order within a part
    check.sections = _fit(check, max_sections)
    for section in check.sections:
        section.tool_hint = tool_hint(section.part)
        section.seed_query = section.part
    return check


def _fit(check: OutlineCheck, max_sections: int) -> list[SectionPlan]:
    """At most max_sections: the first section of each part first; parts that still do not fit are
    folded into the last section, so no part of the requirement goes unanswered."""
    sections = check.sections
    if len(sections) <= max_sections:
        return sections
    firsts, seen = [], set()
    for section in sections:
        if section.part_index not in seen:
            seen.add(section.part_index)
            firsts.append(section)
    extras = [section for section in sections if section not in firsts]
    if len(firsts) >= max_sections:
        kept, folded = firsts[: max_sections - 1], firsts[max_sections - 1:]
        last = folded[0]
        if len(folded) > 1:
            check.merged_parts = len(folded) - 1
            parts = [section.part for section in folded]
            last = SectionPlan(title=last.title, goal=f"{last.goal} Also: " + "; ".join(parts[1:]) + ".",
                               part="; ".join(parts), part_index=last.part_index, proposed=last.proposed)
        return kept + [last]
    room = max_sections - len(firsts)
    keep = set(map(id, firsts + extras[:room]))
    return [section for section in sections if id(section) in keep]


def unexplored_names(names: list[str], asked: list[str], limit: int = 4) -> list[str]:
    """Names seen in results (best first) that no query asked about yet: the next queries to try.

    A name counts as asked when every content word of it occurs in the queries already asked
    (stems compared), so "Port Alder" is not suggested once a query named it. Hubs come last: a
    name that `names` holds HUB_MENTIONS times or more (it is one end of that many facts shown) has
    been seen from many sides, and searching it mostly returns those facts again; a name at the
    edge of the results leads to facts not seen yet. For "What caused the drinking-water crisis in
    Port Alder?" half of the first stage's top ten facts name the water authority, one the wellfield;
    a search for the wellfield has the manure runoff in its top ten (the flood 11th), one for
    the authority no cause of the crisis."""
    if limit <= 0:
        return []
    asked_words = [word for query in asked for word in content_words(query)]
    mentions = Counter(name.strip() for name in names if name and name.strip())
    suggestions: list[str] = []
    for name in mentions:
        words = content_words(name)
        if words and overlap(words, asked_words) < len(words):
            suggestions.append(name)
    suggestions.sort(key=lambda name: mentions[name] >= HUB_MENTIONS)  # stable: best first otherwise
    return suggestions[:limit]
