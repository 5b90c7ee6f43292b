"""How close texts are to a query in the embedder's eyes: cosine of their vectors, written once for
graph search (which neighbourhood facts reach the judge) and the benchmarks (the cosine-only rows)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def cosines(query_vector: Sequence[float], passage_vectors: Sequence[Sequence[float]]) -> list[float]:
    """Cosine of each passage vector to the query vector (0 for a zero vector)."""
    if not passage_vectors:
        return []
    query = np.asarray(query_vector, dtype=float)
    passages = np.asarray(passage_vectors, dtype=float)
    norms = np.linalg.norm(passages, axis=1) * (np.linalg.norm(query) or 1.0)
    return [float(value) for value in (passages @ query) / np.where(norms == 0, 1.0, norms)]


async def query_cosines(embedder: Any, query: str, texts: Sequence[str]) -> list[float]:
    """Embed the query and the texts in one batch; the cosine of each text to the query."""
    vectors = await embedder.create_batch([query, *texts])
    return cosines(vectors[0], vectors[1:])
