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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

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
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True

    def embed(self, texts: list) -> list[list[float]]:
        with self._lock:
            self.texts += len(texts)
        return [vector(str(text), self.dimension) for text in texts]

    @property
    def env(self) -> dict[str, str]:
        return {"EMBEDDING_PROVIDER": "openai", "EMBEDDING_MODEL": MODEL, "EMBEDDING_API_KEY": MODEL,
                "EMBEDDING_DIM": str(self.dimension),
                "EMBEDDING_BASE_URL": f"http://127.0.0.1:{self._server.server_address[1]}/v1"}

    def __enter__(self) -> "StandInEmbedder":
        threading.Thread(target=self._server.serve_forever, name="stand-in-embedder", daemon=True).start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(embedder: StandInEmbedder) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # one line per request would drown the bench's output
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            texts = body.get("input")
            texts = [texts] if isinstance(texts, str) else texts
            if self.path.rstrip("/") != "/v1/embeddings" or not isinstance(texts, list):
                return self._answer(400, {"error": {"message": "POST /v1/embeddings with an input text or list"}})
            data = [{"object": "embedding", "index": i, "embedding": values}
                    for i, values in enumerate(embedder.embed(texts))]
            self._answer(200, {"object": "list", "model": MODEL, "data": data,
                               "usage": {"prompt_tokens": 0, "total_tokens": 0}})

        def _answer(self, status: int, payload: dict) -> None:
            raw = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

    return Handler
