"""The chat model the report tools and the report agent talk to (LLM_BASE_URL / LLM_MODEL_NAME).

A small synchronous client: the tools and the agent run in request threads or a background task,
never on the graph loop. One request per call, temperature 0, no SDK retries (a retry would
multiply LLM_TIMEOUT_S), and JSON answers read defensively: reasoning blocks and markdown fences
are dropped, then the first JSON object in the text is taken. Errors surface as `ReportLLMError`,
whose text never holds the API key.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from typing import Any

import openai

from app.config import Config
from graphiti_llm_rerank import strip_reasoning

logger = logging.getLogger(__name__)

DEFAULT_MAX_TOKENS = 1024
MAX_JSON_DEPTH = 32  # deeper answers are refused before json.loads can recurse into them
_STRUCTURE = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


class ReportLLMError(Exception):
    """The model could not be reached, failed, or answered something unusable."""

    def __init__(self, error_class: str, detail: str = "") -> None:
        super().__init__(f"{error_class}: {detail}" if detail else error_class)
        self.error_class = error_class
        self.detail = detail


def _too_deep(text: str) -> bool:
    depth = 0
    for match in _STRUCTURE.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                return True
        elif token in "]}":
            depth -= 1
    return False


def parse_json_object(text: str | None) -> dict | None:
    """The first JSON object in a model's answer, or None. Tolerates prose, fences and <think>."""
    cleaned = strip_reasoning(text or "")
    if not cleaned or _too_deep(cleaned):
        return None
    try:
        value = json.loads(cleaned)
        return value if isinstance(value, dict) else None
    except ValueError:
        pass
    decoder = json.JSONDecoder()
    for start in (index for index, char in enumerate(cleaned) if char == "{"):
        try:
            value, _ = decoder.raw_decode(cleaned, start)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


class ReportLLM:
    """Chat completions for the report tools and agent; counters in `stats()`."""

    def __init__(self, *, base_url: str, api_key: str | None, model: str, timeout_s: float,
                 max_tokens: int = DEFAULT_MAX_TOKENS) -> None:
        if timeout_s <= 0 or max_tokens < 1:
            raise ValueError("timeout_s must be > 0 and max_tokens >= 1")
        self.base_url = base_url
        self.model = model
        self.timeout_s = float(timeout_s)
        self.max_tokens = max_tokens
        self._api_key = api_key or "unused"  # local servers ignore the key; the SDK insists on one
        self._client: openai.OpenAI | None = None
        self._lock = threading.Lock()
        self._counts = {"requests": 0, "errors": 0, "invalid_json": 0, "prompt_tokens": 0, "completion_tokens": 0}

    @classmethod
    def from_config(cls, config: Config) -> "ReportLLM":
        return cls(base_url=config.llm_base_url, api_key=config.llm_api_key, model=config.llm_model_name,
                   timeout_s=config.llm_timeout_s)

    def __repr__(self) -> str:
        return f"ReportLLM(model={self.model!r})"

    def chat(self, messages: list[dict[str, str]], *, max_tokens: int | None = None,
             json_object: bool = False) -> str:
        """The assistant's text for one request; raises ReportLLMError."""
        options: dict[str, Any] = {"response_format": {"type": "json_object"}} if json_object else {}
        self._count("requests")
        try:
            response = self._get_client().chat.completions.create(
                model=self.model, messages=messages, temperature=0,
                max_tokens=max_tokens or self.max_tokens, **options,
            )
        except Exception as exc:
            raise self._failed(exc) from None
        return self._text_of(response)

    def chat_json(self, messages: list[dict[str, str]], *, max_tokens: int | None = None) -> dict:
        """A JSON object answer; raises ReportLLMError('InvalidJSON') when there is none."""
        text = self.chat(messages, max_tokens=max_tokens, json_object=True)
        value = parse_json_object(text)
        if value is None:
            self._count("invalid_json")
            raise ReportLLMError("InvalidJSON", f"answer is not a JSON object: {text[:200]!r}")
        return value

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"model": self.model, **self._counts}

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    # -- internals --------------------------------------------------------------------------

    def _get_client(self) -> openai.OpenAI:
        with self._lock:
            if self._client is None:
                self._client = openai.OpenAI(base_url=self.base_url, api_key=self._api_key,
                                             timeout=self.timeout_s, max_retries=0)
            return self._client

    def _count(self, name: str, amount: int = 1) -> None:
        with self._lock:
            self._counts[name] += amount

    def _failed(self, exc: Exception) -> ReportLLMError:
        self._count("errors")
        name = type(exc).__name__
        if isinstance(exc, openai.APITimeoutError):
            error = ReportLLMError(name, f"no answer within {self.timeout_s:g}s")
        elif isinstance(exc, openai.APIStatusError):
            error = ReportLLMError(name, f"HTTP {exc.status_code}")
        elif isinstance(exc, openai.APIConnectionError):
            error = ReportLLMError(name, "could not reach the server")
        else:
            error = ReportLLMError(name, "unreadable response")
        logger.warning("Report LLM %r request failed: %s", self.model, error)
        return error

    def _text_of(self, response: Any) -> str:
        """Servers (and test scripts) may send any shape with a 200: read it defensively."""
        usage = getattr(response, "usage", None)
        self._count("prompt_tokens", int(getattr(usage, "prompt_tokens", 0) or 0))
        self._count("completion_tokens", int(getattr(usage, "completion_tokens", 0) or 0))
        choices = getattr(response, "choices", None)
        text = None
        if isinstance(choices, list) and choices:
            text = getattr(getattr(choices[0], "message", None), "content", None)
        if not isinstance(text, str) or not text.strip():
            self._count("errors")
            raise ReportLLMError("EmptyAnswer", "the response holds no message content")
        return text
