"""POST /api/rerank: rerank documents for a query with any strategy, on its own (no graph needed).

Request:  {"query": str, "documents": [{"id", "text"}] | [str] | JSONL str, "top_k"? | "top_n"?, "strategy"?,
           "return_documents"?: bool, "strict"?: bool (default true)}
Response: {"results": [{"id", "index", "relevance_score", "score", "rank", "reason"?, "document"?}],
           "dropped": [...], "strategy", "model", "calls", "estimated_calls", "usage", "stats",
           "diversity_note"? (mmr)}

`index` and `relevance_score` are the hosted rerank APIs' shape (Cohere, Jina, TEI); `score` is the same
number, kept for earlier clients. Ids are returned verbatim (an integer id stays an integer); string
documents get their position as id. Without top_k/top_n every document is returned (mmr: 5).
`dropped` lists what mmr set aside: near-duplicates (reason "redundant_with:<id>") and documents below
relevance 0.2 ("below_min_relevance:0.2"); it is empty for other strategies. Strict (the default) fails fast:
an unusable model answer (a ranking that would need a repair included) or a failed model request is
a 502, a document longer than RERANKER_MAX_DOCUMENT_CHARS or a prompt larger than the model's context
a 413, the deadline (RERANKER_DEADLINE_S) a 504. While the model's circuit breaker is open (shared with
graph search; RERANKER_BREAKER_*) the answer is a 503 with Retry-After and no model request is sent.
With "strict": false long documents are cut inside the prompt, rankings repaired and failed units keep
their incoming order (counted in "stats"). The judge is the process-wide one the graph reranker uses,
so RERANKER_MAX_PARALLEL bounds both together.

With RERANKER_PROVIDER=rerank_api the documents go to the dedicated reranker (one request, more if
batches are capped), the process-wide client graph search uses. Such a model scores each document on
its own, so the only strategy is "pointwise" (the default there); another is a 422
(strategy_not_supported). The response has the same shape plus "provider": "rerank_api"; a document
the server left unscored (not in its answer, or with strict=false its request failed) comes last
with a "reason"; "calls" counts HTTP requests and "stats.fallbacks" the unscored documents.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from flask import Blueprint

from app.api.errors import ApiError
from app.api.validation import (
    MAX_QUERY_CHARS, app_config, choice_field, int_field, json_object, refuse_invalid_text, text_field,
)
from app.config import RERANKER_STRATEGIES
from app.graph.loop import run_on_loop
from app.graph.runtime import shared_embedder
from graphiti_llm_rerank import Document, RerankError, RerankOutcome, RerankResult, Reranking, rerank

bp = Blueprint("rerank", __name__, url_prefix="/api")

MAX_DOCUMENTS = 1000
MAX_DOCUMENT_CHARS = 100_000
MAX_TOTAL_CHARS = 2_000_000
MAX_ID_CHARS = 256
API_STRATEGY = "pointwise"  # what a dedicated reranker model does (RERANKER_PROVIDER=rerank_api)

T = TypeVar("T")


@bp.post("/rerank")
def rerank_documents():
    config = app_config()
    reranking = Reranking.shared(config)
    if not reranking.judges:
        raise ApiError(503, "reranker_disabled",
                       f"reranking is switched off (RERANKER_PROVIDER={reranking.provider.name})")
    body = json_object()
    query = text_field(body, "query", max_chars=MAX_QUERY_CHARS)
    documents = _documents(body.get("documents"))
    top_k = _top_k(body, len(documents))
    uses_api = not reranking.runs_strategy  # a dedicated reranker model: it scores each document itself
    default_strategy = API_STRATEGY if uses_api else config.reranker_strategy
    strategy = choice_field(body, "strategy", default=default_strategy, allowed=RERANKER_STRATEGIES)
    return_documents = _flag(body, "return_documents", False)
    strict = _flag(body, "strict", True)
    if uses_api:
        return _rerank_with_api(reranking, query, documents, strategy, top_k, strict, return_documents)
    outcome = _rerank(reranking, query, documents, strategy, top_k, strict)
    return {
        "results": [_result(result, return_documents) for result in outcome.results],
        "dropped": [_result(result, return_documents) for result in outcome.dropped],
        "strategy": outcome.strategy,
        "model": outcome.model,
        "calls": outcome.calls,
        "estimated_calls": outcome.estimated_calls,
        "usage": {key: outcome.stats[key] for key in ("prompt_tokens", "completion_tokens")},
        "stats": {key: outcome.stats[key]
                  for key in ("fallbacks", "invalid_outputs", "repairs", "repair_reports", "ties", "embedding_calls",
                              "elapsed_ms")},
        **({"diversity_note": outcome.diversity_note} if outcome.diversity_note is not None else {}),
    }


def _rerank(reranking: Reranking, query: str, documents: list[Document], name: str, top_k: int,
            strict: bool) -> RerankOutcome:
    config = app_config()
    try:
        strategy = reranking.strategy(name, embedder=shared_embedder(config) if name == "mmr" else None)
    except ValueError as error:
        raise ApiError(500, "reranker_misconfigured", str(error)) from None

    return _within_deadline(reranking, lambda: rerank(
        query, documents, provider=reranking.judge, strategy=strategy, top_k=top_k, strict=strict,
        context_tokens=reranking.config.context_tokens,
    ), model_answered=lambda outcome: True)  # a call where nothing worked raises


def _rerank_with_api(reranking: Reranking, query: str, documents: list[Document], strategy: str, top_k: int,
                     strict: bool, return_documents: bool) -> dict[str, Any]:
    if strategy != API_STRATEGY:
        raise ApiError(422, "strategy_not_supported",
                       f"RERANKER_PROVIDER=rerank_api scores each document with a dedicated reranker model; "
                       f"only the '{API_STRATEGY}' strategy applies, not '{strategy}'")
    reranker = reranking.rerank_api
    if strict:  # the same rule as the judge's strategies (strategies/base.shown_texts)
        try:
            reranker.refuse_too_long(documents)
        except RerankError as error:
            raise _as_api_error(error) from None
    started = time.perf_counter()
    ranking = _within_deadline(
        reranking, lambda: reranker.rank_positions(query, [document.text for document in documents], strict=strict),
        model_answered=lambda ranking: ranking.scored > 0 or not ranking.errors)
    results = [RerankResult(documents[position], rank, position, score, reason=why)
               for rank, (position, score, why) in enumerate(ranking.order[:top_k], start=1)]
    scores = [score for _, score, why in ranking.order if why is None]
    return {
        "results": [_result(result, return_documents) for result in results],
        "dropped": [],
        "strategy": API_STRATEGY,
        "provider": "rerank_api",
        "model": reranker.client.model,
        "calls": ranking.requests,
        "estimated_calls": reranker.client.estimate_requests(len(documents)),
        "usage": {"prompt_tokens": ranking.tokens, "completion_tokens": 0},
        "stats": {"fallbacks": len(documents) - ranking.scored, "repairs": ranking.ignored,
                  "ties": len(scores) - len(set(scores)),
                  "elapsed_ms": round((time.perf_counter() - started) * 1000, 1)},
    }


def _within_deadline(reranking: Reranking, start: Callable[[], Awaitable[T]], *,
                     model_answered: Callable[[T], bool]) -> T:
    """Run a rerank coroutine on the graph loop within RERANKER_DEADLINE_S; typed errors -> ApiError.

    The model's circuit breaker (shared with graph search) is consulted first: while it is open
    the answer is a 503 with Retry-After, no model request is sent and no timeout is waited out.
    Failures that are the model's (failed requests, unusable answers, the deadline) count towards
    opening it; a call the model answered closes it."""
    breaker = reranking.breaker
    if not breaker.allow():
        raise _breaker_open(breaker)
    deadline_s = reranking.config.deadline_s

    async def run() -> T:
        async with asyncio.timeout(deadline_s):
            return await start()

    try:
        result = run_on_loop(run(), timeout=deadline_s + 5)
    except TimeoutError:
        breaker.record_failure()
        raise ApiError(504, "rerank_timeout", f"reranking did not finish within {deadline_s:g}s "
                       "(RERANKER_DEADLINE_S)") from None
    except Exception as error:
        if isinstance(error, RerankError) and error.code in MODEL_FAULTS:
            breaker.record_failure()
        raise _as_api_error(error) from None
    if model_answered(result):
        breaker.record_success()
    else:
        breaker.record_failure()
    return result


def _breaker_open(breaker) -> ApiError:
    """The answer while the model's shared circuit breaker (`Reranking.breaker`) skips it."""
    retry_after_s = max(1, math.ceil(breaker.retry_in_s()))
    return ApiError(
        503, "reranker_unavailable",
        f"the reranking model keeps failing (circuit breaker open after {breaker.threshold} failed calls in a "
        f"row, here or in graph search); it is not called for {retry_after_s}s more",
        headers={"Retry-After": str(retry_after_s)}, retry_after_s=retry_after_s,
    )


# A RerankError's code -> the status that says whose fault it is, and the answer's error code.
API_ERRORS = {
    "too_many_documents": (422, "too_many_documents_for_strategy"),
    "invalid_input": (422, "invalid_documents"),
    "document_too_long": (413, "document_too_long"),
    "tournament_plan_mismatch": (422, "tournament_plan_mismatch"),
    "unusable_model_answer": (502, "unusable_model_answer"),
    "model_request_failed": (502, "model_request_failed"),
    "strategy_failed": (500, "strategy_failed"),
}
# The model's own failures, which count towards opening its circuit breaker.
MODEL_FAULTS = frozenset({"unusable_model_answer", "model_request_failed"})


def _as_api_error(error: Exception) -> Exception:
    """Typed rerank errors -> ApiError by their code; anything else goes to the 500 handler."""
    if not isinstance(error, RerankError) or error.code not in API_ERRORS:
        return error
    status, code = API_ERRORS[error.code]
    message = {"unusable_model_answer": f"the reranking model gave an unusable answer: {error}",
               "model_request_failed": f"the reranking model could not be used: {error}"}.get(error.code, str(error))
    details = {"item": error.item} if error.code == "invalid_input" else (
        {"document_id": error.document_id} if error.code == "document_too_long" else {})
    return ApiError(status, code, message, **details)


def _documents(value: Any) -> list[Document]:
    if value is None:
        raise ApiError(400, "missing_field", "'documents' is required (a list of strings or {id, text} objects)")
    if isinstance(value, str):  # JSONL: one {id, text} object or string per line
        try:
            value = Document.jsonl_items(value)
        except RerankError as error:
            raise ApiError(400, "invalid_jsonl", f"'documents' as JSONL: {error}") from None
        refuse_invalid_text(value, "documents")  # JSONL escapes decode only now
    if not isinstance(value, list) or not value:
        raise ApiError(400, "invalid_type", "'documents' must be a non-empty list of strings or {id, text} objects")
    if len(value) > MAX_DOCUMENTS:
        raise ApiError(413, "too_many_documents", f"at most {MAX_DOCUMENTS} documents per request, got {len(value)}")
    documents, total = [], 0
    for index, item in enumerate(value):
        document = _document(item, index)
        total += len(document.text)
        if total > MAX_TOTAL_CHARS:
            raise ApiError(413, "documents_too_large", f"the documents hold more than {MAX_TOTAL_CHARS} characters")
        documents.append(document)
    return documents


def _document(item: Any, index: int) -> Document:
    where = f"documents[{index}]"
    if isinstance(item, str):
        doc_id, text, metadata = str(index), item, {}
    elif isinstance(item, dict):
        doc_id, text, metadata = item.get("id", index), item.get("text"), item.get("metadata") or {}
        if isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)):
            raise ApiError(400, "invalid_type", f"{where}.id must be a string or an integer")
        if not isinstance(text, str):
            raise ApiError(400, "invalid_type", f"{where}.text is required and must be a string")
        if not isinstance(metadata, dict):
            raise ApiError(400, "invalid_type", f"{where}.metadata must be an object")
        if not str(doc_id) or len(str(doc_id)) > MAX_ID_CHARS:  # the id itself is kept verbatim
            raise ApiError(422, "invalid_id", f"{where}.id must be 1 to {MAX_ID_CHARS} characters")
    else:
        raise ApiError(400, "invalid_type", f"{where} must be a string or an object with 'id' and 'text'")
    if not text.strip():
        raise ApiError(422, "empty_document", f"{where} (id {doc_id!r}) has no text")
    if len(text) > MAX_DOCUMENT_CHARS:
        raise ApiError(413, "document_too_large", f"{where} (id {doc_id!r}) is longer than {MAX_DOCUMENT_CHARS} characters")
    return Document(id=doc_id, text=text, metadata=metadata)


def _top_k(body: dict, n_documents: int) -> int | None:
    """The caller's top_k/top_n, or None: then the strategy's own default applies (all; mmr: 5)."""
    given = {key: body[key] for key in ("top_k", "top_n") if body.get(key) is not None}
    if len(given) == 2 and given["top_k"] != given["top_n"]:
        raise ApiError(422, "conflicting_fields", "give 'top_k' or 'top_n' (the same thing), not two different values")
    if not given:
        return None
    key = next(iter(given))
    return min(int_field(body, key, default=n_documents, minimum=1, maximum=MAX_DOCUMENTS), n_documents)


def _flag(body: dict, key: str, default: bool) -> bool:
    value = body.get(key, default)
    if not isinstance(value, bool):
        raise ApiError(400, "invalid_type", f"'{key}' must be true or false")
    return value


def _result(result: RerankResult, return_documents: bool) -> dict[str, Any]:
    # relevance_score + index: the Cohere / Jina / TEI rerank shape; score is kept for earlier clients.
    item: dict[str, Any] = {
        "id": result.document.id, "index": result.original_index, "relevance_score": result.score,
        "score": result.score, "rank": result.rank,
    }
    if result.reason:
        item["reason"] = result.reason
    if return_documents:
        item["document"] = {"text": result.document.text, **({"metadata": result.document.metadata}
                                                              if result.document.metadata else {})}
    return item
