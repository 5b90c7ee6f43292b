"""A scripted Ollama for the fault shapes a real one cannot be made to show on demand: real HTTP on
127.0.0.1 (port 0), in a thread, speaking the part of Ollama's own API that model provisioning uses
(app/local_llm/ensure_models.py).

    from tests.support.scripted_ollama import ScriptedOllama, pull_events

    script = {"m:1b": pull_events([("downloading", 50, 100)], error="connection reset by peer")}
    with ScriptedOllama(models=["present:1b"], pulls=script) as ollama:
        config = dataclasses.replace(config, llm_base_url=ollama.base_url, ...)
        ...
        assert ollama.paths == ["/api/show", "/api/pull"]

Serves GET /api/version, and POST /api/show (200 for a model in `models`, else Ollama's 404),
/api/pull (the model's entry in `pulls`: a list of NDJSON events sent as one 200 stream, or any Reply
from scripted_llm; a stream that carries {"status": "success"} adds the model; no entry: Ollama's
offline manifest error), /api/generate (one token) and /api/embed (`embedding_dim` zeros).
It reuses ScriptedLLMServer's machinery (request log, delays, hangs, stop).
"""

from __future__ import annotations

import json
from typing import Any, Iterable

from tests.support.scripted_llm import ScriptedLLMServer
from tests.support.scripted_llm_replies import ChatRequest, Reply, raw_json

__all__ = ["ScriptedOllama", "pull_events"]

_POST_PATHS = ("/api/show", "/api/pull", "/api/generate", "/api/embed")


def pull_events(downloads: Iterable[tuple[str, int, int]] = (), *, error: str | None = None,
                success: bool = False) -> list[dict[str, Any]]:
    """The lines of one pull: the manifest line, a progress line per (digest, completed, total), then
    an {"error"} line, or {"status": "success"}, or nothing more (a stream that just ends)."""
    events: list[dict[str, Any]] = [{"status": "pulling manifest"}]
    for digest, completed, total in downloads:
        events.append({"status": f"pulling {digest[:12]}", "digest": f"sha256:{digest}",
                       "total": total, "completed": completed})
    if error is not None:
        events.append({"error": error})
    elif success:
        events += [{"status": "verifying sha256 digest"}, {"status": "writing manifest"}, {"status": "success"}]
    return events


class ScriptedOllama(ScriptedLLMServer):
    """An Ollama whose models and pulls are scripted (module docstring)."""

    def __init__(self, *, models: Iterable[str] = (), pulls: dict[str, Any] | None = None,
                 version: str = "0.17.4", embedding_dim: int = 1024) -> None:
        super().__init__()
        self.present = set(models)
        self.pulls = dict(pulls or {})
        self.version = version
        self.embedding_dim = embedding_dim
        self.paths: list[str] = []  # POST paths, in arrival order

    def serves(self, path: str) -> bool:
        return path in _POST_PATHS

    def answer_get(self, path: str):
        if path != "/api/version":
            return None
        return 200, {}, json.dumps({"version": self.version}).encode()

    def _reply_for(self, request: ChatRequest) -> Reply:  # type: ignore[override]
        self.paths.append(request.path)
        name = request.model
        if request.path == "/api/pull":
            return self._pull(name)
        if name not in self.present:
            return raw_json({"error": f"model '{name}' not found"}, 404)
        if request.path == "/api/show":
            return raw_json({"details": {"format": "gguf"}, "capabilities": ["completion"]})
        if request.path == "/api/generate":
            return raw_json({"model": name, "response": "OK", "done": True, "done_reason": "length"})
        return raw_json({"model": name, "embeddings": [[0.0] * self.embedding_dim]})

    def _pull(self, name: str) -> Reply:
        script = self.pulls.get(name)
        if script is None:  # what a real Ollama without internet access answers
            script = [{"status": "pulling manifest"},
                      {"error": f"pull model manifest: Get \"https://registry.ollama.ai/v2/library/{name}\": "
                                "dial tcp: lookup registry.ollama.ai: no such host"}]
        if isinstance(script, Reply):
            return script
        if any(event.get("status") == "success" for event in script):
            self.present.add(name)
        stream = "".join(json.dumps(event) + "\n" for event in script).encode()
        return Reply(lambda request: (200, {}, stream))
