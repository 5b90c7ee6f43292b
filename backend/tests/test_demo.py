"""`flask --app app demo` end to end: real embedded FalkorDB, real HTTP to a model server.

The fast tests use the scripted OpenAI-compatible server standing in for an Ollama found at
RERANKER_BASE_URL; the `local_model` tests run the real llama.cpp server (see local_llm_fixtures).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.config import Config
from app.demo.sample_graph import load_questions
from app.demo.side_by_side import SEPARATOR, Column, render_question
from app.graph.search import EdgeHit
from app.graph.server_process import free_port
from app.local_llm import server_status
from app.local_llm.server import server_files
from tests.conftest import unique_graph_id
from tests.support.scripted_llm import ScriptedLLMServer, always, judge, server_error, unused_base_url

BACKEND = Path(__file__).resolve().parents[1]
QUESTIONS = load_questions()
SUMMARY = re.compile(
    r"Summary: on-topic facts in the top (\d+) over (\d+) questions: (\d+)/(\d+) without reranking, "
    r"(\d+)/(\d+) reranked by (\S+); search time [\d.]+ s vs [\d.]+ s; demo total \d+ s\."
)
ON_TOPIC_ROW = re.compile(r"^  on topic: (\d+) of (\d+)\s*\| on topic: (\d+) of (\d+)$", re.MULTILINE)


def _run_demo(app, *args: str):
    # The columns are as wide as the terminal says (COLUMNS); at 80, which pytest-xdist's workers are
    # given, the titles the tests read wrap onto a second line.
    result = app.test_cli_runner().invoke(args=["demo", *args], env={"COLUMNS": "140"})
    return result, result.output


def _columns(output: str) -> list[tuple[int, int]]:
    """(left on-topic, right on-topic) per question, read from the side-by-side rows."""
    return [(int(m[0]), int(m[2])) for m in ON_TOPIC_ROW.findall(output)]


def _oracle(query: str, passage: str) -> float:
    """A perfect judge: relevant exactly when the demo's answer key says so."""
    question = next(q for q in QUESTIONS if q.question == query)
    return 0.95 if question.on_topic(passage) else 0.05


def test_demo_shows_both_columns_and_a_summary_that_adds_up(backend):
    with ScriptedLLMServer(judge(_oracle), models={"oracle-judge"}) as llm:
        app, _ = backend(RERANKER_BASE_URL=llm.base_url, RERANKER_MODEL="oracle-judge")
        result, output = _run_demo(app, "--graph-id", unique_graph_id("demo"))
        requests = llm.requests
    assert result.exit_code == 0, output
    assert "Ollama-compatible server" in output and "the local model server is not needed" in output
    assert output.count("WITHOUT reranking (first stage only)") == len(QUESTIONS)
    assert output.count("RERANKED by oracle-judge (logprobs)") == len(QUESTIONS)
    assert "[was #" in output
    # Each question's six first-stage candidates are judged once, with logprobs.
    assert len(requests) == 6 * len(QUESTIONS) and all(r.get("logprobs") for r in requests)

    columns = _columns(output)
    assert len(columns) == len(QUESTIONS)
    summary = SUMMARY.search(output)
    assert summary, output[-2000:]
    top_k, questions, base, shown, reranked, shown_again, model = summary.groups()
    assert (int(top_k), int(questions), model) == (3, len(QUESTIONS), "oracle-judge")
    assert int(shown) == int(shown_again) == 3 * len(QUESTIONS)
    assert int(base) == sum(left for left, _ in columns)
    assert int(reranked) == sum(right for _, right in columns)
    # A perfect judge can only move relevant facts up, and the sample has some to move.
    assert all(right >= left for left, right in columns)
    assert int(reranked) > int(base)
    assert "make serve" in output and "Stopped the embedded graph database." in output


def _hit(fact: str, rank: int, first_stage_rank: int) -> EdgeHit:
    return EdgeHit(uuid=f"e{rank}", fact=fact, score=0.5, rank=rank, first_stage_rank=first_stage_rank,
                   first_stage_score=0.5, rerank_score=None, relation="RELATES_TO", source=None, target=None,
                   source_uuid="a", target_uuid="b", valid_at=None, invalid_at=None, expired_at=None,
                   created_at=None)


def _words(parts: list[str]) -> str:
    return " ".join(" ".join(parts).split())


def test_at_80_columns_a_long_title_wraps_instead_of_being_cut():
    question = QUESTIONS[0]
    facts = sorted(question.relevant_facts)[:2]
    title = "RERANKED by qwen2.5-coder-1.5b-instruct-q4_k_m (logprobs)"
    left = Column("WITHOUT reranking (first stage only)", 0.12, [_hit(facts[0], 1, 1), _hit(facts[1], 2, 2)])
    right = Column(title, 12.34, [_hit(facts[1], 1, 2), _hit(facts[0], 2, 1)])
    lines = render_question(1, 1, question, left, right, width=80).splitlines()[1:]
    assert all(len(line) <= 80 for line in lines)
    left_parts = [line.partition(SEPARATOR)[0].strip() for line in lines]
    right_parts = [line.partition(SEPARATOR)[2].strip() for line in lines]
    first_hit = next(i for i, part in enumerate(right_parts) if part.startswith("1 +"))
    assert first_hit >= 2 and left_parts[first_hit].startswith("1 +")  # rank 1 faces rank 1
    # Each column's whole title and time, over the lines before the first hit; nothing of either is lost.
    assert _words(right_parts[:first_hit]) == f"{title} 12.34 s"
    assert _words(left_parts[:first_hit]) == "WITHOUT reranking (first stage only) 0.12 s"
    assert "[was #2]" in " ".join(right_parts[first_hit:])


def test_demo_says_so_when_the_model_does_not_answer(backend):
    with ScriptedLLMServer(always(server_error()), models={"broken-judge"}) as llm:
        app, _ = backend(RERANKER_BASE_URL=llm.base_url, RERANKER_MODEL="broken-judge")
        result, output = _run_demo(app, "--graph-id", unique_graph_id("demo"), "--questions", "2")
    assert result.exit_code == 0, output
    assert output.count("! the model did not answer") == 2
    assert all(left == right for left, right in _columns(output))  # first-stage order kept
    assert "for 2 question(s) the model gave no answer" in output  # said again under the summary


def _adopt_server_record(local_llm_config: Config, data_dir: Path) -> None:
    """Give `data_dir` a copy of the test server's pid record, as if `make local-llm` had started the
    server from there: the usual way a server is already up before a demo. (Without a record, a
    server busy with another session's request cannot be told from a stranger on the port.)"""
    source = server_files(local_llm_config).record
    target = server_files(dataclasses.replace(local_llm_config, data_dir=data_dir)).record
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)


@pytest.mark.local_model
def test_demo_runs_end_to_end_on_the_local_model(backend, local_llm, local_llm_config, tmp_path):
    _adopt_server_record(local_llm_config, tmp_path)
    # Generous limits: this checks the wiring on a CPU that other test sessions may be sharing.
    app, _ = backend(DATA_DIR=tmp_path, LOCAL_LLM_PORT=local_llm_config.local_llm_port,
                     RERANKER_BASE_URL=unused_base_url(), RERANKER_TIMEOUT_S=300, RERANKER_DEADLINE_S=900)
    result, output = _run_demo(app, "--graph-id", unique_graph_id("demo"), "--questions", "2")
    assert result.exit_code == 0, output
    model = local_llm_config.local_llm_model
    assert f"{model} on the local llama.cpp server at {local_llm}" in output
    assert "already running; left running afterwards" in output
    assert output.count("WITHOUT reranking (first stage only)") == 2
    assert output.count(f"RERANKED by {model} (logprobs)") == 2
    assert "did not answer" not in output and "gave no answer" not in output and "got no score" not in output
    summary = SUMMARY.search(output)
    assert summary and summary.group(7) == model, output[-2000:]
    assert len(_columns(output)) == 2
    assert server_status(local_llm_config).ready  # not ours to stop


# The two tests below start a model server of their own (the demo must own it to stop it), with the
# smaller model: they test process lifecycles, not judgments, and the cores are shared.
LIFECYCLE_MODEL = "qwen2.5-coder-0.5b"


@pytest.mark.local_model
def test_a_failing_demo_stops_the_model_server_it_started(backend):
    app, _ = backend(LOCAL_LLM_PORT=free_port(), LOCAL_LLM_MODEL=LIFECYCLE_MODEL,
                     RERANKER_BASE_URL=unused_base_url())
    config = app.config["APP_CONFIG"]
    result, output = _run_demo(app, "--graph-id", "not a graph id!")  # fails after the server started
    assert result.exit_code == 1
    assert "started for this demo" in output and "graph id" in output
    assert "Stopped the local model server that the demo started." in output
    assert server_status(config).state == "stopped"


@pytest.mark.local_model
def test_ctrl_c_stops_everything_the_demo_started(tmp_path):
    port = free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith(("RERANKER_", "LLM_"))}
    env.update(DATA_DIR=str(tmp_path), LOCAL_LLM_PORT=str(port), LOCAL_LLM_MODEL=LIFECYCLE_MODEL,
               RERANKER_BASE_URL=unused_base_url(), PYTHONUNBUFFERED="1")
    demo = subprocess.Popen(
        [sys.executable, "-m", "flask", "--app", "app", "demo"], cwd=BACKEND, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        # A runner started in the background (`cmd &`, nohup) passes SIGINT down ignored, and Python
        # then never turns it into KeyboardInterrupt: the child gets Ctrl-C's default back.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    config = dataclasses.replace(Config.from_env(), local_llm_port=port, local_llm_model=LIFECYCLE_MODEL,
                                 data_dir=tmp_path)
    lines = []
    try:
        for line in demo.stdout:  # wait until both servers are up, then interrupt
            lines.append(line)
            if line.startswith("==> Sample graph"):
                break
        assert demo.poll() is None, "".join(lines)
        model_pid = server_status(config).pid
        redis_pid = int((tmp_path / "falkordb" / "redis.pid").read_text())  # redis removes it on exit
        assert model_pid and redis_pid
        os.kill(demo.pid, signal.SIGINT)  # the demo process alone: its own cleanup must do the rest
        lines.extend(demo.stdout)
        assert demo.wait(timeout=60) == 130, "".join(lines)
    finally:
        if demo.poll() is None:
            demo.kill()
    output = "".join(lines)
    assert "started for this demo" in output and "Interrupted" in output
    assert "Stopped the local model server that the demo started." in output
    assert server_status(config).state == "stopped"
    for pid, what in ((model_pid, "local model server"), (redis_pid, "embedded FalkorDB")):
        assert not _running(pid), f"the {what} outlived the demo"


def _running(pid: int, wait_s: float = 10.0) -> bool:
    """Alive and not a zombie, after waiting up to `wait_s` for it to go."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        if state == "Z":
            return False
        time.sleep(0.1)
    return True
