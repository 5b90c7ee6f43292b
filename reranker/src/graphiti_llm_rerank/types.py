"""What every reranking strategy takes and gives: documents in, ranked results out, typed errors.

`Document(id, text, metadata)` in; `RerankResult(document, rank, original_index, score, reason, metadata)`
out, `rank` 1-based and `original_index` 0-based (the document's position in the input list). Ids are
kept verbatim: an integer id stays an integer in the results. Documents may also come as JSONL text,
one JSON object ({"id", "text", "metadata"?}) or string per line (`documents_from_jsonl`).

Errors are typed so a strict caller (the `/api/rerank` endpoint) can say exactly what went wrong. A
caller needs only `RerankError`: its `code` says which (the subclasses stay here for `isinstance`),
`item` names the offending input and `document_id` the longest document of a prompt too large:
- `InvalidRerankInputError` / `TooManyDocumentsError`: the input itself is unusable (caller's fault);
- `DocumentTooLongError`: a prompt would not fit the model's context window;
- `RerankProviderError`: the model server failed (connection, HTTP error, timeout);
- `RerankParseError`: the model answered, but nothing usable could be read from the answer;
- `RerankStrategyError`: the strategy itself failed (a custom strategy's unexpected exception is
  wrapped in it), or its plan cannot work for this input (`TournamentPlanError`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Document:
    id: str | int  # verbatim: a caller's integer id stays an integer
    text: str
    metadata: dict[str, Any] = field(default_factory=dict, compare=False)

    @staticmethod
    def jsonl_items(text: str) -> list[str | dict]:
        """The items of JSONL text (`documents_from_jsonl`), for a caller that checks each itself."""
        return documents_from_jsonl(text)


@dataclass
class RerankResult:
    document: Document
    rank: int  # 1-based position in the reranked list
    original_index: int  # 0-based position in the input list
    score: float | None = None  # None from a custom strategy: strategy_run.rerank derives it from the rank
    reason: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def dropped(self) -> bool:
        """True for results a diversity strategy (mmr) demoted out of the ranking."""
        return bool(self.metadata.get("dropped"))


class RerankError(Exception):
    """Base of every typed rerank error; `code` says which kind it is."""

    code = "rerank_failed"
    item: str | int | None = None  # the offending input (invalid_input, too_many_documents)
    document_id: str | int | None = None  # the longest document of a prompt too large (document_too_long)


class InvalidRerankInputError(RerankError, ValueError):
    """The query or documents cannot be reranked as given; `item` names the offending one."""

    code = "invalid_input"

    def __init__(self, message: str, *, item: str | int | None = None) -> None:
        super().__init__(message)
        self.item = item


class TooManyDocumentsError(InvalidRerankInputError):
    """More candidates than the strategy accepts."""

    code = "too_many_documents"


class DocumentTooLongError(RerankError):
    """A prompt would exceed the model's context window; `document_id` names the longest document in it."""

    code = "document_too_long"

    def __init__(self, message: str, *, document_id: str | int | None = None) -> None:
        super().__init__(message)
        self.document_id = document_id


def refuse_longer_than(documents: Sequence[Document], max_chars: int) -> None:
    """Strict calls never cut a document: the first one longer than `max_chars` raises DocumentTooLongError."""
    for document in documents:
        if len(document.text) > max_chars:
            raise DocumentTooLongError(
                f"document {document.id!r} has {len(document.text)} characters, more than max_document_chars="
                f"{max_chars} (RERANKER_MAX_DOCUMENT_CHARS); strict mode does not cut documents: shorten it, raise "
                "the limit, or rerank with strict=false to have it cut", document_id=document.id)


# A wrong key, no access, an unknown model or route (401/403/404) fail every request of a call alike.
CALL_LEVEL_STATUSES = frozenset({401, 403, 404})


class RerankProviderError(RerankError):
    """The model request failed. `call_level`: every other request would fail alike (unknown model, bad key).
    `timed_out`: no answer came within the request timeout."""

    code = "model_request_failed"

    def __init__(self, message: str, *, error_class: str = "Error", call_level: bool = False,
                 timed_out: bool = False) -> None:
        super().__init__(message)
        self.error_class = error_class
        self.call_level = call_level
        self.timed_out = timed_out


class RerankParseError(RerankError):
    """The model answered, but the answer holds no usable ranking, selection or score."""

    code = "unusable_model_answer"


class RerankStrategyError(RerankError):
    """The strategy failed; a custom strategy's unexpected exception is its `__cause__`."""

    code = "strategy_failed"


class TournamentPlanError(RerankStrategyError, ValueError):
    """A tournament stage plan that cannot rank this many candidates."""

    code = "tournament_plan_mismatch"


def rank_score(rank: int, total: int) -> float:
    """Score derived from a rank: 1.0 for rank 1, strictly descending, always > 0."""
    return (total - rank + 1) / total


def documents_from_jsonl(text: str) -> list[str | dict]:
    """The items of JSONL text: one JSON object or string per non-blank line."""
    items: list[str | dict] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError:
            raise InvalidRerankInputError(f"JSONL line {number} is not JSON", item=number) from None
        if not isinstance(item, (str, dict)):
            raise InvalidRerankInputError(f"JSONL line {number} must hold an object with 'text' or a string",
                                          item=number)
        items.append(item)
    return items


def as_documents(items: Iterable[Document | str | dict] | str) -> list[Document]:
    """Documents from Document objects, plain strings (id = position) or {"id", "text", "metadata"} dicts,
    or from JSONL text holding such strings and objects."""
    if isinstance(items, str):
        items = documents_from_jsonl(items)
    documents = []
    for index, item in enumerate(items):
        if isinstance(item, Document):
            documents.append(item)
        elif isinstance(item, str):
            documents.append(Document(id=str(index), text=item))
        elif isinstance(item, dict):
            raw_id = item.get("id", index)
            if isinstance(raw_id, bool) or not isinstance(raw_id, (str, int)):
                raise InvalidRerankInputError(f"document {index}: 'id' must be a string or an integer", item=index)
            metadata = item.get("metadata") or {}
            if not isinstance(metadata, dict):
                raise InvalidRerankInputError(f"document {index}: 'metadata' must be an object", item=index)
            documents.append(Document(id=raw_id, text=item.get("text"), metadata=metadata))  # type: ignore[arg-type]
        else:
            raise InvalidRerankInputError(
                f"document {index}: expected a string, an object with 'text', or a Document", item=index
            )
    return documents


def check_documents(documents: list[Document]) -> None:
    """Refuse duplicate ids and empty or non-string text (how many a strategy accepts is checked where it
    runs: `strategies.base.run_checked`)."""
    seen: dict[str, int] = {}
    for index, document in enumerate(documents):
        if isinstance(document.id, bool) or not isinstance(document.id, (str, int)) or document.id == "":
            raise InvalidRerankInputError(f"document {index}: 'id' must be a non-empty string or an integer",
                                          item=index)
        key = str(document.id)  # 7 and "7" would be the same id to a caller reading the answer
        if key in seen:
            raise InvalidRerankInputError(
                f"document {index}: id {document.id!r} is also used by document {seen[key]}",
                item=document.id,
            )
        seen[key] = index
        if not isinstance(document.text, str):
            raise InvalidRerankInputError(f"document {document.id!r}: 'text' must be a string", item=document.id)
        if not document.text.strip():
            raise InvalidRerankInputError(f"document {document.id!r}: 'text' is empty", item=document.id)
