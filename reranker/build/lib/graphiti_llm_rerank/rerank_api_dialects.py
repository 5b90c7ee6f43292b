"""The two wire dialects of `POST {base}/rerank`, and a defensive reading of any answer to them.

- "cohere" (llama.cpp's server, vLLM, Infinity, Jina, Cohere v2):
  {model, query, documents, top_n} -> {"results": [{"index", "relevance_score"}, ...], ...}
- "tei" (Hugging Face text-embeddings-inference): {query, texts, truncate} -> [{"index", "score"}, ...]

An answer is read whichever dialect was sent (servers and proxies mix them), and mapped back by
index: each entry must carry an integer index inside the batch and a finite number as its score;
an entry that does not (out of range, repeated, unreadable) is ignored and counted, so no document
is lost or doubled. For a repeated index the first entry counts (answers come best first).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Literal

from graphiti_llm_rerank.types import RerankParseError

Dialect = Literal["cohere", "tei"]

# A server refuses the other dialect's body by naming the field it misses: TEI (axum/serde) with
# "missing field `texts`", FastAPI-style servers with {"loc": ["body", "documents"], "msg": "Field required"}.
_MISSING = re.compile(r"missing|required", re.IGNORECASE)
_FIELDS: dict[Dialect, re.Pattern[str]] = {"tei": re.compile(r"\btexts\b"), "cohere": re.compile(r"\bdocuments\b")}


def request_body(dialect: Dialect, *, model: str, query: str, texts: list[str]) -> dict[str, Any]:
    if dialect == "tei":
        # truncate: a passage longer than the model's window is cut by the server instead of failing the batch.
        return {"query": query, "texts": texts, "truncate": True}
    # top_n = every document: the reranker needs a score for each, not just the best few.
    return {"model": model, "query": query, "documents": texts, "top_n": len(texts)}


def wanted_dialect(status: int, body_text: str) -> Dialect | None:
    """The dialect a 4xx asks for when it says that dialect's document field is missing, else None.
    ("Too many documents" names the field too, but says nothing is missing.)"""
    if not 400 <= status < 500 or not _MISSING.search(body_text):
        return None
    return next((dialect for dialect, name in _FIELDS.items() if name.search(body_text)), None)


@dataclass(frozen=True)
class Answer:
    scores: dict[int, float]  # index in the batch -> the server's raw score, each index once
    ignored: int  # entries out of range, repeated or unreadable
    shape: Dialect  # "tei" when the answer was a bare list
    tokens: int  # tokens the server reports it evaluated (0 when it does not say)


def read_answer(payload: Any, n_documents: int) -> Answer:
    """The usable (index, score) pairs of an answer; RerankParseError when there are none."""
    if isinstance(payload, list):
        entries, shape = payload, "tei"
    elif isinstance(payload, dict) and isinstance(payload.get("results"), list):
        entries, shape = payload["results"], "cohere"
    else:
        raise RerankParseError("the answer is neither a list of results nor an object with 'results'")
    scores: dict[int, float] = {}
    for entry in entries:
        index, score = _index_and_score(entry)
        if index is not None and score is not None and 0 <= index < n_documents and index not in scores:
            scores[index] = score
    if not scores:
        raise RerankParseError(f"none of the {len(entries)} results has a usable index and score")
    return Answer(scores, len(entries) - len(scores), shape, _tokens(payload))


def _index_and_score(entry: Any) -> tuple[int | None, float | None]:
    if not isinstance(entry, dict):
        return None, None
    index = entry.get("index")
    score = entry.get("relevance_score", entry.get("score"))
    if isinstance(index, bool) or not isinstance(index, int):
        index = None
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
        score = None
    return index, None if score is None else float(score)


def _tokens(payload: Any) -> int:
    usage = payload.get("usage") if isinstance(payload, dict) else None
    if not isinstance(usage, dict):
        return 0
    value = usage.get("prompt_tokens", usage.get("total_tokens"))
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
