"""Interview answers held to the entity's facts: citations checked, uncited answers withheld."""

from __future__ import annotations

import re
from typing import Any

from app.report.results import DONT_KNOW, EntityInterview, InterviewAnswer
from app.report.views import UUID_PATTERN

_DONT_KNOW = re.compile(r"\b(i\s+(do\s+not|don'?t|dont)\s+know|unknown|not\s+in\s+my\s+facts)\b", re.IGNORECASE)


def is_dont_know(answer: str) -> bool:
    return bool(_DONT_KNOW.search(answer)) and len(answer) < 160


def _items_by_question(reply: dict, count: int) -> dict[int, dict]:
    """Answer items keyed by 0-based question index (from question_index, else position)."""
    items = reply.get("answers")
    if not isinstance(items, list):
        return {}
    by_index: dict[int, dict] = {}
    for position, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        index = item.get("question_index")
        index = index - 1 if isinstance(index, int) and not isinstance(index, bool) else position
        if 0 <= index < count and index not in by_index:
            by_index[index] = item
    return by_index


def _cited(item: dict, answer: str) -> list[str]:
    listed = item.get("fact_uuids")
    listed = [listed] if isinstance(listed, str) else listed if isinstance(listed, list) else []
    found = [value.strip().lower() for value in listed if isinstance(value, str) and value.strip()]
    found += [match.lower() for match in UUID_PATTERN.findall(answer)]  # ids written into the text
    return list(dict.fromkeys(found))


def ground_answers(reply: dict[str, Any], questions: list[str], fact_uuids: set[str]) -> list[InterviewAnswer]:
    """One answer per question. Citations of facts the entity does not hold are dropped and listed;
    an answer left with no valid citation is withheld and replaced by DONT_KNOW."""
    by_index = _items_by_question(reply, len(questions))
    answers = []
    for index, question in enumerate(questions):
        item = by_index.get(index, {})
        text = item.get("answer") if isinstance(item.get("answer"), str) else ""
        text = text.strip()
        cited = _cited(item, text)
        valid = [uuid for uuid in cited if uuid in fact_uuids]
        invalid = [uuid for uuid in cited if uuid not in fact_uuids]
        for uuid in invalid:  # an invented id must not survive inside the answer text either
            text = re.sub(re.escape(uuid), "[invalid citation]", text, flags=re.IGNORECASE)
        if not text or is_dont_know(text):
            answers.append(InterviewAnswer(question, DONT_KNOW, [], invalid))
        elif not valid:
            answers.append(InterviewAnswer(question, DONT_KNOW, [], invalid, withheld_answer=text))
        else:
            answers.append(InterviewAnswer(question, text, valid, invalid, knows=True))
    return answers


def interview_summary(topic: str, questions: list[str], interviews: list[EntityInterview]) -> str:
    if not interviews:
        return f"No entity relevant to {topic!r} was found to interview."
    names = ", ".join(interview.entity.name for interview in interviews)
    parts = [f"Interviewed {len(interviews)} entit{'y' if len(interviews) == 1 else 'ies'} ({names}) on {topic!r}."]
    for index, _question in enumerate(questions):
        knew = [i.entity.name for i in interviews if i.answers[index].knows]
        unknown = len(interviews) - len(knew)
        parts.append(f"Q{index + 1}: answered from facts by {', '.join(knew) or 'no one'}"
                     + (f"; {unknown} did not know." if unknown else "."))
    withheld = sum(1 for i in interviews for a in i.answers if a.withheld_answer)
    invalid = sum(len(a.invalid_citations) for i in interviews for a in i.answers)
    if withheld or invalid:
        parts.append(f"{withheld} uncited answer(s) withheld, {invalid} invented citation(s) dropped.")
    return " ".join(parts)
