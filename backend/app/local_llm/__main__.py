"""Command line: `python -m app.local_llm start|stop|status|path|install` (run from backend/).

Settings come from `Config.from_env()` (LOCAL_LLM_MODEL, LOCAL_LLM_PORT, MODEL_CACHE_DIR,
DATA_DIR); `--model` and `--port` override them for one command. Results go to stdout
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
from app.local_llm.server import LocalServerError, ensure_server, server_status, stop_server

EXIT_NOT_RUNNING = 3  # `status` exit code when no ready server answers (as LSB init scripts do)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m app.local_llm",
        description="Local OpenAI-compatible model server (llama.cpp's llama-server + Qwen2.5-Coder GGUF).",
    )
    parser.add_argument(
        "command",
        choices=("start", "stop", "status", "path", "install"),
        help="start: ensure the server runs and print its base URL; stop: stop it; "
        "status: print its state; path: assemble the model if needed and print its path; "
        "install: build llama-server if needed and print its path",
    )
    parser.add_argument("--model", choices=LOCAL_LLM_MODELS, help="overrides LOCAL_LLM_MODEL")
    parser.add_argument("--port", type=int, help="overrides LOCAL_LLM_PORT")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per readiness probe is noise
    config = Config.from_env()
    overrides = {"local_llm_model": args.model, "local_llm_port": args.port}
    config = dataclasses.replace(config, **{k: v for k, v in overrides.items() if v is not None})

    try:
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


if __name__ == "__main__":
    sys.exit(main())
