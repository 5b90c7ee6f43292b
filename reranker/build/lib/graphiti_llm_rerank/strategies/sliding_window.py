"""Sliding window (RankGPT): listwise over windows of `window_size`, moved by `stride` from the back of
the list to the front, so the best documents bubble up into the next window and reach the top.

One pass settles the top `window_size - stride` positions exactly (given a consistent model); lower
positions are only partly sorted. A window whose answer is unusable keeps its order (counted).
"""

from __future__ import annotations

from graphiti_llm_rerank.config import DEFAULT_MAX_DOCUMENT_CHARS
import math

from graphiti_llm_rerank.strategies.base import check_count, judge_call_for, results_in_order, shown_texts
from graphiti_llm_rerank.strategies.listwise import rank_list
from graphiti_llm_rerank.types import Document, RerankResult


class SlidingWindowStrategy:
    name = "sliding_window"

    def __init__(
        self,
        *,
        window_size: int = 20,
        stride: int = 10,
        max_document_chars: int = DEFAULT_MAX_DOCUMENT_CHARS,
        max_documents: int | None = 1000,
    ):
        if window_size < 2:
            raise ValueError(f"window_size must be >= 2, got {window_size}")
        if not 1 <= stride < window_size:
            raise ValueError(f"stride must be >= 1 and smaller than window_size ({window_size}), got {stride}")
        if max_document_chars < 1:
            raise ValueError(f"max_document_chars must be >= 1, got {max_document_chars}")
        self.window_size = window_size
        self.stride = stride
        self.max_document_chars = max_document_chars
        self.max_documents = max_documents

    def windows(self, n_documents: int) -> list[tuple[int, int]]:
        """(start, end) of each window, back to front."""
        if n_documents <= 1:
            return []
        spans, end = [], n_documents
        while True:
            start = max(0, end - self.window_size)
            spans.append((start, end))
            if start == 0:
                return spans
            end -= self.stride

    def estimate_calls(self, n_documents: int, top_k: int | None = None) -> int:
        if n_documents <= 1:
            return 0
        return 1 + math.ceil(max(0, n_documents - self.window_size) / self.stride)

    async def rerank(self, query: str, documents: list[Document], provider, top_k: int | None = None) -> list[RerankResult]:
        call = judge_call_for(provider)
        check_count(self, documents)
        texts = shown_texts(call, documents, self.max_document_chars)
        order = list(range(len(documents)))
        spans = self.windows(len(documents))
        for number, (start, end) in enumerate(spans, start=1):
            window = order[start:end]
            what = f"sliding_window window {number}/{len(spans)}"
            answer = await rank_list(call, query, [documents[i] for i in window], [texts[i] for i in window], what)
            order[start:end] = [window[position] for position in answer.order]
        if spans:
            call.raise_if_nothing_worked()
        return results_in_order(documents, order, top_k)
