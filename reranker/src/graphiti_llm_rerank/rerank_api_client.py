"""The HTTP client of a dedicated reranker behind `POST {base}/rerank` (llama.cpp's server, TEI, vLLM,
Infinity, Cohere, Jina): one request scores a whole batch of documents for a query.

It owns everything that touches the server: httpx with a per-request timeout (a hard bound, whatever
the transport does), the process-wide bound on concurrent requests, the API key (sent as a Bearer
token, never logged or put in an error), the dialect in use and the batch size the server accepts,
and the counters. Ranking policy (cache, score scale, order, fallback) is graphiti_llm_rerank/rerank_api.py's.

- Dialect: `style="auto"` starts with the common body and switches to TEI's for good when a 4xx says
  TEI's `texts` field is missing (the same batch is retried at once) or an answer comes back as a bare
  list; back again if a 4xx says `documents` is missing. A fixed style told it speaks the wrong
  dialect fails the call at once (call level) with the setting to change, instead of splitting batches.
- Batches: at most `max_documents` per request (0: no cap). A 413 or 422 for a batch of more than one
  splits it in two and retries the halves; the smaller size is remembered for later calls.
- Failures are collected per batch, not raised: the caller decides between a partial answer and a
  fallback. After a call-level failure (401/403/404, wrong dialect) no further batch of the call is
  sent, nor after every batch in flight timed out with nothing answered (graphiti_llm_rerank/request_waves.py):
  more batches than RERANKER_MAX_PARALLEL would otherwise pay the timeout once per wave. Nothing
  here does network I/O before the first request.
"""

from __future__ import annotations

import asyncio
import logging
import re
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Callable

import httpx

from graphiti_llm_rerank.config import API_STYLES as RERANKER_API_STYLES
from graphiti_llm_rerank.counters import CounterSet
from graphiti_llm_rerank.request_waves import NOT_SENT, RequestWaves
from graphiti_llm_rerank.rerank_api_dialects import Answer, Dialect, read_answer, request_body, wanted_dialect
from graphiti_llm_rerank.judge import ServerConnection, redact_url
from graphiti_llm_rerank.types import CALL_LEVEL_STATUSES, RerankError, RerankParseError, RerankProviderError

logger = logging.getLogger(__name__)

COUNTER_NAMES = (
    "calls",  # rank calls on the graph path
    "model_requests",  # HTTP requests sent
    "cache_hits",  # passages answered from the score cache
    "fallbacks",  # whole rank calls answered in incoming order
    "breaker_skips",  # rank calls that skipped the server because the breaker was open
    "passage_failures",  # passages whose request failed while others of the call were scored
    "unscored",  # passages an answer left out (a server capping top_n, a missing index)
    "ignored_results",  # answer entries out of range, repeated or unreadable
    "invalid_outputs",  # answers with no usable result at all
    "batch_splits",  # batches split after a 413/422
    "dialect_switches",  # auto style moving to TEI's dialect
    "score_scale_switches",  # raw scores found to be logits rather than probabilities
    "prompt_tokens",  # tokens the server reports it evaluated
)
# Servers say "too many documents in one request" with these (TEI: 413; FastAPI-style validation: 422).
_BATCH_REFUSED_STATUSES = frozenset({413, 422})
_EXCERPT_CHARS = 160


OnScored = Callable[[dict[int, float]], None]


class BatchRefused(RerankProviderError):
    """A 413/422 for a batch of more than one document: split it and try again."""


@dataclass
class ScoredTexts:
    """What one `score` call got: raw scores by position, and what went wrong where."""

    scores: dict[int, float] = field(default_factory=dict)
    failed: list[int] = field(default_factory=list)  # positions whose request failed
    errors: list[RerankError] = field(default_factory=list)  # one per failed request
    # A wrong key, no access, an unknown model or dialect: every other batch would fail alike.
    call_error: RerankProviderError | None = None
    waves: RequestWaves | None = None  # the call's batches share it: a hung server costs one timeout
    requests: int = 0
    ignored: int = 0
    tokens: int = 0


class RerankApiClient(ServerConnection[httpx.AsyncClient]):
    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None,
        style: str = "auto",
        timeout_s: float = 30.0,
        max_parallel: int = 4,
        max_documents: int = 0,
    ) -> None:
        if style not in RERANKER_API_STYLES:
            raise ValueError(f"style must be one of {RERANKER_API_STYLES}, got {style!r}")
        if max_documents < 0:
            raise ValueError("max_documents must be >= 0")
        super().__init__(model=model, base_url=base_url, timeout_s=timeout_s, max_parallel=max_parallel,
                         counters=CounterSet(COUNTER_NAMES),
                         make_client=lambda: httpx.AsyncClient(timeout=httpx.Timeout(float(timeout_s))),
                         close_client=lambda client: client.aclose())
        self.style = style
        self.max_documents = max_documents
        self._api_key = api_key or None
        self._dialect: Dialect = "tei" if style == "tei" else "cohere"
        self._learned_cap: int | None = None
        self._smallest_refused: int | None = None

    def __repr__(self) -> str:
        return f"RerankApiClient(model={self.model!r}, url={redact_url(self.url)!r})"

    @property
    def url(self) -> str:
        return f"{self.base_url.rstrip('/')}/rerank"

    @property
    def dialect_in_use(self) -> Dialect:
        return self._dialect

    def batch_size(self) -> int | None:
        """Documents per request: the configured cap and the one learned from refusals, the smaller."""
        caps = [cap for cap in (self.max_documents or None, self._learned_cap) if cap]
        return min(caps, default=None)

    def estimate_requests(self, n_documents: int) -> int:
        size = self.batch_size()
        return -(-n_documents // size) if size else min(n_documents, 1)

    async def score(self, query: str, texts: list[str], on_scored: OnScored | None = None) -> ScoredTexts:
        """Raw scores for `texts` by position, batch by batch, concurrently under the bound.
        `on_scored({position: raw score})` hears each batch's scores as its answer arrives."""
        run = ScoredTexts(waves=self.request_waves())
        size = self.batch_size() or max(len(texts), 1)
        positions = list(range(len(texts)))
        batches = [positions[start:start + size] for start in range(0, len(positions), size)]
        await asyncio.gather(*(self._score_batch(query, texts, batch, run, on_scored) for batch in batches))
        return run

    def stats(self) -> dict[str, Any]:
        return {
            **self.connection_stats(),
            "api_style": self.style,
            "dialect_in_use": self._dialect,
            "max_documents": self.max_documents,
            "max_documents_learned": self._learned_cap,
        }

    # -- internals --------------------------------------------------------------------------

    async def _score_batch(
        self, query: str, texts: list[str], batch: list[int], run: ScoredTexts, on_scored: OnScored | None,
        *, split: bool = False,
    ) -> None:
        try:
            answer = await self._request(query, [texts[position] for position in batch], run)
        except BatchRefused:
            half = (len(batch) + 1) // 2
            self._note_refused(len(batch))
            self.counters.add("batch_splits")
            await asyncio.gather(self._score_batch(query, texts, batch[:half], run, on_scored, split=True),
                                 self._score_batch(query, texts, batch[half:], run, on_scored, split=True))
            return
        except RerankError as error:
            run.failed.extend(batch)
            if error is not run.call_error:  # a batch skipped after a call-level failure adds nothing
                run.errors.append(error)
                if isinstance(error, RerankProviderError) and error.call_level:
                    run.call_error = error
            return
        if split:  # remembered only once a smaller batch worked: a 422 for another reason teaches nothing
            self._learn_cap(len(batch))
        scored = {batch[index]: score for index, score in answer.scores.items()}
        run.scores.update(scored)
        run.ignored += answer.ignored
        run.tokens += answer.tokens
        if on_scored is not None and scored:
            on_scored(scored)

    async def _request(self, query: str, texts: list[str], run: ScoredTexts) -> Answer:
        async with self._limit:
            if run.call_error is not None:  # not sent: it would fail the same way
                raise run.call_error
            async with run.waves.sending() if run.waves is not None else nullcontext():
                response = await self._post_in_dialect(query, texts, run)
        if response.status_code >= 400:
            raise self._status_error(response, len(texts))
        answer = self._read(response, len(texts))
        if answer.shape == "tei" and self.style == "auto":
            self._switch_to("tei", "it answered with a bare list")
        self.counters.add("prompt_tokens", answer.tokens)
        return answer

    async def _post_in_dialect(self, query: str, texts: list[str], run: ScoredTexts) -> httpx.Response:
        """The response to the body of the dialect in use, or of the one a 4xx asked for (auto style)."""
        dialect = self._dialect
        response = await self._post(request_body(dialect, model=self.model, query=query, texts=texts), run)
        wanted = wanted_dialect(response.status_code, response.text)
        if wanted is not None and wanted != dialect:
            if self.style != "auto":
                raise self._error(f"the server wants the {wanted} body ({self._excerpt(response)}); "
                                  f"set RERANKER_API_STYLE={wanted} or auto", "WrongDialect", call_level=True)
            self._switch_to(wanted, "it said a field of that body is missing")
            response = await self._post(request_body(wanted, model=self.model, query=query, texts=texts), run)
        return response

    async def _post(self, body: dict[str, Any], run: ScoredTexts) -> httpx.Response:
        self.counters.add("model_requests")
        run.requests += 1
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        try:
            async with asyncio.timeout(self.timeout_s):  # hard bound, whatever the transport does
                return await self._clients.get().post(self.url, json=body, headers=headers)
        except (TimeoutError, httpx.TimeoutException):
            raise self._error(f"no answer within {self.timeout_s:g}s", "Timeout", timed_out=True) from None
        except httpx.HTTPError as exc:  # connection refused, reset, bad URL...
            raise self._error("could not reach the server", type(exc).__name__) from None

    def _read(self, response: httpx.Response, n_documents: int) -> Answer:
        try:
            answer = read_answer(response.json(), n_documents)
        except (ValueError, RerankParseError) as exc:  # json.JSONDecodeError is a ValueError
            self.counters.add("invalid_outputs")
            self.counters.record_error("InvalidOutput")
            detail = str(exc) if isinstance(exc, RerankParseError) else "the body is not JSON"
            raise RerankParseError(f"unusable answer from the reranker: {detail}") from None
        self.counters.add("ignored_results", answer.ignored)
        return answer

    def _status_error(self, response: httpx.Response, n_documents: int) -> RerankProviderError:
        status = response.status_code
        detail = self._excerpt(response)
        if status in _BATCH_REFUSED_STATUSES and n_documents > 1:
            return BatchRefused(f"{n_documents} documents refused; {detail}", error_class=f"HTTP {status}")
        return self._error(detail, f"HTTP {status}", call_level=status in CALL_LEVEL_STATUSES)

    def _error(self, detail: str, error_class: str, *, call_level: bool = False,
               timed_out: bool = False) -> RerankProviderError:
        self.counters.record_error(error_class, detail)
        return RerankProviderError(f"the reranker request failed ({error_class}: {detail})",
                                   error_class=error_class, call_level=call_level, timed_out=timed_out)

    def _not_sent(self, timed_out: int) -> RerankProviderError:
        return RerankProviderError(
            f"the reranker request was not sent ({NOT_SENT}: all {timed_out} requests in flight timed out "
            f"({self.timeout_s:g}s) and nothing was answered, so the server is taken as hung)",
            error_class=NOT_SENT)

    def _excerpt(self, response: httpx.Response) -> str:
        """The start of an error body, for the log: it often says why (batch cap, unknown model)."""
        text = re.sub(r"\s+", " ", response.text).strip()
        if self._api_key:
            text = text.replace(self._api_key, "***")
        return (text[:_EXCERPT_CHARS] + "...") if len(text) > _EXCERPT_CHARS else (text or "(empty body)")

    def _switch_to(self, dialect: Dialect, why: str) -> None:
        with self._lock:
            if self._dialect == dialect:
                return
            self._dialect = dialect
        self.counters.add("dialect_switches")
        logger.info("Reranker at %s speaks the %s dialect (%s); sending that body from now on",
                    redact_url(self.base_url), dialect, why)

    def _note_refused(self, size: int) -> None:
        with self._lock:
            self._smallest_refused = min(self._smallest_refused or size, size)
            if self._learned_cap is not None and self._learned_cap >= size:  # the server's cap went down
                self._learned_cap = None

    def _learn_cap(self, size: int) -> None:
        """The largest batch that worked after a refusal, and smaller than any refused one."""
        with self._lock:
            too_big = self._smallest_refused is not None and size >= self._smallest_refused
            if too_big or (self._learned_cap is not None and self._learned_cap >= size):
                return
            self._learned_cap = size
        logger.info("Reranker at %s refused a larger batch; sending at most %d documents per request from now on",
                    redact_url(self.base_url), size)
