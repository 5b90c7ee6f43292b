"""A stand-in relevance judge for load runs: an OpenAI-compatible chat server on loopback that answers
the reranker's prompts after a realistic delay and counts how many requests it holds at once.

It scores by keyword overlap between query and passage (good enough to keep rankings stable), sends
yes/no logprobs when asked for them and {"score": S} otherwise, like the judge the reranker expects.
The peak number of requests in flight is what a load run checks against RERANKER_MAX_PARALLEL.

    with LatencyJudge(min_ms=50, max_ms=150) as judge:
        ... RERANKER_BASE_URL=judge.base_url ...
        judge.peak_in_flight
"""

from __future__ import annotations

import json
import math
import random
import re
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import Any

from bench.loopback import LoopbackServer, send_json
from graphiti_llm_rerank.judge_prompt import parse_judge_prompt


def keyword_overlap(query: str, passage: str) -> float:
    query_words = set(re.findall(r"\w+", query.lower()))
    passage_words = set(re.findall(r"\w+", passage.lower()))
    return len(query_words & passage_words) / len(query_words) if query_words else 0.0


def completion(body: dict[str, Any], score: float) -> dict[str, Any]:
    word = "yes" if score >= 0.5 else "no"
    choice: dict[str, Any] = {"index": 0, "finish_reason": "stop",
                              "message": {"role": "assistant", "content": word}}
    if body.get("logprobs"):
        p_yes, p_no = max(0.9 * score, 1e-6), max(0.9 * (1 - score), 1e-6)
        top = [{"token": token, "logprob": math.log(p), "bytes": None} for token, p in (("yes", p_yes), ("no", p_no))]
        choice["logprobs"] = {"content": [{"token": word, "logprob": math.log(max(p_yes, p_no)), "bytes": None,
                                           "top_logprobs": top}]}
    else:
        choice["message"]["content"] = json.dumps({"score": round(score, 4)})
    return {"id": "chatcmpl-load", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", "load-judge"), "choices": [choice],
            "usage": {"prompt_tokens": 100, "completion_tokens": 1, "total_tokens": 101}}


class LatencyJudge:
    def __init__(self, min_ms: float = 50, max_ms: float = 150, seed: int = 7) -> None:
        self.min_s, self.max_s = min_ms / 1000, max_ms / 1000
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self.requests = 0
        self.in_flight = 0
        self.peak_in_flight = 0
        self._server: LoopbackServer | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None, "start the judge first"
        return self._server.base_url

    def start(self) -> "LatencyJudge":
        judge = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                judge._enter()
                try:
                    time.sleep(judge._delay())
                    fields = parse_judge_prompt(body.get("messages") or [])
                    score = keyword_overlap(*fields) if fields else 0.0
                    payload = completion(body, score)
                finally:
                    judge._leave()  # before answering: the client's next request must not overlap this one
                send_json(self, 200, payload)

        self._server = LoopbackServer(Handler)
        self._server.serve_in_thread("latency-judge")
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.close()

    def __enter__(self) -> "LatencyJudge":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _delay(self) -> float:
        with self._lock:
            return self._random.uniform(self.min_s, self.max_s)

    def _enter(self) -> None:
        with self._lock:
            self.requests += 1
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1
