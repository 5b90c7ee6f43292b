"""Make the models the settings name present on their Ollama, and answering, before the app serves.

    python -m app.local_llm.ensure_models           # wait for Ollama, pull what is missing, check each answers
    python -m app.local_llm.ensure_models --check   # only ask whether each model is there (a health check)

The models: LLM_MODEL_NAME and LLM_SMALL_MODEL_NAME at LLM_BASE_URL; EMBEDDING_MODEL at
EMBEDDING_BASE_URL when EMBEDDING_PROVIDER=openai; RERANKER_MODEL at RERANKER_BASE_URL when
RERANKER_PROVIDER=ollama (a rerank_api reranker is not served by Ollama). Those URLs are the
OpenAI-style ones the app calls (`http://ollama:11434/v1`); Ollama's own API is at the root above
them, and that is what this speaks:

    GET  /api/version    does an Ollama answer (waited for up to OLLAMA_WAIT_S)
    POST /api/show       is the model there (a 404 says not)
    POST /api/pull       fetch it; progress streams as NDJSON lines, an error as an {"error"} line
    POST /api/generate   one token from a chat model ...
    POST /api/embed      ... or one embedding, whose length must be EMBEDDING_DIM

A model already there is not pulled again: Ollama's pull always asks its registry for the manifest,
so a present model would fail to "pull" on a machine without internet access.

`--check` neither waits nor pulls nor loads a model (a generation would load it, and keep it loaded,
at every probe, queued behind the reranker's requests); it fails while any model is missing.

Exit status 0 when every model is ready; 1 otherwise, with one line on stderr per model (or per
server that does not answer) saying which, where, and what went wrong. Progress goes to `logging`.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import httpx

from app.config import Config
from app.local_llm.ollama_build import OLLAMA_VERSION

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 5.0  # one /api/version or /api/show request
POLL_S = 1.0  # between /api/version probes while Ollama starts
# A pull streams a progress line several times a second while it downloads; this long without a line
# means the download is stuck.
PULL_IDLE_TIMEOUT_S = 300.0
PROGRESS_STEP = 10  # log a layer's download at every this many percent
START_HINT = "start one: `make ollama` here, `docker compose up -d ollama` for the compose stack"


class ModelNotReady(RuntimeError):
    """A model that is missing, cannot be pulled, or does not answer; the message says which and why."""


class OllamaNotAnswering(RuntimeError):
    """No Ollama answers at a server's URL within the wait."""


@dataclass(frozen=True)
class NeededModel:
    name: str
    server: str  # Ollama's root URL, e.g. http://ollama:11434
    kinds: tuple[str, ...]  # "chat" and/or "embedding": how to check that it answers
    settings: tuple[str, ...]  # the settings that name it, for the messages

    def describe(self) -> str:
        return f"model {self.name} ({', '.join(self.settings)}) on {_shown(self.server)}"


def ollama_root(base_url: str) -> str:
    """Ollama's own API root from an OpenAI-style base URL: http://ollama:11434/v1 -> http://ollama:11434."""
    root = base_url.rstrip("/")
    return root.removesuffix("/v1").rstrip("/")


def needed_models(config: Config) -> list[NeededModel]:
    """The models the settings use from an Ollama, once per (server, name), in settings order."""
    wanted: list[tuple[str, str, str, str]] = [
        (config.llm_model_name, config.llm_base_url, "chat", "LLM_MODEL_NAME"),
        (config.llm_small_model_name, config.llm_base_url, "chat", "LLM_SMALL_MODEL_NAME"),
    ]
    if config.embedding_provider == "openai":
        wanted.append((config.embedding_model, config.embedding_base_url, "embedding", "EMBEDDING_MODEL"))
    # By name, not through graphiti_llm_rerank's registry: the model command imports neither Graphiti nor the OpenAI client.
    if config.reranker_provider == "ollama":
        wanted.append((config.reranker_model, config.reranker_base_url, "chat", "RERANKER_MODEL"))
    merged: dict[tuple[str, str], NeededModel] = {}
    for name, base_url, kind, setting in wanted:
        key = (ollama_root(base_url), name)
        known = merged.get(key)
        if known is None:
            merged[key] = NeededModel(name, key[0], (kind,), (setting,))
        else:
            kinds = known.kinds if kind in known.kinds else (*known.kinds, kind)
            merged[key] = NeededModel(name, key[0], kinds, (*known.settings, setting))
    return list(merged.values())


def wait_for_ollama(client: httpx.Client, server: str, wait_s: float) -> str:
    """Ollama's version once GET /api/version answers; OllamaNotAnswering after `wait_s`."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            response = client.get(f"{server}/api/version", timeout=PROBE_TIMEOUT_S)
            version = response.json().get("version") if response.status_code == 200 else None
            if isinstance(version, str):
                return version
            last = f"GET /api/version answered {response.status_code}, not Ollama's version"
        except (httpx.HTTPError, ValueError, AttributeError) as exc:
            last = _reason(exc)
        if time.monotonic() >= deadline:
            raise OllamaNotAnswering(
                f"no Ollama answers at {_shown(server)} (waited {wait_s:g} s; {last}); {START_HINT}")
        time.sleep(POLL_S)


def has_model(client: httpx.Client, model: NeededModel) -> bool:
    response = client.post(f"{model.server}/api/show", json={"model": model.name}, timeout=PROBE_TIMEOUT_S)
    if response.status_code == 404:
        return False
    if response.status_code != 200:
        raise ModelNotReady(f"{model.describe()}: /api/show answered {_status(response)}")
    return True


def pull(client: httpx.Client, model: NeededModel) -> None:
    """POST /api/pull, logging its progress; ModelNotReady unless the stream ends with "success"."""
    log.info("pulling %s", model.describe())
    timeout = httpx.Timeout(PROBE_TIMEOUT_S, read=PULL_IDLE_TIMEOUT_S)
    progress = _Progress(model.name)
    try:
        with client.stream("POST", f"{model.server}/api/pull", json={"model": model.name, "stream": True},
                           timeout=timeout) as response:
            if response.status_code != 200:
                response.read()
                raise ModelNotReady(f"{model.describe()}: cannot be pulled: {_status(response)}")
            for line in response.iter_lines():
                event = _json_line(line)
                if event is None:
                    continue
                if "error" in event:  # Ollama reports a failure mid-stream as a line of its own
                    raise ModelNotReady(f"{model.describe()}: cannot be pulled: {event['error']}")
                progress.show(event)
                if event.get("status") == "success":
                    return
    except httpx.HTTPError as exc:
        raise ModelNotReady(f"{model.describe()}: the pull broke off: {_reason(exc)}") from exc
    raise ModelNotReady(f"{model.describe()}: the pull ended without Ollama saying success "
                        f"(last: {progress.last_status or 'nothing'})")


def check_answers(client: httpx.Client, model: NeededModel, config: Config) -> None:
    """One token from a chat model, one embedding (of EMBEDDING_DIM numbers) from an embedding model."""
    # The first request loads the model: allow what the app allows its LLM calls.
    timeout = httpx.Timeout(PROBE_TIMEOUT_S, read=config.llm_timeout_s)
    try:
        if "chat" in model.kinds:
            response = client.post(f"{model.server}/api/generate", timeout=timeout, json={
                "model": model.name, "prompt": "Say OK.", "stream": False, "options": {"num_predict": 1}})
            if response.status_code != 200 or not _body(response).get("done"):
                raise ModelNotReady(f"{model.describe()}: a one-token generation failed: {_status(response)}")
        if "embedding" in model.kinds:
            response = client.post(f"{model.server}/api/embed", timeout=timeout,
                                   json={"model": model.name, "input": "ping"})
            embeddings = _body(response).get("embeddings") if response.status_code == 200 else None
            if not (isinstance(embeddings, list) and embeddings and isinstance(embeddings[0], list)):
                raise ModelNotReady(f"{model.describe()}: an embedding request failed: {_status(response)}")
            if len(embeddings[0]) != config.embedding_dim:
                raise ModelNotReady(f"{model.describe()}: embeddings have {len(embeddings[0])} numbers, "
                                    f"EMBEDDING_DIM says {config.embedding_dim}")
    except httpx.HTTPError as exc:
        raise ModelNotReady(f"{model.describe()}: did not answer: {_reason(exc)}") from exc


def ensure_models(config: Config, *, check_only: bool = False) -> list[str]:
    """Every needed model present (pulled if missing) and answering; the problems, one line each."""
    models = needed_models(config)
    problems: list[str] = []
    answering: dict[str, bool] = {}
    with httpx.Client() as client:
        for model in models:
            if model.server not in answering:
                answering[model.server] = _server_answers(client, model.server, config, check_only, problems)
            if not answering[model.server]:
                continue
            try:
                present = has_model(client, model)
                if not present and check_only:
                    raise ModelNotReady(f"{model.describe()}: not there (pull it: "
                                        f"python -m app.local_llm.ensure_models)")
                if not present:
                    pull(client, model)
                    if not has_model(client, model):
                        raise ModelNotReady(f"{model.describe()}: pulled, yet /api/show does not know it")
                if not check_only:
                    check_answers(client, model, config)
                    log.info("%s answers", model.describe())
            except httpx.HTTPError as exc:
                problems.append(f"{model.describe()}: {_reason(exc)}")
            except ModelNotReady as exc:
                problems.append(str(exc))
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.local_llm.ensure_models", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="only check that every model is there: no wait, no pull, no generation")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per probe is noise
    config = Config.from_env()
    problems = ensure_models(config, check_only=args.check)
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return 1 if problems else 0


def _server_answers(client: httpx.Client, server: str, config: Config, check_only: bool,
                    problems: list[str]) -> bool:
    try:
        version = wait_for_ollama(client, server, 0.0 if check_only else config.ollama_wait_s)
    except OllamaNotAnswering as exc:
        problems.append(str(exc))
        return False
    if not check_only:
        log.info("Ollama %s answers at %s", version, _shown(server))
        if version != OLLAMA_VERSION:
            log.warning("Ollama %s at %s is not the version this project tests (%s)",
                        version, _shown(server), OLLAMA_VERSION)
    return True


class _Progress:
    """Logs a pull's status changes, and each layer's download every PROGRESS_STEP percent."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.last_status: str | None = None
        self._logged_step: dict[str, int] = {}

    def show(self, event: dict) -> None:
        status = str(event.get("status", ""))
        total, completed, digest = event.get("total"), event.get("completed"), event.get("digest")
        if digest and isinstance(total, int) and total > 0 and isinstance(completed, int):
            percent = min(100, completed * 100 // total)
            step = percent // PROGRESS_STEP * PROGRESS_STEP
            if step > self._logged_step.get(digest, -1):
                self._logged_step[digest] = step
                log.info("pulling %s: %s %d%% of %.1f MB", self.name, status, percent, total / 1e6)
        elif status and status != self.last_status:
            log.info("pulling %s: %s", self.name, status)
        self.last_status = status or self.last_status


def _json_line(line: str) -> dict | None:
    try:
        event = json.loads(line) if line.strip() else None
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


def _body(response: httpx.Response) -> dict:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _status(response: httpx.Response) -> str:
    """`HTTP 404: model 'x' not found`, from Ollama's {"error": ...} body when there is one."""
    error = _body(response).get("error")
    detail = error if isinstance(error, str) else response.text[:200].strip()
    return f"HTTP {response.status_code}: {detail}" if detail else f"HTTP {response.status_code}"


def _shown(url: str) -> str:
    """The URL without any user:password part. (graphiti_llm_rerank's redact_url does the same, but importing
    graphiti_llm_rerank loads openai and numpy: over a second per health-check probe.)"""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def _reason(exc: BaseException) -> str:
    if isinstance(exc, httpx.ConnectError):
        return f"connection failed: {exc}"
    if isinstance(exc, httpx.TimeoutException):
        return f"timed out ({type(exc).__name__})"
    return f"{type(exc).__name__}: {exc}"


if __name__ == "__main__":
    sys.exit(main())
