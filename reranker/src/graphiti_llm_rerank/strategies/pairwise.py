"""Pairwise (PRP sliding-K): bubble passes from the bottom of the list up, comparing adjacent pairs.

Each comparison asks both orders, (A=upper, B=lower) and (A=lower, B=upper), which cancels the
model's position bias: only when both answers prefer the lower document does it move up; answers
that disagree are a tie and keep the current order (counted). A comparison whose answer is unusable
keeps the current order (counted).

As specified, `passes` (default 10) full passes each compare all n-1 adjacent pairs, in both orders:
2 * passes * (n - 1) calls (380 for 20 documents), whatever top_k (it only cuts the results).
`settled_top_shortcut=True` spends less: pass p settles position p (given a consistent model), so
later passes skip the settled top, and no more passes run than top_k or n-1 need:
2 * sum(n - 1 - p) over those passes. `pair_order_parallelism` is 2 (both orders of a pair at
once) or 1 (one after the other; the second is not asked when the first failed). Pairs themselves
always run one after another: each comparison depends on the previous swap.
"""

from __future__ import annotations

import asyncio

from graphiti_llm_rerank.config import DEFAULT_MAX_DOCUMENT_CHARS
from graphiti_llm_rerank.strategies.answer_parsing import pairwise_answer
from graphiti_llm_rerank.strategies.base import (
    JudgeCall, check_count, first_failure, judge_call_for, results_in_order, shown_texts,
)
from graphiti_llm_rerank.strategies.strategy_prompts import pairwise_messages
from graphiti_llm_rerank.types import Document, RerankError, RerankResult

_ANSWER_TOKENS = 16


class PairwiseStrategy:
    name = "pairwise"

    def __init__(
        self,
        *,
        passes: int = 10,
        settled_top_shortcut: bool = False,
        pair_order_parallelism: int = 2,
        max_document_chars: int = DEFAULT_MAX_DOCUMENT_CHARS,
        max_documents: int = 200,
    ):
        if passes < 1 or max_document_chars < 1:
            raise ValueError("passes and max_document_chars must be >= 1")
        if pair_order_parallelism not in (1, 2):
            raise ValueError(f"pair_order_parallelism must be 1 or 2, got {pair_order_parallelism}")
        self.passes = passes
        self.settled_top_shortcut = settled_top_shortcut
        self.pair_order_parallelism = pair_order_parallelism
        self.max_document_chars = max_document_chars
        self.max_documents = max_documents

    def pass_spans(self, n_documents: int, top_k: int | None = None) -> list[int]:
        """For each pass that runs, the position above which it stops (0: a full pass)."""
        if n_documents <= 1:
            return []
        if not self.settled_top_shortcut:
            return [0] * self.passes
        wanted = self.passes if top_k is None else min(self.passes, top_k)
        return list(range(min(wanted, n_documents - 1)))

    def estimate_calls(self, n_documents: int, top_k: int | None = None) -> int:
        """Two calls (both orders) per adjacent comparison: n-1 per full pass, n-1-p with the shortcut."""
        return 2 * sum(n_documents - 1 - top for top in self.pass_spans(n_documents, top_k))

    async def rerank(self, query: str, documents: list[Document], provider, top_k: int | None = None) -> list[RerankResult]:
        call = judge_call_for(provider)
        check_count(self, documents)
        texts = shown_texts(call, documents, self.max_document_chars)
        order = list(range(len(documents)))
        spans = self.pass_spans(len(documents), top_k)
        for top in spans:
            for upper in range(len(documents) - 2, top - 1, -1):
                if await self._lower_wins(call, query, texts, documents, order[upper], order[upper + 1]):
                    order[upper], order[upper + 1] = order[upper + 1], order[upper]
        if spans:
            call.raise_if_nothing_worked()
        return results_in_order(documents, order, top_k)

    async def _lower_wins(self, call: JudgeCall, query, texts, documents, upper: int, lower: int) -> bool:
        """True only when both orders prefer the lower document."""
        answers = await self._both_orders(call, query, texts, documents, upper, lower)
        failure = first_failure(answers)
        if failure is not None:
            call.unit_failed(failure, f"pairwise comparison of {documents[upper].id!r} and {documents[lower].id!r}")
            return False
        upper_first, lower_first = answers
        call.unit_succeeded()
        lower_preferred = (upper_first == "B", lower_first == "A")
        if lower_preferred[0] != lower_preferred[1]:
            call.ties += 1
        return all(lower_preferred)

    async def _both_orders(self, call: JudgeCall, query, texts, documents, upper: int, lower: int) -> list:
        """Both answers, or the errors in their place."""
        asks = (self._ask(call, query, texts, documents, upper, lower),
                self._ask(call, query, texts, documents, lower, upper))
        if self.pair_order_parallelism == 2:
            # Both answers are read even when one fails: every answer sent is counted (an unusable one
            # as an invalid output).
            return list(await asyncio.gather(*asks, return_exceptions=True))
        answers: list = []
        for ask in asks:
            if answers and isinstance(answers[0], RerankError):
                ask.close()  # never started: the first order already failed the comparison
                answers.append(answers[0])
                continue
            try:
                answers.append(await ask)
            except RerankError as error:
                answers.append(error)
        return answers

    async def _ask(self, call: JudgeCall, query, texts, documents, first: int, second: int) -> str:
        messages = pairwise_messages(query, texts[first], texts[second], call.instructions)
        longest = max((documents[first], documents[second]), key=lambda document: len(document.text)).id
        call.check_fits(messages, _ANSWER_TOKENS, longest, "pairwise")
        text, _ = await call.complete(messages, max_tokens=_ANSWER_TOKENS, json_object=True)
        return call.parsed(pairwise_answer, text)
