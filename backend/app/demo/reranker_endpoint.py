"""Which OpenAI-compatible server the demo's reranker talks to, and who has to stop it.

An Ollama (or any server) that already answers at RERANKER_BASE_URL with RERANKER_MODEL is used
as it is. Otherwise the local model kit's llama.cpp server is used, started when needed; the demo
stops it at the end only if it started it, so a server the user started stays up.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import httpx

from app.config import Config
from graphiti_llm_rerank import redact_url

logger = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class RerankerEndpoint:
    base_url: str
    model: str
    kind: str  # "ollama": found answering at RERANKER_BASE_URL; "local": the llama.cpp kit
    note: str = ""  # why this endpoint was chosen, for the user

    def describe(self) -> str:
        what = "Ollama-compatible server" if self.kind == "ollama" else "local llama.cpp server"
        return f"{self.model} on the {what} at {redact_url(self.base_url)}"


def served_models(base_url: str, timeout_s: float = PROBE_TIMEOUT_S) -> list[str] | None:
    """Model ids listed by GET {base_url}/models, or None when nothing usable answers."""
    try:
        response = httpx.get(f"{base_url.rstrip('/')}/models", timeout=timeout_s)
        response.raise_for_status()
        data = response.json().get("data", [])
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return [str(item.get("id")) for item in data if isinstance(item, dict)]


def serves_model(models: list[str], wanted: str) -> bool:
    """Ollama lists a model pulled as `name` under `name:latest`."""
    return wanted in models or (":" not in wanted and f"{wanted}:latest" in models)


def find_configured_server(config: Config) -> tuple[RerankerEndpoint | None, str]:
    """The server at RERANKER_BASE_URL when it answers with RERANKER_MODEL; else (None, why not)."""
    from app.local_llm import base_url as local_base_url

    url = config.reranker_base_url
    if url.rstrip("/") == local_base_url(config).rstrip("/"):
        return None, "RERANKER_BASE_URL is the local model server"
    models = served_models(url)
    if models is None:
        return None, f"nothing answers at {redact_url(url)}"
    if not serves_model(models, config.reranker_model):
        return None, (f"{redact_url(url)} answers but has no model {config.reranker_model!r} "
                      f"(it has {', '.join(models[:5]) or 'none'})")
    return RerankerEndpoint(url, config.reranker_model, "ollama", "answering at RERANKER_BASE_URL"), ""


class LocalServerLease:
    """The local model server for the length of a `with` block.

    It is stopped on exit, also after Ctrl-C or an error, when this lease started it: that is when
    no server of ours was running or answering on the port before (a start cut short is stopped too,
    through its pid record). A server that was already up is left running.
    """

    def __init__(self, config: Config):
        self.config = config
        self.started_here = False
        self.endpoint: RerankerEndpoint | None = None

    def __enter__(self) -> "LocalServerLease":
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.release()

    def start(self) -> RerankerEndpoint:
        """Ensure the server runs (installing and assembling what is missing); its endpoint."""
        from app.local_llm import ensure_server, server_status

        state = server_status(self.config).state
        # "not_answering": someone else's server is still loading; "port_in_use" makes ensure_server fail.
        self.started_here = state in ("stopped", "other_model")
        try:
            url = ensure_server(self.config)
        except BaseException:  # a start cut short by an error or Ctrl-C is stopped too
            self.release()
            raise
        self.endpoint = RerankerEndpoint(
            url, self.config.local_llm_model, "local",
            "started for this demo" if self.started_here else "already running; left running afterwards",
        )
        return self.endpoint

    def release(self) -> bool:
        """Stop the server if this lease started it; True when it stopped one."""
        if not self.started_here:
            return False
        from app.local_llm import stop_server

        self.started_here = False
        try:
            return stop_server(self.config)
        except Exception as error:  # cleanup must not hide the original error
            logger.warning("Could not stop the local model server: %s", error)
            return False
