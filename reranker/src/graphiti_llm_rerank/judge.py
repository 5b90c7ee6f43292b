"""The LLM relevance judge: the one OpenAI-compatible client wrapper every reranking strategy shares.

It owns everything that touches the model server: the `AsyncOpenAI` client (per-request timeout,
no SDK retries), the process-wide bound on concurrent model requests, deterministic sampling,
yes/no logprob, graded and JSON scoring (`score`), free-form answers for the multi-passage
strategies (`complete`), the score cache and the counters. Ranking policy (order, fallbacks,
deadline, breaker) belongs to the strategies and to the guard in ollama_reranker.py.

Beneath it, `ServerConnection`: what every client of a model server of ours holds, written once
(this judge and the rerank-API client, rerank_api_client.py): where the server is (its URL redacted
for logs), the per-request timeout, the process-wide bound on concurrent requests, the counters,
one HTTP client per event loop, and a fresh `RequestWaves` for each rank call (so a hung server
costs a call one timeout, not one per wave of requests).

Nothing here does network I/O before the first request, so an app can start with the server down.
Errors surface as `JudgeError`, whose text never contains the API key.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Generic, NamedTuple, TypeVar
from urllib.parse import urlsplit, urlunsplit

import openai

from graphiti_llm_rerank.config import SCORE_MODES
from graphiti_llm_rerank.observer import score_cache_lookup
from graphiti_llm_rerank.counters import CounterSet
from graphiti_llm_rerank.judge_prompt import PROMPT_VERSION, ScoreMode, build_judge_messages
from graphiti_llm_rerank.request_limit import RequestLimit
from graphiti_llm_rerank.request_waves import NOT_SENT, RequestWaves
from graphiti_llm_rerank.score_cache import ScoreCache, score_key
from graphiti_llm_rerank.score_parsing import (
    expected_grade, grade_from_text, parse_json_score, yes_no_from_text, yes_probability,
)
from graphiti_llm_rerank.types import CALL_LEVEL_STATUSES

logger = logging.getLogger(__name__)


Client = TypeVar("Client")


def redact_url(url: str) -> str:
    """The URL without any user:password part, for logs and /health."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit(parts._replace(netloc=netloc))


class LoopClients(Generic[Client]):
    """One HTTP client per event loop, made on first use.

    httpx connection pools (and so openai's client) belong to the loop that made them, but rank
    calls arrive on several loops (the graph loop thread, `asyncio.run` per request, tests).
    Clients of loops that have closed are dropped when the next one is made."""

    def __init__(self, make: Callable[[], Client], close: Callable[[Client], Awaitable[Any]]) -> None:
        self._make = make
        self._close = close
        self._lock = threading.Lock()
        self._clients: dict[asyncio.AbstractEventLoop, Client] = {}

    def get(self) -> Client:
        """The running loop's client."""
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._clients.get(loop)
            if client is None:
                for closed in [other for other in self._clients if other.is_closed()]:
                    del self._clients[closed]
                client = self._clients[loop] = self._make()
        return client

    async def aclose(self) -> None:
        """Close the running loop's client, if it made one."""
        with self._lock:
            client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await self._close(client)


class ServerConnection(Generic[Client]):
    """Base of our model-server clients. No network I/O before the first request."""

    def __init__(self, *, model: str, base_url: str, timeout_s: float, max_parallel: int, counters: CounterSet,
                 make_client: Callable[[], Client], close_client: Callable[[Client], Awaitable[Any]]) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.model = model
        self.base_url = base_url
        self.timeout_s = float(timeout_s)
        self.counters = counters
        self._limit = RequestLimit(max_parallel)
        self._lock = threading.Lock()
        self._clients = LoopClients(make_client, close_client)

    def connection_stats(self) -> dict[str, Any]:
        return {"model": self.model, "base_url": redact_url(self.base_url), "timeout_s": self.timeout_s,
                **self._limit.snapshot()}

    def request_waves(self) -> RequestWaves:
        """A fresh RequestWaves for one rank call's requests (graphiti_llm_rerank/request_waves.py)."""
        return RequestWaves(self._not_sent)

    def _not_sent(self, timed_out: int) -> Exception:
        """The error a request raises instead of being sent once a wave of `timed_out` requests all timed
        out with nothing answered; each client gives its own error type."""
        raise NotImplementedError

    def model_busy_s(self) -> float:
        """Seconds during which at least one request to the server was in flight."""
        return self._limit.busy_s()

    async def aclose(self) -> None:
        """Close the client of the running loop (optional; clients of finished loops are dropped)."""
        await self._clients.aclose()


TOP_LOGPROBS = 10  # alternatives requested per position; yes/no are nearly always among them
# The warm-up request: a judge prompt like any other (so the server also caches its system prompt), tiny.
WARMUP_QUERY = "Is the model loaded?"
WARMUP_PASSAGE = "The model is loaded."
SERVER_MESSAGE_CHARS = 160  # of an error body's message, in the JudgeError (logs, /health)
# The keys the settings fill in when none is given: words, not secrets, and taking "ollama" out of an
# Ollama error message would garble it.
_PLACEHOLDER_KEYS = frozenset({"ollama", "unused"})

COUNTER_NAMES = (
    "calls",  # rank calls (strategies count them)
    "model_requests",
    "cache_hits",
    "passage_failures",  # passages demoted because their own request failed
    "fallbacks",  # whole rank calls answered in incoming order
    "unit_fallbacks",  # windows, groups, pairs, documents that kept their incoming order inside a call
    "embedding_calls",  # embedder requests a strategy made (mmr's similarity): not model calls
    "breaker_skips",  # rank calls that skipped the model because the breaker was open
    "invalid_outputs",  # answers with nothing usable: no text, no score, no ranking / selection / label
    "score_mode_switches",  # auto mode falling back from logprobs to json
    "prompt_tokens",
    "completion_tokens",
    # What a llama.cpp server says it did (its `timings`): prompt tokens evaluated after reusing a cached
    # prefix, and the time it spent on them. With these a benchmark can set wall time against the limit.
    "prompt_tokens_evaluated",
    "prompt_eval_us",
)


class JudgeError(Exception):
    """A model request failed or its answer was unusable (text never includes the API key)."""

    def __init__(self, error_class: str, detail: str = "", *, call_level: bool = False,
                 timed_out: bool = False) -> None:
        super().__init__(f"{error_class}: {detail}" if detail else error_class)
        self.error_class = error_class
        self.detail = detail
        # True when every other request of the same call would fail the same way (404 model...).
        self.call_level = call_level
        self.timed_out = timed_out  # no answer within the timeout (graphiti_llm_rerank/request_waves.py reads it)


class Usage(NamedTuple):
    prompt_tokens: int
    completion_tokens: int


@dataclass
class _Answer:
    text: str | None
    logprob_positions: list[Any] | None  # choices[0].logprobs.content, None when absent
    usage: Usage


class JudgeCounters(CounterSet):
    """The judge's counters (COUNTER_NAMES); thread-safe, `snapshot()` is JSON-safe."""

    def __init__(self) -> None:
        super().__init__(COUNTER_NAMES)


class LLMJudge(ServerConnection[openai.AsyncOpenAI]):
    """Scores (query, passage) pairs with a chat model; shared by all reranking strategies."""

    def __init__(
        self,
        *,
        model: str,
        base_url: str,
        api_key: str | None,
        score_mode: str = "auto",
        max_parallel: int = 4,
        timeout_s: float = 30.0,
        cache_size: int = 4096,
        max_tokens: int = 16,
        instructions: str | None = None,
    ) -> None:
        if score_mode not in SCORE_MODES:
            raise ValueError(f"score_mode must be one of {SCORE_MODES}, got {score_mode!r}")
        if max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        api_key = api_key or "unused"  # Ollama ignores the key, the SDK insists on one
        self._api_key = api_key  # only to take it out of error messages a server echoes
        # max_retries=0: the SDK's own retries would multiply our timeouts and deadline.
        super().__init__(model=model, base_url=base_url, timeout_s=timeout_s, max_parallel=max_parallel,
                         counters=JudgeCounters(),
                         make_client=lambda: openai.AsyncOpenAI(base_url=base_url, api_key=api_key,
                                                                timeout=float(timeout_s), max_retries=0),
                         close_client=lambda client: client.close())
        self.score_mode = score_mode
        self.max_tokens = max_tokens
        self.instructions = instructions
        self._mode_in_use: ScoreMode = "logprobs" if score_mode == "auto" else score_mode
        self._cache = ScoreCache(cache_size)
        # The model's warm-up (graphiti_llm_rerank/warmup.py), set by `start_warmup`; rank calls on this judge wait for it.
        self.warmup: Any = None

    @classmethod
    def from_config(cls, config: Any) -> LLMJudge:
        """A judge on a `RerankerConfig`'s server, model and request settings (no network I/O)."""
        return cls(model=config.model, base_url=config.base_url, api_key=config.api_key,
                   score_mode=config.score_mode, max_parallel=config.max_parallel, timeout_s=config.timeout_s,
                   cache_size=config.cache_size, max_tokens=config.max_tokens, instructions=config.instructions)

    def __repr__(self) -> str:
        return f"LLMJudge(model={self.model!r}, base_url={redact_url(self.base_url)!r})"

    @property
    def score_mode_in_use(self) -> ScoreMode:
        return self._mode_in_use

    def is_cached(self, query: str, passage: str) -> bool:
        """Is a score for this pair in the current mode cached? (Not counted as a hit.)"""
        return score_key(self.model, PROMPT_VERSION, self._mode_in_use, query, passage) in self._cache

    def cached_score(self, query: str, passage: str) -> float | None:
        """The cached score for this pair in the current mode (counted as a hit), else None."""
        score = self._cache.get(score_key(self.model, PROMPT_VERSION, self._mode_in_use, query, passage))
        if score is not None:
            self.counters.add("cache_hits")
            score_cache_lookup(hit=True)
        return score

    async def score(self, query: str, passage: str, *, waves: RequestWaves | None = None) -> float:
        """Relevance in [0, 1]; raises JudgeError when the request fails or the answer is unusable.
        `waves`: the calling rank call's RequestWaves (from `request_waves()`), if it has one."""
        mode = self._mode_in_use
        cached = self.cached_score(query, passage)
        if cached is not None:
            return cached
        if self._cache.enabled:  # a miss here, where the model is asked (a caller's own lookup missed too)
            score_cache_lookup(hit=False)
        messages = build_judge_messages(query, passage, mode=mode, instructions=self.instructions)
        if mode == "logprobs":
            answer = await self._chat(messages, max_tokens=1, logprobs=True, waves=waves)
            if answer.logprob_positions is None and self.score_mode == "auto":
                self._switch_to_json()
                return await self.score(query, passage, waves=waves)
            score = yes_probability(answer.logprob_positions)
            if score is None:
                score = yes_no_from_text(answer.text)
        elif mode == "graded":  # no auto switch: without logprobs the written digit still grades
            answer = await self._chat(messages, max_tokens=1, logprobs=True, waves=waves)
            score = expected_grade(answer.logprob_positions)
            if score is None:
                score = grade_from_text(answer.text)
        else:
            answer = await self._chat(messages, max_tokens=self.max_tokens, json_object=True, waves=waves)
            score = parse_json_score(answer.text)
        if score is None:
            raise self._invalid_output(f"no {'grade' if mode == 'graded' else 'yes/no or score'} in the answer")
        self._cache.put(score_key(self.model, PROMPT_VERSION, mode, query, passage), score)
        return score

    async def warm_up(self, timeout_s: float) -> None:
        """One tiny judge request that gives the server `timeout_s` to load the model, instead of
        RERANKER_TIMEOUT_S (graphiti_llm_rerank/warmup.py). Outside the request bound and the counters: those
        describe rank calls. Raises JudgeError."""
        messages = build_judge_messages(WARMUP_QUERY, WARMUP_PASSAGE, mode=self._mode_in_use,
                                        instructions=self.instructions)
        try:
            async with asyncio.timeout(timeout_s):
                await self._clients.get().chat.completions.create(
                    model=self.model, messages=messages, temperature=0, max_tokens=1, timeout=timeout_s)
        except Exception as exc:  # CancelledError is not an Exception: cancellation propagates
            raise self._as_judge_error(exc, timeout_s) from None

    async def complete(
        self, messages: list[dict[str, str]], *, max_tokens: int, json_object: bool = False
    ) -> tuple[str, Usage]:
        """One chat completion under the same timeout, bound and counters; for listwise/pairwise."""
        answer = await self._chat(messages, max_tokens=max_tokens, json_object=json_object)
        if answer.text is None:
            raise self._invalid_output("no message content")
        return answer.text, answer.usage

    def stats(self) -> dict[str, Any]:
        return {
            **self.connection_stats(),
            "score_mode": self.score_mode,
            "score_mode_in_use": self._mode_in_use,
            "prompt_version": PROMPT_VERSION,
            "cache_entries": len(self._cache),
            "warmup": self.warmup.snapshot() if self.warmup is not None else {"state": "off"},
            **self.counters.snapshot(),
        }

    # -- internals --------------------------------------------------------------------------

    def _switch_to_json(self) -> None:
        with self._lock:
            if self._mode_in_use == "json":
                return
            self._mode_in_use = "json"
        self.counters.add("score_mode_switches")
        logger.info("Reranker model %r returned no logprobs; scoring with JSON answers from now on", self.model)

    def _not_sent(self, timed_out: int) -> JudgeError:
        return JudgeError(NOT_SENT, f"all {timed_out} requests in flight timed out ({self.timeout_s:g}s) "
                                     "and nothing was answered, so the server is taken as hung")

    def _invalid_output(self, detail: str) -> JudgeError:
        self.counters.add("invalid_outputs")
        self.counters.record_error("InvalidOutput")
        return JudgeError("InvalidOutput", detail)

    def _as_judge_error(self, exc: Exception, timeout_s: float | None = None) -> JudgeError:
        name = type(exc).__name__
        if isinstance(exc, (TimeoutError, openai.APITimeoutError)):
            return JudgeError(name, f"no answer within {timeout_s or self.timeout_s:g}s", timed_out=True)
        if isinstance(exc, openai.APIStatusError):
            detail = f"HTTP {exc.status_code}: {self._server_message(exc)}"
            call_level = exc.status_code in CALL_LEVEL_STATUSES
            if call_level and self.model not in detail:
                # An unknown model, a wrong key or URL: say which model was asked for where, so a bare
                # 404 in the log or /health points at the setting to fix.
                detail += f" (model {self.model!r} at {redact_url(self.base_url)})"
            return JudgeError(name, detail, call_level=call_level)
        if isinstance(exc, openai.APIConnectionError):
            return JudgeError(name, "could not reach the server")
        return JudgeError(name, "unreadable response")  # e.g. a body that is not JSON

    def _server_message(self, exc: openai.APIStatusError) -> str:
        """What the server said in its error body ({"error": {"message": ...}} or text), short and key-free."""
        body = exc.body
        message = body.get("message") if isinstance(body, dict) else body
        text = " ".join(str(message).split()) if message else "(no message)"
        if self._api_key not in _PLACEHOLDER_KEYS:
            text = text.replace(self._api_key, "***")
        return text if len(text) <= SERVER_MESSAGE_CHARS else text[:SERVER_MESSAGE_CHARS] + "..."

    async def _chat(
        self, messages: list[dict[str, str]], *, max_tokens: int, logprobs: bool = False, json_object: bool = False,
        waves: RequestWaves | None = None,
    ) -> _Answer:
        options: dict[str, Any] = {}
        if logprobs:
            options.update(logprobs=True, top_logprobs=TOP_LOGPROBS)
        if json_object:
            options["response_format"] = {"type": "json_object"}
        # Inside the slot, so a request held by its call's waves keeps its place in the FIFO order.
        async with self._limit, waves.sending() if waves is not None else nullcontext():
            self.counters.add("model_requests")
            try:
                async with asyncio.timeout(self.timeout_s):  # hard bound, whatever the transport does
                    response = await self._clients.get().chat.completions.create(
                        model=self.model, messages=messages, temperature=0, max_tokens=max_tokens, **options
                    )
            except Exception as exc:  # CancelledError is not an Exception: cancellation propagates
                error = self._as_judge_error(exc)
                self.counters.record_error(error.error_class, error.detail)
                raise error from None
        return self._read_answer(response)

    def _count_server_timings(self, response: Any) -> None:
        timings = (getattr(response, "model_extra", None) or {}).get("timings")
        if isinstance(timings, dict) and isinstance(timings.get("prompt_n"), int):
            self.counters.add("prompt_tokens_evaluated", timings["prompt_n"])
            self.counters.add("prompt_eval_us", round(float(timings.get("prompt_ms") or 0.0) * 1000))

    def _read_answer(self, response: Any) -> _Answer:
        """Defensive reading: servers (and test scripts) may send any shape with a 200."""
        try:
            usage_obj = getattr(response, "usage", None)
            usage = Usage(
                int(getattr(usage_obj, "prompt_tokens", 0) or 0),
                int(getattr(usage_obj, "completion_tokens", 0) or 0),
            )
            self.counters.add("prompt_tokens", usage.prompt_tokens)
            self.counters.add("completion_tokens", usage.completion_tokens)
            self._count_server_timings(response)
            choices = getattr(response, "choices", None)
            if not isinstance(choices, list) or not choices:
                raise self._invalid_output("no choices in the response")
            choice = choices[0]
            text = getattr(getattr(choice, "message", None), "content", None)
            logprobs = getattr(choice, "logprobs", None)
            positions = getattr(logprobs, "content", None) if logprobs is not None else None
        except JudgeError:
            raise
        except Exception as exc:  # attribute/type errors from a malformed body
            raise self._invalid_output(f"malformed response ({type(exc).__name__})") from None
        return _Answer(
            text=text if isinstance(text, str) else None,
            logprob_positions=list(positions) if isinstance(positions, list) and positions else None,
            usage=usage,
        )
