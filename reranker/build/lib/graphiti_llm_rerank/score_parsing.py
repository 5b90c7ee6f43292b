"""Turn a model's answer into a relevance score in [0, 1], or None when the answer is unusable.

Two readings:
- logprobs: P(yes) / (P(yes) + P(no)) from the top alternatives of the first answer position that
  mentions yes or no. Tokens are matched by their STRING, case-insensitively and without surrounding
  whitespace or BPE/SentencePiece space markers, because token ids differ between models and
  Ollama has no logit_bias. Variants of one word ("Yes", " yes", "YES") add up.
- graded: the expected grade E[g] / 3 over the digits 0-3 among the top alternatives of the first
  answer position that offers any of them (the same string matching); without logprobs, the first
  digit 0-3 of the text, / 3.
- json: the model was asked for {"score": S} with S in [0, 1]. Parsing is defensive: <think> blocks
  and markdown fences are dropped, then json.loads, else the first number in the text. The value is
  clamped to [0, 1]; we do NOT guess other scales (an "8" means 1.0, not 0.8), because the prompt
  asks for 0..1 and guessing "was that out of 10 or 100?" makes 1 ambiguous.

Inputs may be SDK objects (attribute access) or plain dicts (JSON), so both are read through `_field`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Any

from graphiti_llm_rerank.judge_prompt import GRADES, NO_WORD, YES_WORD

_SPACE_MARKERS = "\u0120\u2581"  # GPT-2 style "Ġ" and SentencePiece "▁" leak into some token strings
_THINK_BLOCK = re.compile(r"<think>.*?(?:</think>|$)", re.IGNORECASE | re.DOTALL)
_FENCE = re.compile(r"```[a-zA-Z]*")
_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
_SCORE_KEYS = ("score", "relevance", "relevance_score")


def _field(obj: Any, name: str) -> Any:
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


def normalise_token(token: str) -> str:
    return token.strip().strip(_SPACE_MARKERS).strip().lower()


def clamp_unit(value: float) -> float | None:
    """Clamp to [0, 1]; None for NaN (an unusable answer, not a zero)."""
    if math.isnan(value):
        return None
    return min(1.0, max(0.0, value))


def _alternatives(position: Any) -> Iterator[tuple[str, float]]:
    """(normalised token, probability) for each distinct token offered at one answer position."""
    seen: set[str] = set()
    alternatives = list(_field(position, "top_logprobs") or [])
    alternatives.append(position)  # the generated token itself, in case top_logprobs omits it
    for alt in alternatives:
        token, logprob = _field(alt, "token"), _field(alt, "logprob")
        if not isinstance(token, str) or not isinstance(logprob, (int, float)) or token in seen:
            continue
        seen.add(token)
        yield normalise_token(token), math.exp(logprob)


def _word_probabilities(position: Any) -> tuple[float, float]:
    """Summed probabilities of yes-variants and no-variants among one position's alternatives."""
    p_yes = p_no = 0.0
    for word, probability in _alternatives(position):
        if word == YES_WORD:
            p_yes += probability
        elif word == NO_WORD:
            p_no += probability
    return p_yes, p_no


def yes_probability(logprob_positions: list[Any] | None) -> float | None:
    """P(yes)/(P(yes)+P(no)) at the first position that mentions either word; None if none does."""
    for position in logprob_positions or []:
        p_yes, p_no = _word_probabilities(position)
        if p_yes + p_no > 0.0:
            return p_yes / (p_yes + p_no)
    return None


def _grade_probabilities(position: Any) -> dict[int, float]:
    """Summed probability per grade among one position's alternatives."""
    probabilities: dict[int, float] = {}
    for word, probability in _alternatives(position):
        if word in GRADES:
            grade = GRADES.index(word)
            probabilities[grade] = probabilities.get(grade, 0.0) + probability
    return probabilities


def expected_grade(logprob_positions: list[Any] | None) -> float | None:
    """E[grade] / top grade at the first position offering a grade; None if none does."""
    top = len(GRADES) - 1
    for position in logprob_positions or []:
        probabilities = _grade_probabilities(position)
        total = sum(probabilities.values())
        if total > 0.0:
            return sum(grade * p for grade, p in probabilities.items()) / (total * top)
    return None


def grade_from_text(text: str | None) -> float | None:
    """Fallback when logprobs say nothing: the first grade digit written, / top grade."""
    match = re.search(f"[{''.join(GRADES)}]", strip_reasoning(text or ""))
    return GRADES.index(match.group(0)) / (len(GRADES) - 1) if match else None


def yes_no_from_text(text: str | None) -> float | None:
    """Fallback when logprobs say nothing: the generated word itself (yes -> 1.0, no -> 0.0)."""
    words = re.findall(r"[a-z]+", strip_reasoning(text or "").lower())
    if not words:
        return None
    if words[0] == YES_WORD:
        return 1.0
    if words[0] == NO_WORD:
        return 0.0
    return None


def strip_reasoning(text: str) -> str:
    """Drop <think>...</think> blocks (an unclosed one runs to the end) and markdown fences."""
    return _FENCE.sub("", _THINK_BLOCK.sub("", text)).strip()


def _score_from_json(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    if isinstance(value, dict):
        lowered = {str(k).lower(): v for k, v in value.items()}
        for key in _SCORE_KEYS:
            if key in lowered:
                return _score_from_json(lowered[key])
        return None
    if isinstance(value, list) and len(value) == 1:
        return _score_from_json(value[0])
    return None


def parse_json_score(text: str | None) -> float | None:
    """Score from a {"score": S} answer, clamped to [0, 1]; None when no number can be found."""
    cleaned = strip_reasoning(text or "")
    if not cleaned:
        return None
    try:
        score = _score_from_json(json.loads(cleaned))
    except (ValueError, RecursionError):
        score = None
    if score is None:
        match = _NUMBER.search(cleaned)
        if match is None:
            return None
        score = float(match.group(0))
    return clamp_unit(score)
