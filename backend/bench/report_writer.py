"""A stand-in chat model for the report agent in load runs: an OpenAI-compatible server on loopback
that answers each of the agent's prompts after 50-150 ms, always the same way for the same prompt.

It tells the prompts apart by their system message (app/report/prompts.py holds each as a constant)
and answers what the agent's checks accept, so a report ends "done" and the run measures the
queue, the workers and the API processes, not a model:

- outline: two sections, one per half of the requirement;
- section: writes at once from the facts the agent's own planned searches showed it (each listed
  fact's words, cited by its label), so a section costs one model turn;
- sub-queries, interview, completion: the question itself; every answer citing the first listed
  fact; nothing to add;
- a reranker's judge prompt (with the reranker on): keyword overlap, as bench/latency_judge.py.

The delay is drawn from a seeded generator, the answers are functions of the prompt.

    with ReportWriter(min_ms=50, max_ms=150) as writer:
        ... LLM_BASE_URL=writer.base_url ...
        writer.requests_by_kind
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler
from typing import Any

from bench.latency_judge import completion as judge_completion, keyword_overlap
from bench.loopback import LoopbackServer, send_json
from graphiti_llm_rerank.judge_prompt import parse_judge_prompt
from app.report import prompts

MODEL = "stand-in-writer"
# A listed fact as the agent shows it: "- [F3] Sensor 4 at Old Mill logs pressure ... (valid from ...)".
_LABELLED_FACT = re.compile(r"^- \[(F\d+)\] (.+?)(?: \([^()]*\))?$", re.MULTILINE)
_FACT_LINE = re.compile(r"^- \[([0-9a-f-]{36})\] ", re.MULTILINE)
_QUESTION = re.compile(r"^\d+\. ", re.MULTILINE)
FACTS_PER_SECTION = 3


def kind_of(messages: list[dict]) -> str:
    """Which of the agent's prompts `messages` carry (the report tests' script asks this too)."""
    if parse_judge_prompt(messages) is not None:
        return "judge"
    system = str(messages[0].get("content", "")) if messages else ""
    if system.startswith(prompts.OUTLINE_PROMPT.split("MAX")[0]):
        return "outline"
    if system.startswith(prompts.SECTION_PROMPT_HEAD):
        return "section"
    if system.startswith(prompts.SUB_QUERY_PROMPT.split("MAX")[0]):
        return "sub_queries"
    if system == prompts.INTERVIEW_PROMPT:
        return "interview"
    if system == prompts.COMPLETION_PROMPT:
        return "completion"
    return "other"


def _user_text(messages: list[dict]) -> str:
    return "\n".join(str(message.get("content", "")) for message in messages if message.get("role") == "user")


def answer(messages: list[dict]) -> str:
    """The assistant's content for a report prompt."""
    kind = kind_of(messages)
    last = str(messages[-1].get("content", "")) if messages else ""
    if kind == "outline":
        requirement = re.search(r"^Requirement: (.*)$", last, re.MULTILINE)
        topic = requirement.group(1).strip().rstrip("?") if requirement else "the graph"
        return json.dumps({"title": f"Report: {topic}"[:120], "sections": [
            {"title": f"What is recorded: {topic}"[:120], "goal": f"What the facts say about {topic}"},
            {"title": f"What changed: {topic}"[:120], "goal": f"How {topic} changed over time"}]})
    if kind == "section":
        facts = _LABELLED_FACT.findall(_user_text(messages))[:FACTS_PER_SECTION]
        if not facts:
            return json.dumps({"action": "write", "content": "The graph does not tell.", "sources": []})
        content = " ".join(f"{text.rstrip('.')} [{label}]." for label, text in facts)
        return json.dumps({"action": "write", "content": content, "sources": [label for label, _ in facts]})
    if kind == "sub_queries":
        question = re.search(r"^Question: (.*)$", last, re.MULTILINE)
        return json.dumps({"sub_queries": [question.group(1).strip()] if question else []})
    if kind == "interview":
        first = _FACT_LINE.search(last) or re.search(r"^\[([0-9a-f-]{36})\] ", last, re.MULTILINE)
        count = len(_QUESTION.findall(last.split("Questions:", 1)[-1]))
        return json.dumps({"answers": [
            {"question_index": index, "answer": "As the first fact says.", "fact_uuids": [first.group(1)]}
            if first else {"question_index": index, "answer": "I don't know.", "fact_uuids": []}
            for index in range(1, count + 1)]})
    if kind == "completion":
        return json.dumps({"content": ""})
    return json.dumps({})


def _chat_completion(body: dict[str, Any], content: str) -> dict[str, Any]:
    return {"id": "chatcmpl-writer", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", MODEL),
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}}


class ReportWriter:
    def __init__(self, min_ms: float = 50, max_ms: float = 150, seed: int = 11) -> None:
        self.min_s, self.max_s = min_ms / 1000, max_ms / 1000
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self.requests_by_kind: Counter[str] = Counter()
        self._server: LoopbackServer | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None, "start the writer first"
        return self._server.base_url

    @property
    def requests(self) -> int:
        with self._lock:
            return sum(self.requests_by_kind.values())

    def start(self) -> "ReportWriter":
        writer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # /v1/models: a client's "is it there" check
                send_json(self, 200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                messages = body.get("messages") or []
                kind = kind_of(messages)
                writer._count(kind)
                time.sleep(writer._delay())
                if kind == "judge":
                    fields = parse_judge_prompt(messages)
                    payload = judge_completion(body, keyword_overlap(*fields))
                else:
                    payload = _chat_completion(body, answer(messages))
                send_json(self, 200, payload)

        self._server = LoopbackServer(Handler)
        self._server.serve_in_thread("report-writer")
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.close()

    def __enter__(self) -> "ReportWriter":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _count(self, kind: str) -> None:
        with self._lock:
            self.requests_by_kind[kind] += 1

    def _delay(self) -> float:
        with self._lock:
            return self._random.uniform(self.min_s, self.max_s)
