"""Command line: `python -m app.local_llm start|stop|status|path|install` (run from backend/), and the
same for the kit's Ollama: `python -m app.local_llm ollama install|start|stop|status`.

Settings come from `Config.from_env()` (LOCAL_LLM_MODEL, LOCAL_LLM_PORT, MODEL_CACHE_DIR,
DATA_DIR; OLLAMA_LOCAL_PORT, OLLAMA_CACHE_DIR, OLLAMA_LOCAL_KEEP_ALIVE); `--model` and `--port`
override them for one command (`--port` is Ollama's port after `ollama`). Results go to stdout
(the base URL, the model path, the status line); progress and errors go to stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys

from app.config import LOCAL_LLM_MODELS, Config
from app.local_llm.assemble import ModelIntegrityError, PartDownloadError, ensure_model
from app.local_llm.install import ensure_llama_server_installed
from app.local_llm.ollama import ensure_ollama, model_name, ollama_status, stop_ollama
from app.local_llm.ollama_build import ensure_ollama_installed
from app.local_llm.server import LocalServerError, ensure_server, server_status, stop_server

EXIT_NOT_RUNNING = 3  # `status` exit code when no ready server answers (as LSB init scripts do)
OLLAMA_ACTIONS = ("install", "start", "stop", "status")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m app.local_llm",
        description="Local OpenAI-compatible model server (llama.cpp's llama-server + Qwen2.5-Coder GGUF).",
    )
    parser.add_argument(
        "command",
        choices=("start", "stop", "status", "path", "install", "ollama"),
        help="start: ensure the server runs and print its base URL; stop: stop it; "
        "status: print its state; path: assemble the model if needed and print its path; "
        "install: build llama-server if needed and print its path; "
        "ollama ACTION: the same four for the kit's Ollama",
    )
    parser.add_argument("action", nargs="?", choices=OLLAMA_ACTIONS,
                        help="after `ollama`: install (build it, print the binary), start (print the "
                        "RERANKER_* settings that reach it), stop, status")
    parser.add_argument("--model", choices=LOCAL_LLM_MODELS, help="overrides LOCAL_LLM_MODEL")
    parser.add_argument("--port", type=int, help="overrides LOCAL_LLM_PORT (OLLAMA_LOCAL_PORT after `ollama`)")
    args = parser.parse_args(argv)
    if (args.command == "ollama") != (args.action is not None):
        parser.error("an action (install, start, stop, status) goes after `ollama`, and only there")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per readiness probe is noise
    config = Config.from_env()
    port_setting = "ollama_local_port" if args.command == "ollama" else "local_llm_port"
    overrides = {"local_llm_model": args.model, port_setting: args.port}
    config = dataclasses.replace(config, **{k: v for k, v in overrides.items() if v is not None})

    try:
        if args.command == "ollama":
            return _ollama(config, args.action)
        if args.command == "start":
            print(ensure_server(config))
        elif args.command == "stop":
            if stop_server(config):
                print("stopped")
            else:
                status = server_status(config)
                if status.state in ("unmanaged", "port_in_use"):
                    print(f"error: not started from this DATA_DIR, left alone: {status.describe()}",
                          file=sys.stderr)
                    return 1
                print(f"not running on port {config.local_llm_port}")
        elif args.command == "status":
            status = server_status(config)
            print(status.describe())
            return 0 if status.ready else EXIT_NOT_RUNNING
        elif args.command == "path":
            print(ensure_model(config.local_llm_model, config.model_cache_dir))
        elif args.command == "install":
            print(ensure_llama_server_installed())
    except (LocalServerError, ModelIntegrityError, PartDownloadError, OSError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def _ollama(config: Config, action: str) -> int:
    """`ollama install|start|stop|status`; errors propagate to main's one-line report."""
    if action == "install":
        print(ensure_ollama_installed(config.ollama_cache_dir))
    elif action == "start":
        url = ensure_ollama(config)
        # What the app needs to judge with it; RERANKER_PROVIDER=ollama is the default.
        print(f"export RERANKER_BASE_URL={url} RERANKER_MODEL={model_name(config)}")
    elif action == "stop":
        if stop_ollama(config):
            print("stopped")
        else:
            status = ollama_status(config)
            if status.state in ("unmanaged", "port_in_use"):
                print(f"error: not started from this DATA_DIR, left alone: {status.describe()}", file=sys.stderr)
                return 1
            print(f"not running on port {config.ollama_local_port}")
    else:
        status = ollama_status(config)
        print(status.describe())
        return 0 if status.ready else EXIT_NOT_RUNNING
    return 0


if __name__ == "__main__":
    sys.exit(main())
