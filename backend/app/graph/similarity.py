"""How close texts are to a query in the embedder's eyes: cosine of their vectors, written once for
graph search (which neighbourhood facts reach the judge) and the benchmarks (the cosine-only rows)."""

from __future__ import annotations

from collections.abc import Sequence
from contextvars import ContextVar
from typing import Any

import numpy as np

# e5-style embedders embed a search query and a stored text differently (e5's `query: ` and `passage: `
# prefixes). Graphiti calls one `create` for both, so an embedder that tells them apart embeds what
# `create`/`create_batch` get as STORED_TEXT_KIND says (a stored text, unless the graph layer says the
# graph it writes into holds query-embedded texts) and a query through `create_query` (`embed_query`).
PASSAGE_KIND, QUERY_KIND = "passage", "query"
STORED_TEXT_KIND: ContextVar[str] = ContextVar("stored_text_kind", default=PASSAGE_KIND)


def cosines(query_vector: Sequence[float], passage_vectors: Sequence[Sequence[float]]) -> list[float]:
    """Cosine of each passage vector to the query vector (0 for a zero vector)."""
    if not passage_vectors:
        return []
    query = np.asarray(query_vector, dtype=float)
    passages = np.asarray(passage_vectors, dtype=float)
    norms = np.linalg.norm(passages, axis=1) * (np.linalg.norm(query) or 1.0)
    return [float(value) for value in (passages @ query) / np.where(norms == 0, 1.0, norms)]


async def embed_query(embedder: Any, query: str) -> list[float]:
    """The query's vector: through `create_query` where the embedder has one, else `create`."""
    create_query = getattr(embedder, "create_query", None)
    if create_query is not None:
        return await create_query(query)
    return await embedder.create(input_data=[query])


async def query_cosines(embedder: Any, query: str, texts: Sequence[str]) -> list[float]:
    """Embed the query as a query and the texts as stored texts; the cosine of each text to the query."""
    query_vector = await embed_query(embedder, query)
    return cosines(query_vector, await embedder.create_batch(list(texts)) if texts else [])
