"""The scripted OpenAI-compatible server itself, spoken to over raw HTTP (urllib), plus its SDK fit."""

from __future__ import annotations

import json
import math
import threading
import time
import urllib.error
import urllib.request

import openai
import pytest

from graphiti_llm_rerank.judge_prompt import build_judge_messages
from tests.support.scripted_llm import (
    ScriptedLLMServer,
    always,
    chat,
    delay,
    hang,
    judge,
    rate_limited,
    server_error,
    truncated_json,
    unused_base_url,
    when,
)


def post(server: ScriptedLLMServer, body: dict, timeout: float = 5.0) -> tuple[int, dict, bytes]:
    request = urllib.request.Request(
        server.base_url + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": "Bearer k"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def judge_body(query: str, passage: str, *, logprobs: bool) -> dict:
    mode = "logprobs" if logprobs else "json"
    body = {"model": "m", "messages": build_judge_messages(query, passage, mode=mode), "temperature": 0}
    if logprobs:
        body.update(logprobs=True, top_logprobs=5, max_tokens=1)
    return body


def test_models_endpoint_lists_the_served_models():
    with ScriptedLLMServer(models=["judge-a", "judge-b"]) as server:
        with urllib.request.urlopen(server.base_url + "/models", timeout=5) as response:
            listing = json.loads(response.read())
    assert [model["id"] for model in listing["data"]] == ["judge-a", "judge-b"]
    assert listing["object"] == "list"


def test_judge_logprobs_reply_is_openai_shaped_and_encodes_the_score(scripted_llm):
    scripted_llm.responder = judge(lambda query, passage: 0.8 if "Paris" in passage else 0.1)
    status, _, raw = post(scripted_llm, judge_body("capital of France?", "Paris is the capital.", logprobs=True))
    assert status == 200
    body = json.loads(raw)
    assert body["object"] == "chat.completion"
    assert body["usage"]["prompt_tokens"] > 0 and body["usage"]["completion_tokens"] == 1
    position = body["choices"][0]["logprobs"]["content"][0]
    assert position["token"] == body["choices"][0]["message"]["content"] == "Yes"
    probs = {alt["token"]: math.exp(alt["logprob"]) for alt in position["top_logprobs"]}
    assert probs["Yes"] / (probs["Yes"] + probs["No"]) == pytest.approx(0.8)
    assert scripted_llm.requests[0]["messages"][1]["content"].endswith("</passage>")


def test_judge_json_reply_carries_the_score(scripted_llm):
    scripted_llm.responder = judge(lambda query, passage: 0.25)
    status, _, raw = post(scripted_llm, judge_body("q", "p", logprobs=False))
    choice = json.loads(raw)["choices"][0]
    assert status == 200
    assert json.loads(choice["message"]["content"]) == {"score": 0.25}
    assert choice.get("logprobs") is None


def test_faults_can_target_one_passage(scripted_llm):
    scripted_llm.responder = judge(lambda query, passage: rate_limited(3) if "X" in passage else 0.9)
    failed = post(scripted_llm, judge_body("q", "contains X", logprobs=True))
    fine = post(scripted_llm, judge_body("q", "plain", logprobs=True))
    assert failed[0] == 429 and failed[1]["Retry-After"] == "3"
    assert json.loads(failed[2])["error"]["code"] == "rate_limit_exceeded"
    assert fine[0] == 200
    assert scripted_llm.count == 2


def test_when_scripts_by_request_index_and_stream_gets_400(scripted_llm):
    scripted_llm.responder = when(lambda request: request.index == 0, server_error(), otherwise=always("ok"))
    assert post(scripted_llm, {"model": "m", "messages": []})[0] == 500
    assert post(scripted_llm, {"model": "m", "messages": []})[0] == 200
    assert post(scripted_llm, {"model": "m", "messages": [], "stream": True})[0] == 400


def test_unknown_model_gets_404_and_responder_errors_become_500():
    def broken(request):
        raise KeyError("oops")

    with ScriptedLLMServer(broken, models=["known"]) as server:
        assert post(server, {"model": "other", "messages": []})[0] == 404
        assert post(server, {"model": "known", "messages": []})[0] == 500
        assert len(server.responder_errors) == 1


def test_truncated_json_is_not_parseable(scripted_llm):
    scripted_llm.responder = always(truncated_json())
    status, _, raw = post(scripted_llm, {"model": "m", "messages": []})
    assert status == 200
    with pytest.raises(ValueError):
        json.loads(raw)


def test_peak_in_flight_counts_concurrent_requests(scripted_llm):
    scripted_llm.responder = always(delay(0.3, "ok"))
    threads = [threading.Thread(target=post, args=(scripted_llm, {"model": "m", "messages": []})) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert scripted_llm.peak_in_flight == 3
    scripted_llm.reset()
    assert (scripted_llm.count, scripted_llm.peak_in_flight) == (0, 0)


def test_hanging_request_ends_when_client_leaves_and_stop_is_prompt():
    server = ScriptedLLMServer(always(hang())).start()
    with pytest.raises(OSError):  # urllib's timeout
        post(server, {"model": "m", "messages": []}, timeout=0.3)
    deadline = time.monotonic() + 30
    while server.in_flight and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.in_flight == 0  # the server noticed the client had gone

    outcome: list[BaseException] = []

    def wait_for_answer() -> None:
        try:
            post(server, {"model": "m", "messages": []}, timeout=10)
        except Exception as exc:  # the connection is dropped without an answer
            outcome.append(exc)

    waiting = threading.Thread(target=wait_for_answer)
    waiting.start()
    deadline = time.monotonic() + 30
    while server.in_flight < 1:  # the second request is admitted and hanging: observed, not guessed
        assert time.monotonic() < deadline and waiting.is_alive()
        time.sleep(0.02)
    started = time.monotonic()
    server.stop()
    waiting.join(timeout=10)
    assert time.monotonic() - started < 5 and not waiting.is_alive()  # not the client's 10 s timeout
    assert len(outcome) == 1 and server.count == 2


def test_openai_sdk_reads_chat_replies_and_usage(scripted_llm):
    scripted_llm.responder = chat(lambda messages, body: f"echo {messages[-1]['content']} {body['max_tokens']}")
    client = openai.OpenAI(base_url=scripted_llm.base_url, api_key="k", max_retries=0)
    response = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hello"}], max_tokens=7
    )
    assert response.choices[0].message.content == "echo hello 7"
    assert response.usage.prompt_tokens == 1 and response.usage.completion_tokens == 3


def test_unused_base_url_refuses_connections():
    with pytest.raises(OSError):
        urllib.request.urlopen(unused_base_url() + "/models", timeout=2)


def test_every_server_and_unused_url_gets_a_port_no_earlier_one_had():
    # The app shares one judge and breaker per base URL, so a reused port would leak state between tests.
    urls = [unused_base_url() for _ in range(20)]
    for _ in range(20):
        with ScriptedLLMServer() as server:
            urls.append(server.base_url)
    assert len(set(urls)) == len(urls) == 40
