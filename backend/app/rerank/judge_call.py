"""One rerank call's view of the shared `LLMJudge`: what strategies receive as their `provider`.

It offers the judge's two request methods, `score()` and `complete()`, so a strategy written against
`LLMJudge` works unchanged, and adds what belongs to one call only:

- counting: LLM calls made (cache hits are not calls), tokens, unusable answers, unit fallbacks,
  permutation repairs, pairwise ties. The judge's own counters are process-wide and shared by
  concurrent calls, so a per-call count cannot be read from them; unusable answers and unit
  fallbacks are also added to the judge's `invalid_outputs` / `unit_fallbacks`, so /health and the
  benchmark see them for every strategy, not only pointwise;
- typed errors: `JudgeError` becomes `RerankProviderError` or `RerankParseError`;
- the failure policy for one unit of work (a window, a group, a pair): with `strict` the error
  propagates (fail fast); otherwise the unit keeps its incoming order and a fallback is counted;
- the context guard: a prompt whose estimated size exceeds the model's window is refused.

The judge's semaphore, cache and counters stay the only ones: nothing here bypasses them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from app.config import DEFAULT_CONTEXT_TOKENS
from app.rerank.judge import JudgeError, LLMJudge, Usage
from app.rerank.request_waves import NOT_SENT, RequestWaves
from app.rerank.types import DocumentTooLongError, RerankParseError, RerankProviderError

logger = logging.getLogger(__name__)

_MESSAGE_OVERHEAD_TOKENS = 8
_DEAD_AFTER = 3  # failed units, none reaching the server, that end a lenient call
T = TypeVar("T")


def estimate_tokens(text: str) -> int:
    """A deliberately generous estimate: ~3 ASCII characters per token, one token per other character."""
    ascii_chars = sum(1 for char in text if ord(char) < 128)
    return ascii_chars // 3 + (len(text) - ascii_chars) + 1


def typed_error(exc: JudgeError) -> RerankProviderError | RerankParseError:
    if exc.error_class == "InvalidOutput":
        return RerankParseError(f"the model's answer is unusable ({exc.detail})")
    return RerankProviderError(
        f"the model request failed ({exc.error_class}: {exc.detail})" if exc.detail else exc.error_class,
        error_class=exc.error_class,
        call_level=exc.call_level,
    )


class JudgeCall:
    def __init__(self, judge: LLMJudge, *, strict: bool = True, context_tokens: int | None = None) -> None:
        self.judge = judge
        self.strict = strict
        self.context_tokens = context_tokens or DEFAULT_CONTEXT_TOKENS
        self.calls = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.fallbacks = 0  # units (window, group, pair, document) answered in incoming order
        self.invalid_outputs = 0  # answers read by a strategy that held nothing usable
        self.repairs = 0  # entries added to or dropped from model permutations / selections
        self.repair_reports: list[dict[str, Any]] = []  # one per repaired listwise answer (permutation.py)
        self.ties = 0  # pairwise comparisons whose two orders disagreed
        self.embedding_calls = 0  # embedder requests (mmr's similarity), not model calls
        self.diversity_note: str | None = None  # set by a diversity strategy (mmr) for the answer
        self.successes = 0
        self.last_error: Exception | None = None

    @property
    def model(self) -> str:
        return self.judge.model

    @property
    def instructions(self) -> str | None:
        return self.judge.instructions

    async def score(self, query: str, passage: str, *, waves: RequestWaves | None = None) -> float:
        """The judge's pointwise relevance in [0, 1]; a cached score costs no call. `waves`: the
        call's RequestWaves (`self.judge.request_waves()`), shared by its concurrent requests."""
        cached = self.judge.cached_score(query, passage)
        if cached is not None:
            return cached
        self.calls += 1
        try:
            return await self.judge.score(query, passage, waves=waves)
        except JudgeError as exc:
            if exc.error_class == NOT_SENT:  # held back by the call's waves: no call was made
                self.calls -= 1
            raise self._typed(exc) from None

    async def complete(
        self, messages: list[dict[str, str]], *, max_tokens: int, json_object: bool = False
    ) -> tuple[str, Usage]:
        self.calls += 1
        try:
            text, usage = await self.judge.complete(messages, max_tokens=max_tokens, json_object=json_object)
        except JudgeError as exc:
            raise self._typed(exc) from None
        self.prompt_tokens += usage.prompt_tokens
        self.completion_tokens += usage.completion_tokens
        return text, usage

    def _typed(self, exc: JudgeError) -> RerankProviderError | RerankParseError:
        if exc.error_class == "InvalidOutput":  # the judge has counted it in its own counters
            self.invalid_outputs += 1
        return typed_error(exc)

    def parsed(self, read: Callable[..., T], text: str, *args: Any, **options: Any) -> T:
        """`read(text, *args, **options)`, counting an unusable answer (RerankParseError) as an invalid output."""
        try:
            return read(text, *args, **options)
        except RerankParseError:
            self.invalid_outputs += 1
            self.judge.counters.add("invalid_outputs")
            self.judge.counters.record_error("InvalidOutput")
            raise

    def check_fits(self, messages: list[dict[str, str]], answer_tokens: int, longest_id: str | None, what: str) -> None:
        """Refuse a prompt that would not fit the model's context window (estimated, before sending)."""
        needed = answer_tokens + sum(
            estimate_tokens(str(message.get("content", ""))) + _MESSAGE_OVERHEAD_TOKENS for message in messages
        )
        if needed > self.context_tokens:
            raise DocumentTooLongError(
                f"the {what} prompt needs about {needed} tokens, more than the model's context of "
                f"{self.context_tokens} (RERANKER_CONTEXT_TOKENS); longest document: {longest_id!r}. "
                "Send fewer or shorter documents, or lower RERANKER_MAX_DOCUMENT_CHARS",
                document_id=longest_id,
            )

    def embedding_requested(self) -> None:
        """An embedder request (mmr): counted apart from model calls, here and in the judge's counters."""
        self.embedding_calls += 1
        self.judge.counters.add("embedding_calls")

    def record_repairs(self, report: Any, what: str) -> None:
        """A listwise answer's PermutationReport: counted, and kept when it needed repairs."""
        self.repairs += report.repairs
        if not report.is_valid:
            self.repair_reports.append({"unit": what, **report.as_dict()})

    def unit_succeeded(self) -> None:
        self.successes += 1

    def unit_failed(self, error: Exception, what: str) -> None:
        """Strict: re-raise. Otherwise the unit keeps its incoming order; call-level errors still abort."""
        if self.strict or (isinstance(error, RerankProviderError) and error.call_level):
            raise error
        if self._unreachable(error) and self.fallbacks >= _DEAD_AFTER - 1:
            raise error  # nothing has reached the server so far: it is down, stop spending calls on it
        self.fallbacks += 1
        self.judge.counters.add("unit_fallbacks")
        self.last_error = error
        logger.debug("Rerank %s keeps its incoming order (%s: %s)", what, type(error).__name__, error)

    def _unreachable(self, error: Exception) -> bool:
        # Only connection failures: an HTTP 500 or a bad answer may be about one unit's passages.
        return (
            self.successes == 0
            and isinstance(error, RerankProviderError)
            and error.error_class == "APIConnectionError"
        )

    def raise_if_nothing_worked(self) -> None:
        """Every unit failed: that is a failed call, not a ranking (the caller falls back once, loudly)."""
        if self.successes == 0 and self.last_error is not None:
            raise self.last_error

    def stats(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "fallbacks": self.fallbacks,
            "invalid_outputs": self.invalid_outputs,
            "repairs": self.repairs,
            "repair_reports": list(self.repair_reports),
            "ties": self.ties,
            "embedding_calls": self.embedding_calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
        }


def judge_call_for(provider: Any) -> JudgeCall:
    """The provider as a JudgeCall: strategies called directly with a bare judge get a strict one."""
    if isinstance(provider, JudgeCall):
        return provider
    return JudgeCall(provider, strict=True)
