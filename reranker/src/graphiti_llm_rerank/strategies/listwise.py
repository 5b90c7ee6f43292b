"""Listwise: one prompt shows every candidate as a JSON array; the model answers
{"reranked_indices": [...], "is_rejected": bool, "rejection_reason": str}.

The answer is validated as a permutation and repaired (graphiti_llm_rerank/permutation.py), repairs counted.
`is_rejected` means no candidate is relevant at all: the order is kept as answered (or incoming)
and every result carries the rejection reason. `rank_list` is also the unit sliding_window uses.
"""

from __future__ import annotations

from graphiti_llm_rerank.config import DEFAULT_MAX_DOCUMENT_CHARS
from collections.abc import Sequence

from graphiti_llm_rerank.strategies.answer_parsing import ListAnswer, listwise_answer
from graphiti_llm_rerank.strategies.base import (
    JudgeCall, check_count, judge_call_for, longest_id, results_in_order, shown_texts,
)
from graphiti_llm_rerank.strategies.strategy_prompts import listwise_messages
from graphiti_llm_rerank.types import Document, RerankError, RerankResult

DEFAULT_MAX_DOCUMENTS = 100


def answer_tokens(n_documents: int) -> int:
    """Room for every index (a few tokens each) plus a short rejection reason."""
    return 48 + 4 * n_documents


async def rank_list(
    call: JudgeCall, query: str, documents: Sequence[Document], passages: Sequence[str], what: str
) -> ListAnswer:
    """One listwise call over `documents` shown as `passages`; on an unusable answer (lenient) the
    incoming order, counted."""
    size = len(documents)
    try:
        messages = listwise_messages(query, list(passages), call.instructions)
        call.check_fits(messages, answer_tokens(size), longest_id(documents), what)
        text, _ = await call.complete(messages, max_tokens=answer_tokens(size), json_object=True)
        answer = call.parsed(listwise_answer, text, size, repair=not call.strict)
    except RerankError as error:
        call.unit_failed(error, what)
        return ListAnswer(list(range(size)), report=None)
    call.record_repairs(answer.report, what)
    call.unit_succeeded()
    return answer


class ListwiseStrategy:
    name = "listwise"

    def __init__(
        self, *, max_document_chars: int = DEFAULT_MAX_DOCUMENT_CHARS, max_documents: int = DEFAULT_MAX_DOCUMENTS
    ):
        if max_document_chars < 1 or max_documents < 1:
            raise ValueError("max_document_chars and max_documents must be >= 1")
        self.max_document_chars = max_document_chars
        self.max_documents = max_documents

    def estimate_calls(self, n_documents: int, top_k: int | None = None) -> int:
        return 1 if n_documents > 1 else 0

    async def rerank(self, query: str, documents: list[Document], provider, top_k: int | None = None) -> list[RerankResult]:
        call = judge_call_for(provider)
        check_count(self, documents)
        if len(documents) <= 1:
            return results_in_order(documents, range(len(documents)), top_k)
        passages = shown_texts(call, documents, self.max_document_chars)
        answer = await rank_list(call, query, documents, passages, "listwise")
        call.raise_if_nothing_worked()
        if not answer.rejected:
            return results_in_order(documents, answer.order, top_k)
        reason = f"rejected: {answer.rejection_reason or 'the model found no relevant document'}"
        reasons = dict.fromkeys(range(len(documents)), reason)
        flags = {index: {"rejected": True} for index in range(len(documents))}
        return results_in_order(documents, answer.order, top_k, reasons=reasons, metadata=flags)
