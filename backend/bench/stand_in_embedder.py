"""An embedder that answers at once, for measuring what an import costs besides embedding.

`bench scale --stand-in-embedder` serves the app with EMBEDDING_PROVIDER=openai pointed at this
server: `POST /v1/embeddings` answers every text with the normalised sum of one fixed random unit
vector per word (each word's drawn from a generator seeded by the word's SHA-256). The same text
always gets the same vector, and texts that share words are near each other, as real embeddings of
the bench's near-duplicate facts are: purely random vectors (one per text) would make every fact as far
from every other, which no embedder does, and an HNSW index takes several times longer to build over
them and finds far fewer of their true neighbours. The figures it gives are the database's and the
app's (writes, index upkeep, searches); the vectors carry only word overlap, not meaning.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from functools import lru_cache
from http.server import BaseHTTPRequestHandler

import numpy as np

from bench.loopback import LoopbackServer, send_json

MODEL = "stand-in"
DIMENSION = 384  # the local embedder's size; any size works, the app reads it from EMBEDDING_DIM
_WORD = re.compile(r"\w+")


@lru_cache(maxsize=65536)  # the common words; a fact's own number is drawn again when it recurs
def _word_vector(word: str, dimension: int) -> np.ndarray:
    seed = int.from_bytes(hashlib.sha256(word.encode()).digest()[:8], "little")
    return np.random.default_rng(seed).standard_normal(dimension)


def vector(text: str, dimension: int = DIMENSION) -> list[float]:
    words = _WORD.findall(text.lower()) or [text]
    values = np.sum([_word_vector(word, dimension) for word in words], axis=0)
    return (values / np.linalg.norm(values)).tolist()


class StandInEmbedder:
    """The server, on a free loopback port, in a thread; `env` points the app at it."""

    def __init__(self, dimension: int = DIMENSION):
        self.dimension = dimension
        self.texts = 0  # texts embedded so far
        self._lock = threading.Lock()
        self._server = LoopbackServer(_handler(self))

    def embed(self, texts: list) -> list[list[float]]:
        with self._lock:
            self.texts += len(texts)
        return [vector(str(text), self.dimension) for text in texts]

    @property
    def env(self) -> dict[str, str]:
        return {"EMBEDDING_PROVIDER": "openai", "EMBEDDING_MODEL": MODEL, "EMBEDDING_API_KEY": MODEL,
                "EMBEDDING_DIM": str(self.dimension),
                "EMBEDDING_BASE_URL": self._server.base_url}

    def __enter__(self) -> "StandInEmbedder":
        self._server.serve_in_thread("stand-in-embedder")
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.close()


def _handler(embedder: StandInEmbedder) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # one line per request would drown the bench's output
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            texts = body.get("input")
            texts = [texts] if isinstance(texts, str) else texts
            if self.path.rstrip("/") != "/v1/embeddings" or not isinstance(texts, list):
                return send_json(self, 400, {"error": {"message": "POST /v1/embeddings with an input text or list"}})
            data = [{"object": "embedding", "index": i, "embedding": values}
                    for i, values in enumerate(embedder.embed(texts))]
            send_json(self, 200, {"object": "list", "model": MODEL, "data": data,
                                  "usage": {"prompt_tokens": 0, "total_tokens": 0}})

    return Handler
