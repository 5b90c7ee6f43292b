"""Every request's id and its access line.

The id (app/request_id.py) is the client's X-Request-ID when that is a short token of safe characters,
else a new uuid4 hex; it is bound before anything else looks at the request (the bearer-token check
included), returned in the X-Request-ID header of every answer, put into every error body
(app/api/errors.py) and into every log line written while the request is handled.

The access line: one INFO line per request on the `app.access` logger (ACCESS_LOG=off turns it off),
in logfmt: method, path (without its query string, which may carry what a client should not have put
there), status, duration_ms, request_id, remote_addr. Headers are never logged, so neither is a token.
"""

from __future__ import annotations

import logging
import time
from urllib.parse import quote

from flask import Flask, Response, g, request

from app.config import Config
from app.request_id import HEADER, accepted_request_id, current_request_id, reset_request_id, set_request_id

access_logger = logging.getLogger("app.access")

MAX_LOGGED_PATH = 512
# Percent-encode everything but the characters a path may carry literally: a space, a quote or a
# newline decoded from the URL cannot split or forge a log line.
_PATH_SAFE = "/-._~!$&'()*+,;=:@"


def install_request_log(app: Flask, config: Config) -> None:
    """Install before any other hook: a request refused by another before_request hook still has its id."""

    @app.before_request
    def _bind_request_id():
        g.request_log_started = time.perf_counter()
        g.request_id_token = set_request_id(accepted_request_id(request.headers.get(HEADER)))

    @app.after_request
    def _answer_with_request_id(response: Response) -> Response:
        request_id = current_request_id()
        if request_id is not None:
            response.headers[HEADER] = request_id
        if config.access_log:
            started = g.get("request_log_started")
            duration_ms = (time.perf_counter() - started) * 1000 if started is not None else 0.0
            access_logger.info("method=%s path=%s status=%d duration_ms=%.1f request_id=%s remote_addr=%s",
                               logged_method(request.method), logged_path(request.path), response.status_code,
                               duration_ms, request_id or "-", request.remote_addr or "-")
        return response

    @app.teardown_request
    def _unbind_request_id(_error: BaseException | None) -> None:
        token = g.pop("request_id_token", None)
        if token is not None:
            reset_request_id(token)


def logged_path(path: str) -> str:
    """The request path as it is safe to log: percent-encoded where unsafe, at most MAX_LOGGED_PATH chars."""
    safe = quote(path, safe=_PATH_SAFE)
    return safe if len(safe) <= MAX_LOGGED_PATH else safe[:MAX_LOGGED_PATH] + "..."


def logged_method(method: str) -> str:
    return quote(method[:16], safe="")
