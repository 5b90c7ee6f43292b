"""The local embedder serves a search's query while an import's large batch is being embedded:
the query does not wait for the batch, and both get the vectors they would get alone. It embeds a
text it has embedded recently only once, and gives the same vector for it."""

from __future__ import annotations

import asyncio
import threading

import numpy as np

from app.graph.local_embedder import LocalE5Embedder, VectorCache

BATCH = [f"Pump station {i} feeds reservoir {i % 9} through the old cast-iron main under the market square, "
         f"which the utility plans to renew section by section" for i in range(240)]
QUERY = "which main runs under the market square"


def test_a_query_is_embedded_while_a_large_batch_runs_and_both_match_their_solo_vectors():
    # No cache: the query must be embedded while the batch runs, not found among kept vectors.
    embedder = LocalE5Embedder(cache=None)
    solo_query = asyncio.run(embedder.create(QUERY))
    solo_batch = asyncio.run(embedder.create_batch(BATCH[:3]))

    batch_done = threading.Event()
    batch_vectors: list = []

    def run_batch():
        batch_vectors.extend(asyncio.run(embedder.create_batch(BATCH)))
        batch_done.set()

    worker = threading.Thread(target=run_batch)
    worker.start()
    # Let the batch start: the first chunk is on the engine before the query is asked for.
    assert not batch_done.wait(0.3), "the batch ended before the query was sent; make it larger"
    query_vector = asyncio.run(embedder.create(QUERY))
    query_beat_batch = not batch_done.is_set()
    worker.join(timeout=600)

    assert query_beat_batch, "the query waited for the whole batch"
    assert np.allclose(query_vector, solo_query, atol=1e-5)
    assert len(batch_vectors) == len(BATCH)
    assert np.allclose(batch_vectors[:3], solo_batch, atol=1e-5)


def test_a_text_embedded_again_is_taken_from_the_cache_with_the_same_vector():
    cache = VectorCache(size=4)
    embedder = LocalE5Embedder(cache=cache)
    uncached = asyncio.run(LocalE5Embedder(cache=None).create_batch(BATCH[:3]))

    first = asyncio.run(embedder.create_batch(BATCH[:3] + [BATCH[0]]))  # a repeat inside one batch
    assert (cache.hits, cache.misses, len(cache)) == (0, 4, 3)
    again = asyncio.run(embedder.create_batch([BATCH[2], BATCH[0]]))
    assert (cache.hits, cache.misses) == (2, 4)
    assert np.allclose(first[:3], uncached, atol=1e-5) and first[3] == first[0]
    assert again == [first[2], first[0]]

    # Past its size the least recently used text goes: BATCH[1] was not asked for since the first batch.
    asyncio.run(embedder.create_batch(BATCH[3:5]))
    assert len(cache) == 4
    asyncio.run(embedder.create_batch([BATCH[1]]))
    assert cache.misses == 4 + 2 + 1
    assert asyncio.run(embedder.create(BATCH[0])) == first[0] and cache.hits == 3
