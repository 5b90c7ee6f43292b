"""Pairwise (PRP sliding-K): bubble passes from the bottom of the list up, comparing adjacent pairs.

Each comparison asks both orders, (A=upper, B=lower) and (A=lower, B=upper), concurrently, which
cancels the model's position bias: only when both answers prefer the lower document does it move
up; answers that disagree are a tie and keep the current order (counted). Pass p settles position
p, so `passes` (default 10, at most top_k when given) is the number of top positions settled.
A comparison whose answer is unusable keeps the current order (counted).
"""

from __future__ import annotations

import asyncio

from app.config import DEFAULT_MAX_DOCUMENT_CHARS
from app.rerank.judge_call import JudgeCall
from app.rerank.strategies.answer_parsing import pairwise_answer
from app.rerank.strategies.base import (
    check_count, first_failure, judge_call_for, results_in_order, shown_texts,
)
from app.rerank.strategies.strategy_prompts import pairwise_messages
from app.rerank.types import Document, RerankResult

_ANSWER_TOKENS = 16


class PairwiseStrategy:
    name = "pairwise"

    def __init__(
        self, *, passes: int = 10, max_document_chars: int = DEFAULT_MAX_DOCUMENT_CHARS, max_documents: int = 200
    ):
        if passes < 1 or max_document_chars < 1:
            raise ValueError("passes and max_document_chars must be >= 1")
        self.passes = passes
        self.max_document_chars = max_document_chars
        self.max_documents = max_documents

    def settled_positions(self, n_documents: int, top_k: int | None = None) -> int:
        wanted = self.passes if top_k is None else min(self.passes, top_k)
        return max(0, min(wanted, n_documents - 1))

    def estimate_calls(self, n_documents: int, top_k: int | None = None) -> int:
        """Two calls (both orders) per adjacent comparison; pass p compares n-1-p pairs."""
        return 2 * sum(n_documents - 1 - p for p in range(self.settled_positions(n_documents, top_k)))

    async def rerank(self, query: str, documents: list[Document], provider, top_k: int | None = None) -> list[RerankResult]:
        session = judge_call_for(provider)
        check_count(self, documents)
        texts = shown_texts(session, documents, self.max_document_chars)
        order = list(range(len(documents)))
        passes = self.settled_positions(len(documents), top_k)
        for settled in range(passes):
            for upper in range(len(documents) - 2, settled - 1, -1):
                if await self._lower_wins(session, query, texts, documents, order[upper], order[upper + 1]):
                    order[upper], order[upper + 1] = order[upper + 1], order[upper]
        if passes:
            session.raise_if_nothing_worked()
        return results_in_order(documents, order, top_k)

    async def _lower_wins(self, session: JudgeCall, query, texts, documents, upper: int, lower: int) -> bool:
        """True only when both orders prefer the lower document."""
        # Both orders run concurrently and both answers are read, even when one fails: each answer
        # sent is an answer counted (an unusable one as an invalid output).
        answers = await asyncio.gather(self._ask(session, query, texts, documents, upper, lower),
                                       self._ask(session, query, texts, documents, lower, upper),
                                       return_exceptions=True)
        failure = first_failure(answers)
        if failure is not None:
            session.unit_failed(failure, f"pairwise comparison of {documents[upper].id!r} and {documents[lower].id!r}")
            return False
        upper_first, lower_first = answers
        session.unit_succeeded()
        lower_preferred = (upper_first == "B", lower_first == "A")
        if lower_preferred[0] != lower_preferred[1]:
            session.ties += 1
        return all(lower_preferred)

    async def _ask(self, session: JudgeCall, query, texts, documents, first: int, second: int) -> str:
        messages = pairwise_messages(query, texts[first], texts[second], session.instructions)
        longest = max((documents[first], documents[second]), key=lambda document: len(document.text)).id
        session.check_fits(messages, _ANSWER_TOKENS, longest, "pairwise")
        text, _ = await session.complete(messages, max_tokens=_ANSWER_TOKENS, json_object=True)
        return session.parsed(pairwise_answer, text)
