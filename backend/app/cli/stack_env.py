"""Embedded-stack defaults for `make demo`, `make serve` and `make bench`: fill in what the user did not set.

    python -m app.cli.stack_env demo|serve|bench -- COMMAND...

sets the defaults below in the environment (only for variables that are unset or empty, in the
shell or in `.env`) and executes COMMAND. The defaults:

- always: EMBEDDING_PROVIDER=local (the in-process e5 embedder, no embedding server);
- demo: LOG_LEVEL=WARNING, so INFO lines do not break up the side-by-side output;
- demo, and serve and bench while the local model server runs: Graphiti's LLM is the local llama.cpp server
  through OpenAIGenericClient (GRAPHITI_LLM_PROVIDER=openai_generic, LLM_BASE_URL, LLM_MODEL_NAME);
- serve and bench while the local model server runs: the reranker uses it too (RERANKER_BASE_URL,
  RERANKER_MODEL, RERANKER_SCORE_MODE=logprobs). When it does not run, the reranker stays as
  configured (RERANKER_PROVIDER and friends, Ollama by default).

Nothing here starts a model server: "runs" is one request to the local server's port. A benchmark
given --base-url uses that server whatever the defaults say; one whose judge does not answer says so
in one line before it loads anything (bench/cli/).

The demo chooses its reranker endpoint itself (an Ollama answering at RERANKER_BASE_URL, else the
local server), so the demo defaults leave RERANKER_* alone.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Mapping

from app.config import Config, load_env_file

TARGETS = ("demo", "serve", "bench")
# Targets whose judge follows the local model server while it runs (the demo picks its own).
_FOLLOW_LOCAL_SERVER = ("serve", "bench")

# Config field for each variable, so the same defaults can be applied to a Config object.
_FIELDS = {
    "EMBEDDING_PROVIDER": "embedding_provider",
    "GRAPHITI_LLM_PROVIDER": "graphiti_llm_provider",
    "LLM_BASE_URL": "llm_base_url",
    "LLM_MODEL_NAME": "llm_model_name",
    "LLM_SMALL_MODEL_NAME": "llm_small_model_name",
    "RERANKER_BASE_URL": "reranker_base_url",
    "RERANKER_MODEL": "reranker_model",
    "RERANKER_SCORE_MODE": "reranker_score_mode",
    "LOG_LEVEL": "log_level",
}


def stack_defaults(config: Config, target: str, local_server_running: bool) -> dict[str, str]:
    """Every default for `target`, whether or not the user has set the variable."""
    if target not in TARGETS:
        raise ValueError(f"target must be one of {TARGETS}, got {target!r}")
    from app.local_llm import base_url

    url, model = base_url(config), config.local_llm_model
    defaults = {"EMBEDDING_PROVIDER": "local"}
    if target == "demo":
        defaults["LOG_LEVEL"] = "WARNING"  # the demo's own output is the show; warnings still appear
    if target == "demo" or local_server_running:
        defaults.update(GRAPHITI_LLM_PROVIDER="openai_generic", LLM_BASE_URL=url,
                        LLM_MODEL_NAME=model, LLM_SMALL_MODEL_NAME=model)
    if target in _FOLLOW_LOCAL_SERVER and local_server_running:
        defaults.update(RERANKER_BASE_URL=url, RERANKER_MODEL=model, RERANKER_SCORE_MODE="logprobs")
    return defaults


def unset_only(defaults: Mapping[str, str], environ: Mapping[str, str]) -> dict[str, str]:
    """The defaults whose variable the user left unset or empty (their values always win)."""
    return {name: value for name, value in defaults.items() if not (environ.get(name) or "").strip()}


def apply_to_config(config: Config, target: str, environ: Mapping[str, str] | None = None) -> Config:
    """`config` with the target's defaults filled in where the environment leaves them unset.

    Used by the demo command when it is started without make; it never touches os.environ.
    """
    environ = os.environ if environ is None else environ
    running = target in _FOLLOW_LOCAL_SERVER and _local_server_running(config)
    chosen = unset_only(stack_defaults(config, target, running), environ)
    return dataclasses.replace(config, **{_FIELDS[name]: value for name, value in chosen.items()})


def _local_server_running(config: Config) -> bool:
    from app.local_llm import server_status

    return server_status(config).ready


def _describe_reranker(config: Config, local_server_running: bool) -> str:
    from graphiti_llm_rerank import provider_for, redact_url

    if not provider_for(config).judges:
        return f"Reranker: off (RERANKER_PROVIDER={config.reranker_provider})"
    note = "" if local_server_running else " (the local model server is not running; `make local-llm` starts it)"

    return f"Reranker: {config.reranker_model} at {redact_url(config.reranker_base_url)}{note}"


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] not in TARGETS or argv[1] != "--":
        print(f"usage: python -m app.cli.stack_env {{{'|'.join(TARGETS)}}} -- COMMAND...", file=sys.stderr)
        return 2
    target, command = argv[0], argv[2:]
    load_env_file()  # values in .env count as set by the user
    config = Config.from_env()
    running = target in _FOLLOW_LOCAL_SERVER and _local_server_running(config)
    chosen = unset_only(stack_defaults(config, target, running), os.environ)
    os.environ.update(chosen)
    if target == "serve":
        print(_describe_reranker(Config.from_env(), running), file=sys.stderr, flush=True)
    os.execvp(command[0], command)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
