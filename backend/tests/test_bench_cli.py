"""`python -m bench`: one command line for every benchmark. A model server that does not answer is one
line naming its URL and how to start one, before any dataset is read; `make bench` runs on the
embedded defaults (the in-process embedder) like `make serve`; the failures a benchmark expects end
in one line, never a traceback."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import httpx
import openai
import pytest

from bench.datasets import DatasetError
from bench.cli import bench_group, command_line, expected_failure
from app.graph.server_process import free_port
from app.graph.unavailable import GraphUnavailableError
from tests.support.scripted_llm import ScriptedLLMServer, unused_base_url
from tests.support.bench_cli import bench_cli

BACKEND = Path(__file__).resolve().parents[1]
REPO = BACKEND.parent

# Every command that talks to a model server, with the arguments it needs besides the server's URL.
SERVER_COMMANDS = {
    "judge-speed": ["--dataset", "{dataset}", "--model", "m"],
    "prompt-layout": ["--dataset", "{dataset}", "--model", "m"],
    "injection": ["--model", "m"],
    "ingest-speed": ["--model", "m"],
    "distractor-judge": ["--model", "m"],
    "rerank": ["--dataset", "{dataset}", "--yes"],
    "graph": ["--dataset", "{dataset}", "--yes"],
    "report": ["--llm-base-url", "{url}", "--yes"],
    "scale": ["--model", "m", "--sizes", "10"],
    "temporal": ["--model", "m", "--output", "{dataset}"],
}


def test_every_benchmark_is_a_bench_command():
    # import-search has its own servers; combine and choose-fusion read stored results only; vector-recall
    # and first-stage read a stored graph (tests/test_scale_bench.py, tests/test_graph_bench.py);
    # first-stage-time writes its own (tests/test_scale_bench.py), and so does filter-cost; question-pool asks no model
    # (tests/test_question_pool.py); replicas starts its own stand-in model (tests/test_replicas_bench.py); load
    # its own stand-in judge (tests/test_load_command.py).
    assert set(SERVER_COMMANDS) | {"import-search", "combine", "choose-fusion", "vector-recall",
                                   "first-stage", "first-stage-time", "filter-cost", "question-pool",
                                   "replicas", "load"} == set(bench_group.commands)


@pytest.mark.parametrize("command", sorted(SERVER_COMMANDS))
def test_a_server_that_does_not_answer_is_one_line_naming_it(command, tmp_path):
    url = unused_base_url()
    dataset = tmp_path / "empty"  # no queries.tsv: a command that read it first would fail on that instead
    dataset.mkdir()
    args = [part.format(dataset=dataset, url=url) for part in SERVER_COMMANDS[command]]
    result = bench_cli(args=[command, "--base-url", url, *args])

    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    assert f"at {url} does not answer" in lines[0]
    assert "`make local-llm`" in lines[0] and "`make ollama`" in lines[0]
    assert not any(dataset.iterdir()) and not (tmp_path / "bench-out").exists()


def _make_bench_line(args: str) -> str:
    """The command `make bench ARGS=...` runs, as make prints it, with this interpreter as the venv's."""
    python = os.path.relpath(sys.executable, REPO)  # the recipe runs ../$(PY) from backend/
    printed = subprocess.run(["make", "-n", "-s", "bench", f"PY={python}", f"ARGS={args}"], cwd=REPO,
                             capture_output=True, text=True, timeout=60, check=True).stdout
    [line] = [line for line in printed.splitlines() if "python -m bench" in line]
    return line


def _env_without_embedder(tmp_path: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("EMBEDDING_")}
    # An embedding server that is not there: only the in-process embedder gets past the check.
    env.update(EMBEDDING_BASE_URL=unused_base_url(), LOCAL_LLM_PORT=str(free_port()),
               DATA_DIR=str(tmp_path / "data"))
    return env


def test_make_bench_runs_on_the_in_process_embedder_when_nothing_is_set(tmp_path):
    judge = unused_base_url()
    args = f"graph --dataset {shlex.quote(str(tmp_path))} --base-url {judge} --yes"
    env = _env_without_embedder(tmp_path)

    through_make = subprocess.run(["bash", "-c", _make_bench_line(args)], cwd=REPO, env=env, capture_output=True,
                                  text=True, timeout=180)
    # Past the embedder (local), stopped at the judge: one line, before the dataset was read.
    assert through_make.returncode == 1, through_make.stderr
    assert through_make.stderr.strip().splitlines() == [through_make.stderr.strip()]
    assert f"The judge server at {judge} does not answer" in through_make.stderr

    bare = subprocess.run([sys.executable, "-m", "bench", *shlex.split(args)], cwd=BACKEND,
                          env=env, capture_output=True, text=True, timeout=180)
    # The same command without make's defaults: EMBEDDING_PROVIDER is openai, and its server is not there.
    assert bare.returncode == 1 and "Traceback" not in bare.stderr, bare.stderr
    assert f"The embedding server (EMBEDDING_PROVIDER=openai) at {env['EMBEDDING_BASE_URL']}" in bare.stderr
    assert "EMBEDDING_PROVIDER=local" in bare.stderr


_PRINT_ENV = ("import json, os; print(json.dumps({k: os.environ.get(k) for k in "
              "('EMBEDDING_PROVIDER', 'RERANKER_BASE_URL', 'RERANKER_MODEL', 'LLM_BASE_URL')}))")


def test_the_bench_defaults_follow_the_local_model_server_only_while_it_runs(tmp_path):
    env = {key: value for key, value in os.environ.items() if not key.startswith(("EMBEDDING_", "RERANKER_"))}
    env.update(DATA_DIR=str(tmp_path), LOCAL_LLM_MODEL="qwen2.5-coder-1.5b")
    wrapped = [sys.executable, "-m", "app.cli.stack_env", "bench", "--", sys.executable, "-c", _PRINT_ENV]

    env["LOCAL_LLM_PORT"] = str(free_port())
    idle = subprocess.run(wrapped, cwd=BACKEND, env=env, capture_output=True, text=True, timeout=60)
    assert idle.returncode == 0, idle.stderr
    assert json.loads(idle.stdout) == {"EMBEDDING_PROVIDER": "local", "RERANKER_BASE_URL": None,
                                       "RERANKER_MODEL": None, "LLM_BASE_URL": None}

    with ScriptedLLMServer(models={"qwen2.5-coder-1.5b"}) as local:  # answers as the local server would
        env["LOCAL_LLM_PORT"] = str(local.port)
        running = subprocess.run(wrapped, cwd=BACKEND, env=env, capture_output=True, text=True, timeout=60)
        assert local.count == 0  # looked at, never asked to judge
    assert running.returncode == 0, running.stderr
    assert json.loads(running.stdout) == {"EMBEDDING_PROVIDER": "local", "RERANKER_BASE_URL": local.base_url,
                                          "RERANKER_MODEL": "qwen2.5-coder-1.5b", "LLM_BASE_URL": local.base_url}


def test_a_result_records_the_command_as_typed(monkeypatch):
    monkeypatch.setattr(sys, "argv", [str(BACKEND / "bench" / "__main__.py"), "rerank", "--dataset", "a b"])
    assert command_line() == "python -m bench rerank --dataset 'a b'"
    monkeypatch.setattr(sys, "argv", ["pytest", "rerank", "--dataset", "a b"])  # not run as `python -m bench`
    assert command_line() == ""


def test_a_dataset_the_benchmark_cannot_read_is_one_line(tmp_path):
    with ScriptedLLMServer() as judge:
        result = bench_cli(args=[
            "rerank", "--dataset", str(tmp_path), "--base-url", judge.base_url, "--model", "m", "--yes"])
    assert result.exit_code == 1 and not isinstance(result.exception, DatasetError)
    assert result.output.strip().splitlines() == [f"Error: {tmp_path / 'queries.tsv'} not found"]


def test_the_expected_failures_are_found_however_wrapped():
    request = httpx.Request("POST", "http://127.0.0.1:9/v1/embeddings")
    try:
        try:
            raise openai.APIConnectionError(request=request)
        except openai.APIConnectionError as inner:
            raise RuntimeError("import failed") from inner
    except RuntimeError as wrapped:
        line = expected_failure(wrapped)
    assert line is not None and line.startswith("The model server at http://127.0.0.1:9/v1/embeddings stopped")
    assert "`make local-llm`" in line
    assert expected_failure(httpx.ReadTimeout("timed out", request=request)).startswith(
        "The model server at http://127.0.0.1:9/v1/embeddings stopped answering (timed out)")
    assert expected_failure(DatasetError("x.tsv:3: expected 'qid<TAB>query'")) == "x.tsv:3: expected 'qid<TAB>query'"
    assert expected_failure(GraphUnavailableError("Neo4j at db:7687 does not answer")) == \
        "Neo4j at db:7687 does not answer"
    assert expected_failure(KeyError("a bug")) is None  # anything else keeps its traceback
