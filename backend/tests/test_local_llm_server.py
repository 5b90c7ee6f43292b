"""The local model server: started through app.local_llm, answers the OpenAI API, stops cleanly.

Tests marked `local_model` run the real llama-server with the real model
(the `local_llm` test server, which other test sessions on this machine may be using at
the same time, so requests can queue behind theirs; plus one short-lived second server
on a private port for the stop test). The others put a small real HTTP server on a port to check that a server
this kit did not start is used or refused, but never stopped.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from app.config import Config
from app.graph.server_process import free_port
from app.local_llm import LocalServerError, ensure_server, server_status, stop_server
from app.local_llm.server import PROBE_TIMEOUT_S, cpu_flags, server_command, server_files


# Generous: the shared test server serves one request at a time, other sessions' included.
REQUEST_TIMEOUT_S = 600
LOAD_MARGIN_S = 10.0  # scheduling on a busy 2-core machine; an install or a model load takes longer


def chat(base_url: str, model: str, question: str) -> dict:
    response = httpx.post(
        f"{base_url}/chat/completions",
        json={
            "model": model,
            "messages": [
                {"role": "system", "content": "Answer with one word: Yes or No."},
                {"role": "user", "content": question},
            ],
            "max_tokens": 1,
            "temperature": 0,
            "logprobs": True,
            "top_logprobs": 5,
        },
        timeout=REQUEST_TIMEOUT_S,
    )
    assert response.status_code == 200, response.text
    return response.json()


def first_token_top_logprobs(completion: dict) -> list[tuple[str, float]]:
    content = completion["choices"][0]["logprobs"]["content"]
    return [(entry["token"], entry["logprob"]) for entry in content[0]["top_logprobs"]]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# ---------------------------------------------------------------- the real server


@pytest.mark.local_model
def test_server_answers_models_with_the_configured_alias(local_llm, local_llm_config):
    assert local_llm == f"http://127.0.0.1:{local_llm_config.local_llm_port}/v1"
    response = httpx.get(f"{local_llm}/models", timeout=REQUEST_TIMEOUT_S)
    assert response.status_code == 200
    assert [model["id"] for model in response.json()["data"]] == [local_llm_config.local_llm_model]


@pytest.mark.local_model
def test_server_runs_with_the_threads_asked_and_records_its_pid_and_log(local_llm, local_llm_config):
    status = server_status(local_llm_config)
    assert status.state in ("running", "busy") and status.ready
    files = server_files(local_llm_config)
    record = json.loads(files.record.read_text())
    assert record["pid"] == status.pid and pid_alive(status.pid)
    assert record["model"] == local_llm_config.local_llm_model
    threads = str(local_llm_config.local_llm_threads or len(os.sched_getaffinity(0)))  # LOCAL_LLM_THREADS
    command = record["command"]
    assert command[command.index("--threads") + 1] == threads
    assert command[command.index("--threads-batch") + 1] == threads
    assert command[command.index("--ctx-size") + 1] == "8192"
    assert command[command.index("--parallel") + 1] == "1"
    assert command[command.index("--host") + 1] == "127.0.0.1"
    assert ("--no-repack" in command) == bool(cpu_flags() & {"amx_tile", "amx_int8", "amx_bf16"})
    assert files.log.stat().st_size > 0


def test_a_cpu_that_advertises_amx_keeps_the_weights_unpacked(tmp_path):
    # llama.cpp's AMX kernels faulted (GPF in ldtilecfg) on the first request on an AMX Xeon VM:
    # the weights must not go into the AMX buffer there; elsewhere repacking stays on.
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f amx_tile amx_int8\n\n"
                       "processor\t: 1\nflags\t\t: fpu avx2 avx512f amx_tile amx_int8\n")
    amx = cpu_flags(cpuinfo)
    assert {"avx2", "amx_int8"} <= amx
    config = Config.from_env()
    assert "--no-repack" in server_command(config, tmp_path / "llama-server", tmp_path / "m.gguf", amx)
    plain = server_command(config, tmp_path / "llama-server", tmp_path / "m.gguf", frozenset({"avx2", "fma"}))
    assert "--no-repack" not in plain and "--no-webui" in plain
    assert cpu_flags(tmp_path / "missing") == frozenset()


def test_local_llm_threads_sets_the_servers_threads_and_zero_means_one_per_core(tmp_path):
    def threads(config):
        command = server_command(config, tmp_path / "llama-server", tmp_path / "m.gguf", frozenset())
        return command[command.index("--threads") + 1], command[command.index("--threads-batch") + 1]

    assert threads(dataclasses.replace(Config.from_env(), local_llm_threads=3)) == ("3", "3")
    every_core = str(len(os.sched_getaffinity(0)))
    assert threads(dataclasses.replace(Config.from_env(), local_llm_threads=0)) == (every_core, every_core)


@pytest.mark.local_model
def test_chat_completion_returns_top_logprobs_for_yes_and_no(local_llm, local_llm_config):
    model = local_llm_config.local_llm_model
    yes = chat(local_llm, model, "Is Paris the capital of France? Yes or No?")
    # Small models lean towards "Yes" (the 1.5B says Yes to "Is 2 + 2 equal to 5?" at 0.8),
    # so the "no" question is one it gets clearly right.
    no = chat(local_llm, model, "Is Berlin the capital of Japan? Yes or No?")

    def p_yes(top: list[tuple[str, float]]) -> float:
        # Match by string, never by token id: the same words are tokens in Ollama too.
        return sum(math.exp(lp) for token, lp in top if token.strip().lower() == "yes")

    for completion, expected in ((yes, "yes"), (no, "no")):
        top = first_token_top_logprobs(completion)
        assert len(top) == 5
        assert all(logprob <= 0 for _, logprob in top)
        assert sum(math.exp(logprob) for _, logprob in top) <= 1.0001
        assert top[0][0].strip().lower() == expected, top
        assert completion["usage"]["completion_tokens"] == 1
    assert p_yes(first_token_top_logprobs(yes)) > 0.5 > p_yes(first_token_top_logprobs(no))


@pytest.mark.local_model
def test_a_second_ensure_server_returns_at_once_with_the_same_process(local_llm, local_llm_config):
    pid_before = server_status(local_llm_config).pid
    started = time.monotonic()

    assert ensure_server(local_llm_config) == local_llm

    # At once: no install, no assembly, no start. At worst one /v1/models probe times out
    # because another session's request holds the server.
    assert time.monotonic() - started < PROBE_TIMEOUT_S + LOAD_MARGIN_S
    assert server_status(local_llm_config).pid == pid_before


# Qwen2.5's end tokens (<|endoftext|>, <|im_end|>), the same ids in both kit models: banned, so a
# generation runs to max_tokens instead of ending whenever the model decides it is done.
QWEN_END_TOKENS = (151643, 151645)


@pytest.mark.local_model
def test_a_server_in_the_middle_of_a_long_request_counts_as_ready_and_is_not_restarted(
    local_llm, local_llm_config
):
    pid_before = server_status(local_llm_config).pid
    body = {
        "model": local_llm_config.local_llm_model,
        "messages": [{"role": "user", "content": "Count from 1 to 5000, comma separated."}],
        # Far longer than the checks below take, even on a quiet machine (about 95 tokens/s);
        # the stream is closed after them, and the server stops at its next token.
        "max_tokens": 4000,
        "logit_bias": {str(token): -100 for token in QWEN_END_TOKENS},
        "temperature": 0,
        "stream": True,
    }
    with httpx.stream("POST", f"{local_llm}/chat/completions", json=body, timeout=REQUEST_TIMEOUT_S) as response:
        assert response.status_code == 200
        lines = response.iter_lines()
        # Observed, not guessed: the first generated token means the generation holds the model.
        first = next(line for line in lines if line.startswith("data:") and '"content"' in line)
        assert "[DONE]" not in first
        status = server_status(local_llm_config)  # llama-server answers /v1/models beside a generation
        assert status.state == "running", status.describe()
        assert status.ready and status.pid == pid_before
        assert ensure_server(local_llm_config) == local_llm
        assert server_status(local_llm_config).pid == pid_before
        # Still generating: the checks above really ran while the server was busy.
        assert "[DONE]" not in next(line for line in lines if line.startswith("data:"))


@pytest.mark.local_model
def test_a_second_server_on_another_port_starts_and_stops(local_llm, local_llm_config):
    # Its own port, so the session's shared server keeps running for the other tests.
    config = dataclasses.replace(local_llm_config, local_llm_port=free_port())
    url = ensure_server(config)
    try:
        pid = server_status(config).pid
        assert pid is not None and pid != server_status(local_llm_config).pid
        assert httpx.get(f"{url}/models", timeout=REQUEST_TIMEOUT_S).status_code == 200
    finally:
        stopped = stop_server(config)

    assert stopped is True
    assert not pid_alive(pid)
    assert not server_files(config).record.exists()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/models", timeout=5)
    assert server_status(config).state == "stopped"
    assert stop_server(config) is False
    # The shared server was not touched.
    assert server_status(local_llm_config).ready


# ---------------------------------------------------------------- servers this kit did not start


class _ModelsHandler(BaseHTTPRequestHandler):
    model_ids: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server API)
        if self.path != "/v1/models":
            self.send_error(404)
            return
        body = json.dumps({"object": "list", "data": [{"id": m} for m in self.model_ids]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def foreign_server() -> Iterator[tuple[int, type[_ModelsHandler]]]:
    """A plain HTTP server on a free loopback port that lists whatever model ids we set."""
    handler = type("Handler", (_ModelsHandler,), {"model_ids": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], handler
    server.shutdown()
    server.server_close()


def config_on(port: int, tmp_path) -> Config:
    return dataclasses.replace(Config.from_env(), local_llm_port=port, data_dir=tmp_path / "data")


def test_a_port_serving_another_model_is_refused_not_killed(foreign_server, tmp_path):
    port, handler = foreign_server
    handler.model_ids = ["someone-elses-model"]
    config = config_on(port, tmp_path)

    assert server_status(config).state == "port_in_use"
    with pytest.raises(LocalServerError, match=f"Port {port} is in use"):
        ensure_server(config)
    assert stop_server(config) is False
    assert httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5).status_code == 200


def test_a_server_with_the_configured_model_but_no_pid_record_is_used_unmanaged(
    foreign_server, tmp_path
):
    port, handler = foreign_server
    config = config_on(port, tmp_path)
    handler.model_ids = [config.local_llm_model]

    status = server_status(config)
    assert status.state == "unmanaged" and status.ready and status.pid is None
    assert ensure_server(config) == f"http://127.0.0.1:{port}/v1"
    assert stop_server(config) is False  # not ours to stop
    assert httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5).status_code == 200


def test_a_stale_pid_record_never_signals_an_unrelated_process(tmp_path):
    config = config_on(free_port(), tmp_path)
    files = server_files(config)
    files.directory.mkdir(parents=True)
    decoy = subprocess.Popen(["sleep", "60"])  # alive, but not a llama-server
    try:
        files.record.write_text(json.dumps({"pid": decoy.pid, "model": config.local_llm_model}))

        assert server_status(config).state == "stopped"
        assert stop_server(config) is False
        assert decoy.poll() is None, "the decoy process was signalled"
        assert not files.record.exists(), "a stale record is cleaned up"
    finally:
        decoy.kill()
        decoy.wait()
