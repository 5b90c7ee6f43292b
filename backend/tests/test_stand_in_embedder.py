"""The bench's stand-in embedder over real HTTP: one unit vector per text, the same for the same text,
nearer for texts that share words."""

from __future__ import annotations

import math

import pytest

from bench.stand_in_embedder import StandInEmbedder
from app.graph.similarity import cosines
from tests.support.app_process import call


@pytest.fixture
def embedder():
    with StandInEmbedder(dimension=16) as server:
        yield server


def test_each_text_gets_a_unit_vector_the_same_every_time(embedder):
    url = embedder.env["EMBEDDING_BASE_URL"] + "/embeddings"
    status, body = call(url, "POST", {"model": "stand-in", "input": ["harbor", "reservoir", "harbor"]})
    assert status == 200 and [item["index"] for item in body["data"]] == [0, 1, 2]
    first, second, again = (item["embedding"] for item in body["data"])
    assert len(first) == 16 and math.isclose(sum(value * value for value in first), 1.0, rel_tol=1e-9)
    assert first == again and first != second
    status, single = call(url, "POST", {"model": "stand-in", "input": "harbor"})
    assert status == 200 and single["data"][0]["embedding"] == first
    assert embedder.texts == 4


def test_texts_that_share_words_are_nearer_than_texts_that_share_none():
    with StandInEmbedder() as server:
        status, body = call(server.env["EMBEDDING_BASE_URL"] + "/embeddings", "POST", {"model": "stand-in", "input": [
            "Sensor 12 at North Reservoir measures pressure", "Sensor 12 at North Reservoir measures flow",
            "a harbor crane lifted two containers"]})
    assert status == 200
    base, sibling, stranger = (item["embedding"] for item in body["data"])
    near, far = cosines(base, [sibling, stranger])
    assert near > 0.7 and abs(far) < 0.3, (near, far)


def test_a_request_without_input_is_refused(embedder):
    status, body = call(embedder.env["EMBEDDING_BASE_URL"] + "/embeddings", "POST", {"model": "stand-in"})
    assert status == 400 and "input" in body["error"]["message"]
