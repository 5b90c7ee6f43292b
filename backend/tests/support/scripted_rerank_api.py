"""A scripted rerank server for tests: real HTTP on 127.0.0.1 (port 0), in a thread, speaking one
dialect of `POST {base}/rerank`, as dedicated reranker servers do.

    from tests.support.scripted_rerank_api import ScriptedRerankApi, results

    with ScriptedRerankApi("tei", scorer=lambda query, text: 0.9 if "Paris" in text else 0.1) as server:
        client = RerankApiClient(base_url=server.base_url, model="m", api_key=None)
        ...
        assert server.count == 1 and server.requests[0]["texts"] == [...]

Dialects:
- "cohere" (llama.cpp's server, vLLM, Infinity, Jina, Cohere v2): `POST /v1/rerank`
  {model, query, documents, top_n} -> {"results": [{"index", "relevance_score"}], "model", "usage"};
  a body without `documents` gets a FastAPI-style 422 naming that field.
- "tei" (text-embeddings-inference): `POST /rerank` {query, texts, truncate?} -> [{"index", "score"}];
  a body without `texts` gets TEI's own 422 ("missing field `texts`").

By default every document is scored by `scorer(query, text)` (keyword overlap), best first; "cohere"
honours `top_n`; `max_results` makes a server answer at most that many; `max_documents` refuses a
larger batch with `too_many_status` (413 with TEI's body, or 422); `api_key` makes any other Bearer
token a 401. `responder(request)` overrides an answer: a Reply from scripted_llm (error, hang, delay,
rate_limited, server_error...), `results([(index, score), ...])` (entries in the request's dialect),
`not_json()`, any list or dict (sent as the JSON body), or None for the default answer (which
refuses the other dialect's body; a responder sees every request, so it can script a lenient server).
It reuses ScriptedLLMServer's machinery: request log, in-flight peak, hangs and delays that end when
the client gives up, `stop()` that closes open connections.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Callable, Literal

from tests.support.scripted_llm import ScriptedLLMServer
from tests.support.scripted_llm_replies import ChatRequest, Reply, error, keyword_overlap, raw_json

__all__ = ["RerankRequest", "ScriptedRerankApi", "results", "not_json", "too_many_documents"]

ServerDialect = Literal["cohere", "tei"]
_PREFIXES = {"cohere": "/v1", "tei": ""}


@dataclass
class RerankRequest:
    """One received rerank request."""

    index: int  # arrival order, 0-based
    body: dict[str, Any]
    headers: dict[str, str]  # names lower-cased

    @property
    def dialect(self) -> ServerDialect | None:
        if isinstance(self.body.get("texts"), list):
            return "tei"
        return "cohere" if isinstance(self.body.get("documents"), list) else None

    @property
    def query(self) -> str:
        return str(self.body.get("query", ""))

    @property
    def documents(self) -> list[str]:
        """The texts to score, whichever field carried them."""
        return [str(text) for text in (self.body.get("texts") or self.body.get("documents") or [])]

    @property
    def top_n(self) -> int | None:
        value = self.body.get("top_n")
        return value if isinstance(value, int) else None


def results(entries: list[tuple[Any, Any]] | list[dict[str, Any]]) -> Reply:
    """An answer made of these entries, in the request's dialect: (index, score) pairs become
    {"index", "relevance_score"} (cohere) or {"index", "score"} (tei); dicts are sent as they are."""

    def render(request: RerankRequest):
        name = "score" if request.dialect == "tei" else "relevance_score"
        items = [entry if isinstance(entry, dict) else {"index": entry[0], name: entry[1]} for entry in entries]
        body: Any = items if request.dialect == "tei" else {"results": items, "model": request.body.get("model")}
        return 200, {}, json.dumps(body).encode()

    return Reply(render)


def not_json(text: str = "<html><body>502 Bad Gateway</body></html>") -> Reply:
    """A 200 whose body is not JSON at all (a proxy's error page)."""
    return Reply(lambda request: (200, {}, text.encode()))


def too_many_documents(count: int, cap: int, status: int = 413) -> Reply:
    if status == 413:  # TEI's validation error
        body = {"error": f"batch size {count} > maximum allowed batch size {cap}", "error_type": "Validation"}
    else:  # a FastAPI-style validation error
        body = {"detail": [{"type": "too_long", "loc": ["body", "documents"],
                            "msg": f"List should have at most {cap} items after validation, not {count}"}]}
    return raw_json(body, status)


class ScriptedRerankApi(ScriptedLLMServer):
    """A rerank server in one dialect whose answers come from `scorer` or `responder` (module docstring)."""

    def __init__(
        self,
        dialect: ServerDialect = "cohere",
        *,
        scorer: Callable[[str, str], float] = keyword_overlap,
        responder: Callable[[RerankRequest], Any] | None = None,
        max_documents: int | None = None,
        too_many_status: int = 413,
        max_results: int | None = None,
        api_key: str | None = None,
    ) -> None:
        super().__init__()
        self.dialect = dialect
        self.scorer = scorer
        self.rerank_responder = responder
        self.max_documents = max_documents
        self.too_many_status = too_many_status
        self.max_results = max_results
        self.api_key = api_key

    @property
    def route(self) -> str:  # type: ignore[override]
        return f"{_PREFIXES[self.dialect]}/rerank"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}{_PREFIXES[self.dialect]}"

    @property
    def batch_sizes(self) -> list[int]:
        """Documents per received request, in arrival order."""
        return [len(RerankRequest(0, body, {}).documents) for body in self.requests]

    def _admit(self, body: dict[str, Any], headers: dict[str, str],  # type: ignore[override]
               path: str = "") -> RerankRequest:
        admitted: ChatRequest = super()._admit(body, headers, path)
        return RerankRequest(admitted.index, admitted.body, admitted.headers)

    def _reply_for(self, request: RerankRequest) -> Reply:  # type: ignore[override]
        if self.api_key is not None and request.headers.get("authorization") != f"Bearer {self.api_key}":
            return error(401, "invalid or missing API key")
        try:
            value = self.rerank_responder(request) if self.rerank_responder else None
            return self._resolve(value, request)
        except Exception as exc:  # a broken test script shows up as a 500 and in responder_errors
            self.responder_errors.append(exc)
            return error(500, f"scripted responder raised {type(exc).__name__}: {exc}")

    def _resolve(self, value: Any, request: RerankRequest) -> Reply:
        if value is None:
            return self._default_answer(request)
        if isinstance(value, Reply):
            if value.render is not None or value.hang:
                return value
            # delay(seconds, then): `then` resolved like any value (None: the default answer)
            inner = self._resolve(value.then, request)
            return replace(inner, delay_s=inner.delay_s + value.delay_s)
        if isinstance(value, (list, dict)):
            return raw_json(value)
        return error(500, f"scripted responder returned an unusable value: {value!r}")

    def _default_answer(self, request: RerankRequest) -> Reply:
        if request.dialect != self.dialect:
            return self._wrong_dialect()
        documents = request.documents
        if self.max_documents is not None and len(documents) > self.max_documents:
            return too_many_documents(len(documents), self.max_documents, self.too_many_status)
        scored = sorted(((index, float(self.scorer(request.query, text))) for index, text in enumerate(documents)),
                        key=lambda item: -item[1])
        limit = min(request.top_n or len(scored), self.max_results or len(scored))
        return results(scored[:limit])

    def _wrong_dialect(self) -> Reply:
        if self.dialect == "tei":
            text = "Failed to deserialize the JSON body into the target type: missing field `texts` at line 1 column 80"
            return Reply(lambda request: (422, {}, text.encode()))
        body = {"detail": [{"type": "missing", "loc": ["body", "documents"], "msg": "Field required"}]}
        return raw_json(body, 422)
