"""`python -m app.local_llm.ensure_models`, the compose stack's one-shot model provisioning: on the
project's own Ollama (tests/support/ollama_fixtures.py) a model that is there exits 0 without a pull
and answers, a model that is not and cannot be pulled (no internet here, so Ollama's registry is out
of reach) gives one line naming it, and no Ollama at all gives one line naming the URL and how to
start one. The scripted Ollama (tests/support/scripted_ollama.py) shows what a real one does only by
chance: a pull that fails after it has started downloading, or that ends without "success".
"""

from __future__ import annotations

import dataclasses
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from app.config import Config
from app.local_llm.ensure_models import ensure_models, main, needed_models, ollama_root
from tests.support.scripted_llm import server_error, unused_base_url
from tests.support.scripted_ollama import ScriptedOllama, pull_events

BACKEND = Path(__file__).resolve().parents[1]
ABSENT = "mirofish-absent/never-published:1b"


def run_cli(settings: dict[str, str], *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """The command as the compose service runs it: a fresh process, settings from the environment only."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "DOTENV_PATH": os.devnull,
           "GRAPHITI_TELEMETRY_ENABLED": "false", **settings}
    return subprocess.run([sys.executable, "-m", "app.local_llm.ensure_models", *args], cwd=BACKEND,
                          env=env, capture_output=True, text=True, timeout=timeout)


def error_lines(result: subprocess.CompletedProcess) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error: ")]


def on_one_server(url: str, *, chat: str, embedding: str, **more: str) -> dict[str, str]:
    """Settings that put the LLM, the embedder and the judge on one Ollama."""
    return {"LLM_BASE_URL": url, "EMBEDDING_BASE_URL": url, "RERANKER_BASE_URL": url,
            "LLM_MODEL_NAME": chat, "RERANKER_MODEL": chat, "EMBEDDING_MODEL": embedding,
            "EMBEDDING_PROVIDER": "openai", "RERANKER_PROVIDER": "ollama", **more}


def scripted_config(ollama: ScriptedOllama, *, chat: str, embedding: str) -> Config:
    base = Config.from_env()
    return dataclasses.replace(
        base, llm_base_url=ollama.base_url, embedding_base_url=ollama.base_url, reranker_base_url=ollama.base_url,
        llm_model_name=chat, llm_small_model_name=chat, reranker_model=chat, embedding_model=embedding,
        embedding_provider="openai", reranker_provider="ollama", embedding_dim=ollama.embedding_dim,
        ollama_wait_s=5.0)


# -- which models, where ---------------------------------------------------------------------------


def test_the_native_api_root_is_derived_from_the_openai_style_urls():
    assert ollama_root("http://ollama:11434/v1") == "http://ollama:11434"
    assert ollama_root("http://ollama:11434/v1/") == "http://ollama:11434"
    assert ollama_root("http://ollama:11434") == "http://ollama:11434"
    assert ollama_root("https://gpu.example/ollama/v1") == "https://gpu.example/ollama"


def test_the_models_come_from_the_settings_once_per_server_and_only_those_ollama_serves():
    base = dataclasses.replace(Config(), llm_base_url="http://ollama:11434/v1", embedding_base_url="http://ollama:11434/v1",
                               reranker_base_url="http://ollama:11434/v1/", llm_model_name="qwen2.5:3b",
                               llm_small_model_name="qwen2.5:3b", reranker_model="qwen2.5:3b",
                               embedding_model="mxbai-embed-large", embedding_provider="openai",
                               reranker_provider="ollama")
    models = needed_models(base)
    assert [(m.name, m.server, m.kinds) for m in models] == [
        ("qwen2.5:3b", "http://ollama:11434", ("chat",)),
        ("mxbai-embed-large", "http://ollama:11434", ("embedding",)),
    ]
    assert models[0].settings == ("LLM_MODEL_NAME", "LLM_SMALL_MODEL_NAME", "RERANKER_MODEL")
    # A dedicated reranker (TEI) and the in-process embedder are not Ollama's to serve.
    other = dataclasses.replace(base, reranker_provider="rerank_api", reranker_model="BAAI/bge-reranker-v2-m3",
                                reranker_base_url="http://reranker:80", embedding_provider="local")
    assert [m.name for m in needed_models(other)] == ["qwen2.5:3b"]


# -- no Ollama -------------------------------------------------------------------------------------


def test_no_ollama_gives_one_line_with_the_url_and_how_to_start_one():
    url = unused_base_url()
    started = time.monotonic()
    result = run_cli({**on_one_server(url, chat="qwen2.5:3b", embedding="mxbai-embed-large"), "OLLAMA_WAIT_S": "2"})
    assert result.returncode == 1, result.stderr
    lines = error_lines(result)
    assert len(lines) == 1, result.stderr
    assert url.removesuffix("/v1") in lines[0] and "make ollama" in lines[0] and "waited 2 s" in lines[0]
    assert time.monotonic() - started < 60  # it waited OLLAMA_WAIT_S, not the default


# -- the project's own Ollama ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def kit_embedding_dim(local_ollama, ollama_model) -> int:
    """The length of the kit model's embeddings, as Ollama reports it."""
    root = local_ollama.removesuffix("/v1")
    info = httpx.post(f"{root}/api/show", json={"model": ollama_model}, timeout=30).json()["model_info"]
    return next(value for key, value in info.items() if key.endswith(".embedding_length"))


def test_a_model_that_is_there_is_not_pulled_and_answers(local_ollama, ollama_model, kit_embedding_dim):
    settings = on_one_server(local_ollama, chat=ollama_model, embedding=ollama_model,
                             EMBEDDING_DIM=str(kit_embedding_dim))
    result = run_cli(settings)
    assert result.returncode == 0, result.stderr
    assert "pulling" not in result.stderr  # a pull would ask the registry, out of reach here, and fail
    assert f"model {ollama_model} (LLM_MODEL_NAME, LLM_SMALL_MODEL_NAME, EMBEDDING_MODEL, RERANKER_MODEL)" \
        in result.stderr and "answers" in result.stderr
    assert "not the version this project tests" not in result.stderr
    # The health check's form: no wait, no pull, no generation; quick.
    started = time.monotonic()
    check = run_cli(settings, "--check", timeout=60)
    assert check.returncode == 0 and not error_lines(check), check.stderr
    assert time.monotonic() - started < 30


def test_a_model_that_cannot_be_pulled_is_named_on_one_line(local_ollama, ollama_model, kit_embedding_dim):
    settings = on_one_server(local_ollama, chat=ollama_model, embedding=ollama_model,
                             EMBEDDING_DIM=str(kit_embedding_dim), RERANKER_MODEL=ABSENT)
    result = run_cli(settings)
    assert result.returncode == 1
    lines = error_lines(result)
    assert len(lines) == 1, result.stderr
    root = local_ollama.removesuffix("/v1")
    assert lines[0].startswith(f"error: model {ABSENT} (RERANKER_MODEL) on {root}: cannot be pulled: ")
    assert "registry.ollama.ai" in lines[0]  # Ollama's own reason, not a generic one
    assert f"model {ollama_model}" in result.stderr and "answers" in result.stderr  # the others were checked

    check = run_cli(settings, "--check", timeout=60)
    assert check.returncode == 1
    assert [line.split(": not there")[0] for line in error_lines(check)] == [
        f"error: model {ABSENT} (RERANKER_MODEL) on {root}"]


def test_embeddings_of_another_length_than_embedding_dim_are_named(local_ollama, ollama_model, kit_embedding_dim):
    result = run_cli(on_one_server(local_ollama, chat=ollama_model, embedding=ollama_model,
                                   RERANKER_PROVIDER="none", EMBEDDING_DIM=str(kit_embedding_dim + 1)))
    assert result.returncode == 1
    assert error_lines(result) == [
        f"error: model {ollama_model} (LLM_MODEL_NAME, LLM_SMALL_MODEL_NAME, EMBEDDING_MODEL) on "
        f"{local_ollama.removesuffix('/v1')}: embeddings have {kit_embedding_dim} numbers, "
        f"EMBEDDING_DIM says {kit_embedding_dim + 1}"]


# -- faults a real Ollama shows only by chance (scripted) -------------------------------------------


def test_a_pull_that_fails_midway_is_reported_with_ollamas_reason_after_its_progress(caplog):
    downloads = [("a" * 64, 0, 2_000_000_000), ("a" * 64, 700_000_000, 2_000_000_000)]
    script = {"big:7b": pull_events(downloads, error="max retries exceeded: connection reset by peer")}
    with ScriptedOllama(models=["embed:1"], pulls=script) as ollama:
        config = scripted_config(ollama, chat="big:7b", embedding="embed:1")
        with caplog.at_level(logging.INFO, logger="app.local_llm.ensure_models"):
            problems = ensure_models(config)
    assert problems == [f"model big:7b (LLM_MODEL_NAME, LLM_SMALL_MODEL_NAME, RERANKER_MODEL) on "
                        f"http://127.0.0.1:{ollama.port}: cannot be pulled: "
                        "max retries exceeded: connection reset by peer"]
    progress = [r.getMessage() for r in caplog.records if r.getMessage().startswith("pulling big:7b: ")]
    assert progress == ["pulling big:7b: pulling manifest", "pulling big:7b: pulling aaaaaaaaaaaa 0% of 2000.0 MB",
                        "pulling big:7b: pulling aaaaaaaaaaaa 35% of 2000.0 MB"]
    # The model that could not be pulled was not asked to answer; the embedder that is there was.
    assert ollama.paths.count("/api/pull") == 1 and "/api/generate" not in ollama.paths
    assert ollama.paths[-1] == "/api/embed"


def test_a_pull_that_ends_without_success_or_is_refused_fails_and_a_successful_one_is_checked():
    script = {
        "cut:1b": pull_events([("b" * 64, 10, 100)]),  # the stream just ends
        "refused:1b": server_error("disk full"),
        "fresh:1b": pull_events([("c" * 64, 100, 100)], success=True),
    }
    with ScriptedOllama(pulls=script, embedding_dim=8) as ollama:
        cut = ensure_models(scripted_config(ollama, chat="cut:1b", embedding="fresh:1b"))
        refused = ensure_models(scripted_config(ollama, chat="refused:1b", embedding="fresh:1b"))
    server = f"http://127.0.0.1:{ollama.port}"
    assert cut == [f"model cut:1b (LLM_MODEL_NAME, LLM_SMALL_MODEL_NAME, RERANKER_MODEL) on {server}: "
                   "the pull ended without Ollama saying success (last: pulling bbbbbbbbbbbb)"]
    assert len(refused) == 1 and refused[0].startswith(f"model refused:1b (LLM_MODEL_NAME, LLM_SMALL_MODEL_NAME, "
                                                       f"RERANKER_MODEL) on {server}: cannot be pulled: HTTP 500")
    # fresh:1b was pulled once (by the first run), then embedded with: no problem reported for it either time.
    assert ollama.paths.count("/api/embed") == 2 and "fresh:1b" in ollama.present


def test_another_ollama_version_is_a_warning_not_a_failure(caplog):
    with ScriptedOllama(models=["m:1", "e:1"], version="0.12.0") as ollama:
        config = scripted_config(ollama, chat="m:1", embedding="e:1")
        with caplog.at_level(logging.WARNING, logger="app.local_llm.ensure_models"):
            assert ensure_models(config) == []
    assert any("0.12.0" in r.getMessage() and "not the version this project tests" in r.getMessage()
               for r in caplog.records)


def test_the_command_reads_its_settings_through_config(monkeypatch, capsys):
    """main() in-process: the settings come from the environment through Config, the lines go to stderr."""
    with ScriptedOllama(models=["m:1"]) as ollama:
        for name, value in on_one_server(ollama.base_url, chat="m:1", embedding="e:1").items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("EMBEDDING_DIM", "1024")
        monkeypatch.setenv("DOTENV_PATH", os.devnull)
        assert main(["--check"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"error: model e:1 (EMBEDDING_MODEL) on http://127.0.0.1:{ollama.port}: not there "
        "(pull it: python -m app.local_llm.ensure_models)"]
