"""The physical limit of a judged passage: what the server evaluated and its prompt throughput, read from
llama.cpp's `timings` over real HTTP (or llama-cpp-python's log lines), and wall time as a ratio to it, both in
`python -m bench judge-speed` and in every benchmark run through the judge's counters."""

from __future__ import annotations

import asyncio
import json

import pytest

from bench.judge_speed import JudgeSpeedArgs, measure, work_from_log
from bench.summary import prompt_limit_figures
from graphiti_llm_rerank.judge import LLMJudge
from tests.support.scripted_llm import delay, raw_json

PASSAGES = ["alpha passage", "beta passage", "gamma passage", "delta passage"]
JUDGE_TOKENS, JUDGE_MS = 50, 400.0  # per judged passage: 125 tokens/s inside the judge requests
CALIBRATION_TOKENS, CALIBRATION_MS = 400, 4000.0  # the long uncached prompt: 100 tokens/s
ANSWER_DELAY_S = 0.6


@pytest.fixture
def dataset(tmp_path):
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "queries.tsv").write_text("q1\tsome topic\n")
    (folder / "qrels.txt").write_text("q1 0 d0 1\n")
    (folder / "candidates.jsonl").write_text(json.dumps({"qid": "q1", "query": "some topic", "candidates": [
        {"docid": f"d{i}", "rank": i + 1, "text": text} for i, text in enumerate(PASSAGES)]}) + "\n")
    return folder


def timed_answer(request):
    """A llama.cpp-style answer with `timings`: judge prompts carry a system message, the calibration does not."""
    judged = request.messages[0]["role"] == "system"
    tokens, ms = (JUDGE_TOKENS, JUDGE_MS) if judged else (CALIBRATION_TOKENS, CALIBRATION_MS)
    body = {"object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "yes"}, "finish_reason": "length"}],
            "usage": {"prompt_tokens": tokens, "completion_tokens": 1},
            "timings": {"prompt_n": tokens, "prompt_ms": ms, "predicted_n": 1, "predicted_ms": 10.0}}
    return delay(ANSWER_DELAY_S, raw_json(body)) if judged else raw_json(body)


def args(dataset, base_url, **overrides):
    values = dict(dataset=str(dataset), base_url=base_url, model="m", server_log=None, throughput=None, queries=1,
                  passages=len(PASSAGES), parallel=1, max_chars=1000, label="scripted")
    return JudgeSpeedArgs(**{**values, **overrides})


def test_the_ratio_is_wall_time_over_evaluated_tokens_at_the_calibrated_throughput(dataset, scripted_llm):
    scripted_llm.responder = timed_answer
    result = measure(args(dataset, scripted_llm.base_url))

    assert result["passages"] == len(PASSAGES)
    assert result["evaluated_tokens_per_passage"] == JUDGE_TOKENS
    assert result["prompt_throughput_tok_s"] == 100.0  # the calibration's rate, not the judge requests' 125
    assert result["physical_limit_ms_per_passage"] == 500  # 50 tokens at 100 tokens/s
    # one request at a time, each held 0.6 s by the server: at least 600 ms of wall time per passage
    assert result["wall_ms_per_passage"] >= ANSWER_DELAY_S * 1000
    assert result["ratio_to_limit"] == pytest.approx(result["wall_ms_per_passage"] / 500, abs=0.01)
    assert result["server_prompt_ms_per_passage"] == JUDGE_MS
    assert result["outside_the_model_ms_per_passage"] == result["wall_ms_per_passage"] - 400 - 10
    # the workload is the judge's own request: logprobs, one token, temperature 0
    judged = [body for body in scripted_llm.requests if body["messages"][0]["role"] == "system"]
    assert len(judged) == len(PASSAGES) + 1  # + the warm-up
    assert all(b["max_tokens"] == 1 and b["logprobs"] is True and b["temperature"] == 0 for b in judged)


def test_parallel_requests_shorten_the_wall_time_per_passage(dataset, scripted_llm):
    scripted_llm.responder = timed_answer
    result = measure(args(dataset, scripted_llm.base_url, parallel=len(PASSAGES)))
    assert result["wall_ms_per_passage"] < ANSWER_DELAY_S * 1000  # four 0.6 s answers held at once
    assert scripted_llm.peak_in_flight == len(PASSAGES)


def test_a_given_throughput_is_the_limit_both_servers_are_measured_against(dataset, scripted_llm):
    scripted_llm.responder = timed_answer
    result = measure(args(dataset, scripted_llm.base_url, throughput=250.0))
    assert (result["prompt_throughput_tok_s"], result["throughput_from"]) == (250.0, "given")
    assert result["physical_limit_ms_per_passage"] == 200  # 50 tokens at 250 tokens/s


def test_llama_cpp_python_log_lines_give_the_evaluated_tokens_and_times():
    log = (
        "Llama.generate: 149 prefix-match hit, remaining 32 prompt tokens to eval\n"
        "llama_perf_context_print:        load time =       0.65 ms\n"
        "llama_perf_context_print: prompt eval time =     400.00 ms /    32 tokens (   12.50 ms per token,    80.00 tokens per second)\n"
        "llama_perf_context_print:        eval time =       0.00 ms /     1 runs   (    0.00 ms per token,      inf tokens per second)\n"
        "llama_perf_context_print:       total time =     401.00 ms /    33 tokens\n"
        "Llama.generate: 149 prefix-match hit, remaining 48 prompt tokens to eval\n"
        "llama_perf_context_print: prompt eval time =     600.00 ms /    48 tokens (   12.50 ms per token,    80.00 tokens per second)\n"
        "llama_perf_context_print:        eval time =      25.00 ms /     1 runs   (   25.00 ms per token,    40.00 tokens per second)\n"
    )
    work = work_from_log(log)
    assert (work.requests, work.prompt_tokens, work.prompt_ms, work.generation_ms) == (2, 80, 1000.0, 25.0)


def answer_with_timings(prompt_n: int, prompt_ms: float):
    """A yes/no-logprob answer as llama-server sends it, `timings` included."""
    top = [{"token": "yes", "logprob": -0.1, "bytes": None}, {"token": "no", "logprob": -2.4, "bytes": None}]
    return raw_json({
        "id": "c1", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "finish_reason": "length", "message": {"role": "assistant", "content": "yes"},
                     "logprobs": {"content": [{"token": "yes", "logprob": -0.1, "bytes": None, "top_logprobs": top}]}}],
        "usage": {"prompt_tokens": 200, "completion_tokens": 1, "total_tokens": 201},
        "timings": {"cache_n": 80, "prompt_n": prompt_n, "prompt_ms": prompt_ms, "predicted_n": 1, "predicted_ms": 0.01},
    })


def test_the_judge_counts_what_a_llama_cpp_server_says_it_evaluated(scripted_llm):
    scripted_llm.responder = lambda request: answer_with_timings(120, 800.5)
    judge = LLMJudge(model="m", base_url=scripted_llm.base_url, api_key="k", score_mode="logprobs")
    asyncio.run(judge.score("a query", "first passage"))
    asyncio.run(judge.score("a query", "second passage"))
    counters = judge.counters.snapshot()
    assert counters["prompt_tokens"] == 400  # all of the prompt, as usage says
    assert counters["prompt_tokens_evaluated"] == 240  # what the server evaluated after its cached prefix
    assert counters["prompt_eval_us"] == 1_601_000


def test_a_server_without_timings_leaves_the_evaluated_counters_at_zero(scripted_llm):
    judge = LLMJudge(model="m", base_url=scripted_llm.base_url, api_key="k", score_mode="logprobs")
    asyncio.run(judge.score("a query", "a passage"))
    counters = judge.counters.snapshot()
    assert counters["prompt_tokens"] > 0
    assert counters["prompt_tokens_evaluated"] == counters["prompt_eval_us"] == 0


def test_a_bench_run_sets_its_wall_time_against_the_servers_own_prompt_time():
    # 240 tokens evaluated in 1.2 s: 200 tokens/s; 4 requests, so 60 tokens (300 ms) each at best.
    records = [{"prompt_tokens_evaluated": 100, "prompt_eval_us": 500_000, "model_requests": 2},
               {"prompt_tokens_evaluated": 140, "prompt_eval_us": 700_000, "model_requests": 2}]
    figures = prompt_limit_figures(records, wall_s=2.4)  # 600 ms of wall time per request
    assert figures == {"evaluated_tokens_per_request": 60.0, "server_prompt_tok_s": 200.0,
                       "wall_ms_per_request": 600.0, "ratio_to_prompt_limit": 2.0}
    assert prompt_limit_figures([{"prompt_tokens_evaluated": 0, "prompt_eval_us": 0, "model_requests": 4}], 2.4) == {}
