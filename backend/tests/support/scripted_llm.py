"""A scripted OpenAI-compatible chat server for tests: real HTTP on 127.0.0.1 (port 0), in a thread.

    from tests.support.scripted_llm import ScriptedLLMServer, judge, server_error

    with ScriptedLLMServer(judge(lambda query, passage: 0.9 if "Paris" in passage else 0.1)) as llm:
        reranker = OllamaReranker(judge=LLMJudge(model="m", base_url=llm.base_url, api_key="k"))
        ...
        assert llm.count == 3 and llm.peak_in_flight <= 4

Serves `GET /v1/models` and `POST /v1/chat/completions` (non-streaming; `stream: true` gets a 400)
in OpenAI's wire format, with `usage` and, when the request asks for them, `choices[0].logprobs`.
The `scripted_llm` pytest fixture (scripted_llm_fixtures.py) yields a started server.

A *responder* maps each `ChatRequest` to a reply; set it in the constructor or swap
`server.responder` at any time. Builders (all re-exported here from scripted_llm_replies):
- replies: completion, error, model_not_found, server_error, rate_limited, delay, hang,
  truncated_json, empty_choices, no_logprobs, wrong_shape, garbage, raw_json
- responders: judge(score_fn), chat(fn), always(value), when(predicate, value, otherwise),
  keyword_overlap_judge (the default)

"The passage containing X fails, the others succeed":
    judge(lambda query, passage: server_error() if "X" in passage else 0.8)
"The first two requests fail, then the server recovers":
    when(lambda request: request.index < 2, server_error(), otherwise=judge(score_fn))
"""

from __future__ import annotations

import json
import select
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from collections.abc import Callable
from typing import Any, Iterable

from tests.support import scripted_llm_replies
from tests.support.scripted_llm_replies import *  # noqa: F403 - this module is the public entry point
from tests.support.scripted_llm_replies import (
    ChatRequest,
    Reply,
    Rendered,
    Responder,
    error,
    keyword_overlap_judge,
    model_not_found,
    resolve,
)

__all__ = [*scripted_llm_replies.__all__, "ScriptedLLMServer", "unused_base_url"]

_POLL_S = 0.02  # how often a delayed or hanging request checks for a gone client or a stop
_NO_REQUEST = ChatRequest(index=-1, body={}, headers={})  # for errors sent before a request is admitted


# Ports this process has handed out. The app keeps one judge and one circuit breaker per base URL for the
# whole process, so a port the OS gives out again would hand a later test an earlier test's counters and
# breaker state; every server and unused URL here gets a port no earlier one had.
_PORTS_HANDED_OUT: set[int] = set()
_PORTS_LOCK = threading.Lock()


def _bound_on_a_new_port(bind: Callable[[], Any], port_of: Callable[[Any], int], close: Callable[[Any], None]) -> Any:
    """bind() until the OS gives a port not handed out before; the rejected binds are closed after."""
    rejected = []
    try:
        with _PORTS_LOCK:
            while True:
                bound = bind()
                if port_of(bound) not in _PORTS_HANDED_OUT:
                    _PORTS_HANDED_OUT.add(port_of(bound))
                    return bound
                rejected.append(bound)  # held open, so the next bind cannot get the same port
    finally:
        for bound in rejected:
            close(bound)


def unused_base_url() -> str:
    """A base URL on a local port that nothing listens on (connection refused)."""
    def bind() -> socket.socket:
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        return probe

    probe = _bound_on_a_new_port(bind, lambda sock: sock.getsockname()[1], socket.socket.close)
    port = probe.getsockname()[1]
    probe.close()
    return f"http://127.0.0.1:{port}/v1"


class ScriptedLLMServer:
    """An OpenAI-compatible server whose answers come from `responder` (see module docstring).

    `models`: if given, requests naming another model get a 404 "model not found".
    Single use: start (or `with`), then stop. A subclass serving another API (scripted_rerank_api.py,
    scripted_ollama.py) overrides `route` (or `serves`, for several POST paths), `answer_get`,
    `base_url`, `_admit` and `_reply_for` and keeps the rest.
    """

    route = "/v1/chat/completions"  # the one POST path served

    def __init__(self, responder: Responder | None = None, *, models: Iterable[str] | None = None) -> None:
        self.responder: Responder = responder or keyword_overlap_judge
        self.models = set(models) if models is not None else None
        self.responder_errors: list[BaseException] = []  # exceptions raised by responders (sent as 500)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._requests: list[dict[str, Any]] = []
        self._headers: list[dict[str, str]] = []
        self._in_flight = 0
        self._peak_in_flight = 0
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> "ScriptedLLMServer":
        if self._httpd is not None:
            raise RuntimeError("ScriptedLLMServer is single use")
        self._httpd = _bound_on_a_new_port(lambda: _HTTPServer(("127.0.0.1", 0), _Handler, self),
                                           lambda httpd: httpd.server_address[1], _HTTPServer.server_close)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="scripted-llm", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving: hanging and delayed requests end unanswered, open connections are closed."""
        if self._httpd is None or self._stopping.is_set():
            return
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._httpd.close_open_connections()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "ScriptedLLMServer":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- what tests look at ---------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("the server is not started")
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def requests(self) -> list[dict[str, Any]]:
        """JSON bodies of the chat requests received (a copy), in arrival order."""
        with self._lock:
            return list(self._requests)

    @property
    def request_headers(self) -> list[dict[str, str]]:
        """Headers of the chat requests received (names lower-cased), in arrival order."""
        with self._lock:
            return list(self._headers)

    @property
    def count(self) -> int:
        with self._lock:
            return len(self._requests)

    @property
    def in_flight(self) -> int:
        with self._lock:
            return self._in_flight

    @property
    def peak_in_flight(self) -> int:
        """Most chat requests being processed at once (received, not yet answered)."""
        with self._lock:
            return self._peak_in_flight

    def wait_quiet(self, quiet_s: float = 1.0, timeout_s: float = 15.0) -> None:
        """Wait until no request is in flight and none arrived for `quiet_s`: requests an earlier test
        cancelled can still reach a shared server late on a busy machine, and must not be counted as
        the next test's."""
        deadline = time.monotonic() + timeout_s
        seen, since = self.count, time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.05)
            if self.count != seen or self.in_flight:
                seen, since = self.count, time.monotonic()
            elif time.monotonic() - since >= quiet_s:
                return

    def reset(self) -> None:
        """Forget received requests and the peak (request indexes restart at 0); keeps the responder."""
        with self._lock:
            self._requests.clear()
            self._headers.clear()
            self._peak_in_flight = self._in_flight
            self.responder_errors.clear()

    # -- used by the handler --------------------------------------------------------------------

    def serves(self, path: str) -> bool:
        """Whether POST `path` (no trailing slash) is answered; other paths get a 404."""
        return path == self.route

    def answer_get(self, path: str) -> Rendered | None:
        """The answer to GET `path`, or None for a 404."""
        if path != "/v1/models":
            return None
        names = sorted(self.models or {"scripted-model"})
        data = [{"id": name, "object": "model", "created": 0, "owned_by": "scripted"} for name in names]
        return 200, {}, json.dumps({"object": "list", "data": data}).encode()

    def _admit(self, body: dict[str, Any], headers: dict[str, str], path: str = "") -> ChatRequest:
        with self._lock:
            index = len(self._requests)
            self._requests.append(body)
            self._headers.append(headers)
            self._in_flight += 1
            self._peak_in_flight = max(self._peak_in_flight, self._in_flight)
        return ChatRequest(index=index, body=body, headers=headers, path=path or self.route)

    def _leave(self) -> None:
        # Called BEFORE the response is written: once a client has its answer it may send its next
        # request, and that one must not overlap this one in the count (no false peaks).
        with self._lock:
            self._in_flight -= 1

    def _reply_for(self, request: ChatRequest) -> Reply:
        if request.body.get("stream"):
            return error(400, "the scripted server does not stream; send stream=false")
        if self.models is not None and request.model not in self.models:
            return model_not_found()
        try:
            return resolve(self.responder(request), request)
        except Exception as exc:  # a broken test script shows up as a 500 and in responder_errors
            self.responder_errors.append(exc)
            return error(500, f"scripted responder raised {type(exc).__name__}: {exc}")


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # keep-alive handler threads must not block stop()

    def __init__(self, address: tuple[str, int], handler: type, scripted: ScriptedLLMServer) -> None:
        self.scripted = scripted
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up mid-answer (a timed-out judge request, a test's stop()) is part of the script.
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)

    def close_open_connections(self) -> None:
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like real servers
    timeout = 30  # idle keep-alive connections end eventually
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def do_GET(self) -> None:
        answer = self.server.scripted.answer_get(self.path.rstrip("/"))
        if answer is None:
            self._send_error(404, f"no route {self.path}")
            return
        self._send(*answer)

    def do_POST(self) -> None:
        scripted = self.server.scripted
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path = self.path.rstrip("/")
        if not scripted.serves(path):
            self._send_error(404, f"no route {self.path}")
            return
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise ValueError("not an object")
        except ValueError:
            self._send_error(400, "request body is not a JSON object")
            return
        request = scripted._admit(body, {name.lower(): value for name, value in self.headers.items()}, path)
        try:
            reply = scripted._reply_for(request)
            if reply.delay_s > 0 and not self._wait(reply.delay_s):
                return
            if reply.hang or reply.render is None:
                self._wait(None)
                return
            response = reply.render(request)
        finally:
            scripted._leave()
        self._send(*response)

    def _wait(self, seconds: float | None) -> bool:
        """Sleep (forever if None); False, and the connection is dropped, when the client has
        disconnected or the server is stopping."""
        deadline = None if seconds is None else time.monotonic() + seconds
        while True:
            if self._client_gone() or self.server.scripted._stopping.is_set():
                self.close_connection = True
                return False
            step = _POLL_S if deadline is None else min(_POLL_S, deadline - time.monotonic())
            if step <= 0:
                return True
            self.server.scripted._stopping.wait(step)

    def _client_gone(self) -> bool:
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _send_error(self, status: int, message: str) -> None:
        self._send(*error(status, message).render(_NO_REQUEST))

    def _send(self, status: int, headers: dict[str, str], payload: bytes) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
        except OSError:  # the client went away meanwhile
            self.close_connection = True
