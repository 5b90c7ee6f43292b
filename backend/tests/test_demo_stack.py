"""Embedded-stack defaults for `make demo`/`make serve`, and how the demo picks its reranker server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from app.cli.stack_env import apply_to_config, stack_defaults, unset_only
from app.config import Config
from app.demo.reranker_endpoint import find_configured_server, serves_model
from app.graph.server_process import free_port
from tests.support.scripted_llm import ScriptedLLMServer, unused_base_url

BACKEND = Path(__file__).resolve().parents[1]
_PRINT_ENV = ("import json, os; print(json.dumps({k: os.environ.get(k) for k in "
              "('EMBEDDING_PROVIDER', 'GRAPHITI_LLM_PROVIDER', 'LLM_BASE_URL', 'LLM_MODEL_NAME', "
              "'RERANKER_BASE_URL', 'RERANKER_MODEL')}))")


def _config(**changes) -> Config:
    import dataclasses

    return dataclasses.replace(Config.from_env(), **changes)


def test_demo_defaults_point_the_llm_at_the_local_server_and_leave_the_reranker_alone():
    config = _config(local_llm_port=9123, local_llm_model="qwen2.5-coder-0.5b")
    defaults = stack_defaults(config, "demo", local_server_running=False)
    assert defaults == {
        "EMBEDDING_PROVIDER": "local",
        "LOG_LEVEL": "WARNING",
        "GRAPHITI_LLM_PROVIDER": "openai_generic",
        "LLM_BASE_URL": "http://127.0.0.1:9123/v1",
        "LLM_MODEL_NAME": "qwen2.5-coder-0.5b",
        "LLM_SMALL_MODEL_NAME": "qwen2.5-coder-0.5b",
    }


def test_serve_defaults_use_the_local_server_only_while_it_runs():
    config = _config(local_llm_port=9123)
    assert stack_defaults(config, "serve", local_server_running=False) == {"EMBEDDING_PROVIDER": "local"}
    running = stack_defaults(config, "serve", local_server_running=True)
    assert running["RERANKER_BASE_URL"] == running["LLM_BASE_URL"] == "http://127.0.0.1:9123/v1"
    assert running["RERANKER_MODEL"] == config.local_llm_model
    assert running["RERANKER_SCORE_MODE"] == "logprobs"


def test_values_the_user_set_always_win():
    defaults = {"EMBEDDING_PROVIDER": "local", "LLM_BASE_URL": "http://x/v1", "LLM_MODEL_NAME": "m"}
    environ = {"EMBEDDING_PROVIDER": "openai", "LLM_BASE_URL": "  "}  # blank counts as unset
    assert unset_only(defaults, environ) == {"LLM_BASE_URL": "http://x/v1", "LLM_MODEL_NAME": "m"}
    config = apply_to_config(_config(), "demo", environ={"LLM_MODEL_NAME": "mine"})
    assert config.embedding_provider == "local" and config.graphiti_llm_provider == "openai_generic"
    assert config.llm_model_name == Config.from_env().llm_model_name  # set by "the user": untouched


def test_the_make_wrapper_fills_in_defaults_and_runs_the_command(tmp_path):
    env = {key: value for key, value in os.environ.items() if not key.startswith(("LLM_", "EMBEDDING_"))}
    env.update(EMBEDDING_PROVIDER="openai", LOCAL_LLM_PORT="9124", DATA_DIR=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-m", "app.cli.stack_env", "demo", "--", sys.executable, "-c", _PRINT_ENV],
        cwd=BACKEND, env=env, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["EMBEDDING_PROVIDER"] == "openai"  # the user's value survives
    assert seen["GRAPHITI_LLM_PROVIDER"] == "openai_generic"
    assert seen["LLM_BASE_URL"] == "http://127.0.0.1:9124/v1"
    assert seen["RERANKER_BASE_URL"] is None  # the demo picks its reranker server itself

    usage = subprocess.run([sys.executable, "-m", "app.cli.stack_env", "deploy"], cwd=BACKEND,
                           env=env, capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2 and "usage" in usage.stderr


def test_serve_wrapper_without_a_local_server_keeps_the_configured_reranker(tmp_path):
    env = {key: value for key, value in os.environ.items() if not key.startswith(("RERANKER_", "LLM_"))}
    env.update(LOCAL_LLM_PORT=str(free_port()), DATA_DIR=str(tmp_path),
               RERANKER_PROVIDER="ollama", RERANKER_BASE_URL="http://ollama.internal:11434/v1")
    done = subprocess.run(
        [sys.executable, "-m", "app.cli.stack_env", "serve", "--", sys.executable, "-c", _PRINT_ENV],
        cwd=BACKEND, env=env, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["RERANKER_BASE_URL"] == "http://ollama.internal:11434/v1"
    assert seen["GRAPHITI_LLM_PROVIDER"] is None and seen["EMBEDDING_PROVIDER"] == "local"
    assert "local model server is not running" in done.stderr


def test_an_answering_server_with_the_model_is_used_as_it_is():
    assert serves_model(["qwen2.5:3b", "llama3:latest"], "llama3")
    assert serves_model(["qwen2.5:3b"], "qwen2.5:3b") and not serves_model(["qwen2.5:7b"], "qwen2.5:3b")
    with ScriptedLLMServer(models={"qwen2.5:3b"}) as llm:
        found, why_not = find_configured_server(_config(reranker_base_url=llm.base_url, reranker_model="qwen2.5:3b"))
        assert found is not None and found.kind == "ollama" and found.base_url == llm.base_url and why_not == ""
        missing, why_not = find_configured_server(_config(reranker_base_url=llm.base_url, reranker_model="phi3"))
        assert missing is None and "no model 'phi3'" in why_not and "qwen2.5:3b" in why_not
    nobody, why_not = find_configured_server(_config(reranker_base_url=unused_base_url()))
    assert nobody is None and "nothing answers" in why_not


def test_the_local_server_url_is_never_mistaken_for_an_ollama():
    config = _config(local_llm_port=9125, reranker_base_url="http://127.0.0.1:9125/v1")
    found, why_not = find_configured_server(config)
    assert found is None and "local model server" in why_not
