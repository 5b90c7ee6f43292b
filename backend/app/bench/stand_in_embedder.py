"""An embedder that answers at once, for measuring what an import costs besides embedding.

`bench scale --stand-in-embedder` serves the app with EMBEDDING_PROVIDER=openai pointed at this
server: `POST /v1/embeddings` answers every text with a unit vector drawn from a generator seeded by
the text's SHA-256, so the same text always gets the same vector and different texts are unrelated.
The figures it gives are the database's and the app's (writes, index upkeep, searches); the vectors
carry no meaning, so the index's recall on them is that of random points (a harder case for an HNSW
graph than real embeddings, which cluster).
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler

import numpy as np

from app.bench.loopback import LoopbackServer, send_json

MODEL = "stand-in"
DIMENSION = 384  # the local embedder's size; any size works, the app reads it from EMBEDDING_DIM


def vector(text: str, dimension: int = DIMENSION) -> list[float]:
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    values = np.random.default_rng(seed).standard_normal(dimension)
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
