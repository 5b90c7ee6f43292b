"""The request id: one id per HTTP request, carried in a context variable.

The API (app/api/request_log.py) takes it from the client's X-Request-ID header when that is a short
token of safe characters, else makes one, and returns it in the response header and in every error
body. `RequestIdFilter` puts it into every log record (`%(request_id)s`, "-" outside a request), so
each line written while a request is handled names it: also the lines written on the graph event loop
(`run_on_loop` submits with `asyncio.run_coroutine_threadsafe`, whose task runs in a copy of the
caller's context) and in the background work the request started (a new thread starts with an empty
context: `with_request_id` carries the id into it, as a job queue's worker does with `bound_request_id`).

A leaf module beside app.config: every layer may use it, it imports no other app module.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from functools import wraps
from typing import ParamSpec, TypeVar

HEADER = "X-Request-ID"
MAX_LENGTH = 128
NO_REQUEST = "-"  # what a log line written outside any request shows
# A client's id is kept only when it cannot break a log line or a header: no spaces, quotes, control
# characters or separators; uuids, hex, ULIDs and base64 tokens all pass.
_SAFE_ID = re.compile(rf"[A-Za-z0-9._:+/=-]{{1,{MAX_LENGTH}}}")

_current: ContextVar[str | None] = ContextVar("request_id", default=None)

P = ParamSpec("P")
T = TypeVar("T")


def new_request_id() -> str:
    return uuid.uuid4().hex


def accepted_request_id(supplied: str | None) -> str:
    """The client's id when it is safe to log and echo, else a new one."""
    if supplied and _SAFE_ID.fullmatch(supplied):
        return supplied
    return new_request_id()


def current_request_id() -> str | None:
    """The id of the request being handled in this context, None outside a request."""
    return _current.get()


def set_request_id(request_id: str | None) -> Token:
    """Bind `request_id` in this context; give the token to `reset_request_id` when the request ends."""
    return _current.set(request_id)


def reset_request_id(token: Token) -> None:
    _current.reset(token)


@contextmanager
def bound_request_id(request_id: str | None) -> Iterator[None]:
    """Run a block as part of request `request_id` (a job worker picking up a job, tests)."""
    token = _current.set(request_id)
    try:
        yield
    finally:
        _current.reset(token)


def with_request_id(function: Callable[P, T]) -> Callable[P, T]:
    """`function`, running under the request id current now: for a thread or a job started by a
    request (a new thread starts with no context of its own)."""
    request_id = _current.get()

    @wraps(function)
    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        with bound_request_id(request_id):
            return function(*args, **kwargs)

    return run


class RequestIdFilter(logging.Filter):
    """Gives every record a `request_id` attribute: the current request's id, or "-"."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = _current.get() or NO_REQUEST
        return True
