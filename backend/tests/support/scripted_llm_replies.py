"""Replies and responders for the scripted OpenAI-compatible server (see scripted_llm.py).

A *responder* is a callable `(ChatRequest) -> value`, where the value is a `Reply` (from the builders
below), a `str` (the assistant's content) or a `dict` (sent as the JSON body, as is). Inside
`judge(score_fn)`, `score_fn(query, passage)` may also return a float score.
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, Callable

from graphiti_llm_rerank.judge_prompt import judge_prompt_mode, parse_judge_prompt

__all__ = [
    "ChatRequest", "Reply", "Responder",
    "completion", "error", "model_not_found", "server_error", "rate_limited", "delay", "hang",
    "truncated_json", "empty_choices", "no_logprobs", "wrong_shape", "garbage", "raw_json",
    "judge", "chat", "always", "when", "keyword_overlap", "keyword_overlap_judge", "resolve",
]


@dataclass
class ChatRequest:
    """One received chat-completion request."""

    index: int  # arrival order, 0-based, since the server started or was reset
    body: dict[str, Any]
    headers: dict[str, str]  # names lower-cased
    path: str = "/v1/chat/completions"  # the POST path it came to (a subclass may serve several)

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages") or [])

    @property
    def model(self) -> str:
        return str(self.body.get("model", ""))

    @property
    def wants_logprobs(self) -> bool:
        return bool(self.body.get("logprobs"))

    @property
    def text(self) -> str:
        """All message contents, joined; handy for `when(lambda r: "X" in r.text, ...)`."""
        return "\n".join(str(m.get("content", "")) for m in self.messages if isinstance(m, dict))

    @cached_property
    def judge_fields(self) -> tuple[str, str] | None:
        """(query, passage) when this is a reranker judge prompt, else None."""
        return parse_judge_prompt(self.messages)

    @cached_property
    def judge_mode(self) -> str | None:
        """The score mode ("logprobs", "graded", "json") a judge prompt was built for, else None."""
        return judge_prompt_mode(self.messages)

    @property
    def query(self) -> str | None:
        return self.judge_fields[0] if self.judge_fields else None

    @property
    def passage(self) -> str | None:
        return self.judge_fields[1] if self.judge_fields else None


Rendered = tuple[int, dict[str, str], bytes]


@dataclass(frozen=True)
class Reply:
    """What the server does with one request: wait `delay_s`, then render (or hang)."""

    render: Callable[[ChatRequest], Rendered] | None = None
    delay_s: float = 0.0
    hang: bool = False
    then: Any = None  # delay(): the value to answer after the delay, resolved like a responder's


Responder = Callable[[ChatRequest], Any]


# -- reply builders -----------------------------------------------------------------------------


def _json_bytes(body: Any) -> bytes:
    return json.dumps(body, ensure_ascii=False).encode("utf-8")


def _completion_body(
    request: ChatRequest, content: str, token_probs: list[tuple[str, float]] | None, with_logprobs: bool
) -> dict[str, Any]:
    prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in request.messages if isinstance(m, dict))
    completion_tokens = max(1, len(content.split())) if content else 0
    choice: dict[str, Any] = {
        "index": 0,
        "message": {"role": "assistant", "content": content},
        "finish_reason": "stop",
    }
    if with_logprobs:
        choice["logprobs"] = None
        if request.wants_logprobs:
            alternatives = [(t, p) for t, p in (token_probs or [(content, 1.0)]) if p > 0]
            alternatives.sort(key=lambda item: item[1], reverse=True)
            top = [{"token": t, "logprob": math.log(p), "bytes": list(t.encode("utf-8"))} for t, p in alternatives]
            chosen = next((alt for alt in top if alt["token"] == content), None)
            chosen = chosen or {"token": content, "logprob": 0.0, "bytes": list(content.encode("utf-8"))}
            choice["logprobs"] = {"content": [{**chosen, "top_logprobs": top}], "refusal": None}
    return {
        "id": f"chatcmpl-scripted-{request.index}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.model,
        "choices": [choice],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def completion(content: str, *, token_probs: list[tuple[str, float]] | None = None) -> Reply:
    """A normal answer. If the request asked for logprobs, position 0 lists `token_probs`
    ((token, probability) pairs; zero-probability ones are left out) or just `content` itself."""
    return Reply(lambda r: (200, {}, _json_bytes(_completion_body(r, content, token_probs, True))))


def no_logprobs(content: str = "Yes") -> Reply:
    """An answer without any `logprobs` key, as a server that does not support them sends."""
    return Reply(lambda r: (200, {}, _json_bytes(_completion_body(r, content, None, False))))


def garbage(content: str = "Certainly! Relevance is a fascinating topic.") -> Reply:
    """Well-formed response whose content is neither yes/no nor a score."""
    return completion(content)


def raw_json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Reply:
    return Reply(lambda r: (status, dict(headers or {}), _json_bytes(body)))


def wrong_shape(body: Any = None) -> Reply:
    """A 200 whose JSON is not a chat completion (default `{"foo": 1}`)."""
    return raw_json({"foo": 1} if body is None else body)


def empty_choices() -> Reply:
    return Reply(lambda r: (200, {}, _json_bytes({**_completion_body(r, "", None, False), "choices": []})))


def truncated_json(content: str = "Yes") -> Reply:
    """A 200 whose body is the first half of a valid completion (complete HTTP, broken JSON)."""

    def render(request: ChatRequest) -> Rendered:
        full = _json_bytes(_completion_body(request, content, None, True))
        return 200, {}, full[: len(full) // 2]

    return Reply(render)


def error(status: int, message: str, *, code: str | None = None, retry_after: float | None = None) -> Reply:
    """An HTTP error with OpenAI's error body: {"error": {"message", "type", "param", "code"}}."""
    kind = "invalid_request_error" if 400 <= status < 500 else "server_error"
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else {}
    return raw_json(body, status, headers)


def model_not_found() -> Reply:
    return Reply(lambda r: error(404, f"model '{r.model}' not found", code="model_not_found").render(r))


def server_error(message: str = "scripted internal server error") -> Reply:
    return error(500, message)


def rate_limited(retry_after: float = 1.0) -> Reply:
    return error(429, "rate limit reached", code="rate_limit_exceeded", retry_after=retry_after)


def delay(seconds: float, then: Any) -> Reply:
    """Wait, then answer `then` (a Reply, str, dict, or inside judge() a score). The wait ends
    early, with no answer, if the client disconnects (e.g. its timeout) or the server stops."""
    return Reply(delay_s=seconds, then=then)


def hang() -> Reply:
    """Never answer; the connection closes when the client gives up or the server stops."""
    return Reply(hang=True)


# -- responders ---------------------------------------------------------------------------------


def resolve(value: Any, request: ChatRequest, score_reply: Callable[[float], Reply] | None = None) -> Reply:
    """Turn a responder's value into a renderable Reply (delays are unwrapped and added up)."""
    if isinstance(value, Reply):
        if value.then is None:
            return value
        inner = resolve(value.then, request, score_reply)
        return replace(inner, delay_s=inner.delay_s + value.delay_s)
    if isinstance(value, str):
        return completion(value)
    if isinstance(value, dict):
        return raw_json(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and score_reply is not None:
        return score_reply(float(value))
    return error(500, f"scripted responder returned an unusable value: {value!r}")


def judge(
    score_fn: Callable[[str, str], Any],
    *,
    logprobs: bool = True,
    yes_token: str = "Yes",
    no_token: str = "No",
) -> Responder:
    """A relevance judge for the reranker's prompts; `score_fn(query, passage)` -> score in [0, 1]
    (or any responder value, e.g. a fault for one passage).

    Logprob requests get top_logprobs with P(yes_token) = 0.9*score, P(no_token) = 0.9*(1-score)
    (plus two filler tokens), so P(yes)/(P(yes)+P(no)) is the score; the generated token is the
    likelier word. Graded prompts get the two digits around 3*score, weighted so that the expected
    grade / 3 is the score (the generated token is the likelier digit, or the nearest grade without
    logprobs). With `logprobs=False` the server acts as one without logprob support: no
    `logprobs` key, content is the likelier word. Other requests get `{"score": <score>}`.
    Prompts that are not judge prompts get a 400.
    """

    def score_reply(request: ChatRequest, score: float) -> Reply:
        score = min(1.0, max(0.0, score))
        if request.judge_mode == "graded":
            return graded_reply(request, score)
        word = yes_token if score >= 0.5 else no_token
        if not request.wants_logprobs:
            return completion(json.dumps({"score": score}))
        if not logprobs:
            return no_logprobs(word)
        probs = [(yes_token, 0.9 * score), (no_token, 0.9 * (1.0 - score)), ("Maybe", 0.06), ("The", 0.04)]
        return completion(word, token_probs=probs)

    def graded_reply(request: ChatRequest, score: float) -> Reply:
        grade = 3 * score
        low = min(int(grade), 2)
        upper_share = grade - low
        if not (request.wants_logprobs and logprobs):
            return no_logprobs(str(round(grade)))
        probs = [(str(low), 0.9 * (1 - upper_share)), (str(low + 1), 0.9 * upper_share), ("The", 0.1)]
        return completion(str(low + (upper_share >= 0.5)), token_probs=probs)

    def respond(request: ChatRequest) -> Reply:
        fields = request.judge_fields
        if fields is None:
            return error(400, "scripted judge: the prompt has no <query>/<passage> blocks")
        return resolve(score_fn(*fields), request, lambda score: score_reply(request, score))

    return respond


def keyword_overlap(query: str, passage: str) -> float:
    """Share of the query's distinct words that occur in the passage."""
    query_words = set(re.findall(r"\w+", query.lower()))
    passage_words = set(re.findall(r"\w+", passage.lower()))
    return len(query_words & passage_words) / len(query_words) if query_words else 0.0


def keyword_overlap_judge(request: ChatRequest) -> Reply:
    """The default responder: judge prompts are scored by keyword overlap, anything else gets "ok"."""
    if request.judge_fields is None:
        return completion("ok")
    return judge(keyword_overlap)(request)


def chat(fn: Callable[[list[dict[str, Any]], dict[str, Any]], Any]) -> Responder:
    """Free-form chat: `fn(messages, body)` returns the content (or any responder value)."""
    return lambda request: fn(request.messages, request.body)


def always(value: Any) -> Responder:
    """The same answer (usually a fault) for every request."""
    return lambda request: value


def when(predicate: Callable[[ChatRequest], bool], value: Any, otherwise: Responder) -> Responder:
    """`value` for requests matching `predicate`, `otherwise(request)` for the rest."""
    return lambda request: value if predicate(request) else otherwise(request)
