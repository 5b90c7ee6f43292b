"""Scripts for the report tests: a responder that plays both the judge and the chat LLM, helpers to
tell the report prompts apart, and a small fact set with history (the water utility's town).

    scripted_llm.responder = judge_or_chat(score_fn, chat_fn)

Judge prompts (the reranker's, recognised structurally by graphiti_llm_rerank.judge_prompt) go to
`judge(score_fn)`; every other request to `chat_fn(messages, body)`.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable

from bench.report_writer import kind_of
from tests.support.facts import WATER_FACTS
from tests.support.scripted_llm_replies import ChatRequest, chat, judge, keyword_overlap

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
FACT_LINE = re.compile(r"^\[([0-9a-f-]{36})\] (.*)$", re.MULTILINE)

HISTORY_FACTS = [
    {"source": "Mara Lindqvist", "target": "Harbor Water Utility", "relation": "deputy director of",
     "fact": "Mara Lindqvist was deputy director of the Harbor Water Utility before she became director",
     "valid_at": "2015-03-01T00:00:00Z", "invalid_at": "2019-01-01T00:00:00Z"},
    {"source": "Harbor Water Utility", "target": "Old Mill Well", "relation": "operated",
     "fact": "Harbor Water Utility operated the Old Mill Well until nitrate levels forced its closure",
     "valid_at": "2001-01-01T00:00:00Z", "invalid_at": "2016-06-30T00:00:00Z"},
    {"source": "Harbor Water Utility", "target": "Pipe renewal programme", "relation": "runs",
     "fact": "Harbor Water Utility runs a pipe renewal programme replacing 4 km of lead pipes a year",
     "valid_at": "2020-01-01T00:00:00Z"},
]
REPORT_FACTS = WATER_FACTS + HISTORY_FACTS


def judge_or_chat(score_fn: Callable[[str, str], Any] = keyword_overlap,
                  chat_fn: Callable[[list[dict], dict], Any] = lambda messages, body: "ok"):
    judge_reply, chat_reply = judge(score_fn), chat(chat_fn)

    def respond(request: ChatRequest):
        return judge_reply(request) if request.judge_fields is not None else chat_reply(request)

    return respond


def purpose(messages: list[dict]) -> str | None:
    """Which report prompt a request carries: outline, section, sub_queries, interview, completion, or None
    (the bench's stand-in writer tells them apart the same way: bench/report_writer.py)."""
    kind = kind_of(messages)
    return None if kind in ("judge", "other") else kind


def interview_facts(messages: list[dict]) -> list[tuple[str, str]]:
    """(uuid, fact text) pairs listed in an interview prompt, in the order given."""
    return FACT_LINE.findall(str(messages[-1].get("content", "")))


def interviewee(messages: list[dict]) -> str:
    match = re.search(r"^You are: ([^\n(]+)", str(messages[-1].get("content", "")), re.MULTILINE)
    return match.group(1).strip() if match else ""


def as_json(value: Any) -> str:
    return json.dumps(value)


def chat_requests(server) -> list[ChatRequest]:
    """Received requests that were not judge prompts."""
    all_requests = [ChatRequest(index=i, body=body, headers={}) for i, body in enumerate(server.requests)]
    return [request for request in all_requests if request.judge_fields is None]


def judge_requests(server) -> list[ChatRequest]:
    all_requests = [ChatRequest(index=i, body=body, headers={}) for i, body in enumerate(server.requests)]
    return [request for request in all_requests if request.judge_fields is not None]
