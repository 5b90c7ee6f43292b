"""Request parsing helpers: every bad input becomes an ApiError with a message that says what is wrong."""

from __future__ import annotations

import re
from typing import Any

from flask import current_app, request

from app.api.errors import ApiError
from app.config import Config
from app.graph.store import UnknownGraphError, validate_graph_id
from app.graph.runtime import GraphitiAdapter
from app.graph.text_rules import first_invalid_text


MAX_QUERY_CHARS = 2000  # a search query or a rerank query, graph and /api/rerank alike


def app_config() -> Config:
    return current_app.config["APP_CONFIG"]


def adapter() -> GraphitiAdapter:
    return GraphitiAdapter(app_config())


def known_graph_id(graph_id: str) -> str:
    """A path's graph id, validated and known to exist (else 400 or 404)."""
    graph_id = graph_id_param(graph_id)
    if not adapter().graph.exists(graph_id):
        raise UnknownGraphError(graph_id)
    return graph_id


MAX_JSON_DEPTH = 32
_JSON_STRUCTURE = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def json_depth(raw: bytes) -> int:
    """Deepest bracket nesting outside strings, found without parsing.

    Checked before json.loads: a RecursionError inside the parser leaves CPython 3.11's
    recursion bookkeeping damaged for the rest of the process.
    """
    depth = deepest = 0
    for match in _JSON_STRUCTURE.finditer(raw):
        token = match.group()
        if token in (b"[", b"{"):
            depth += 1
            deepest = max(deepest, depth)
        elif token in (b"]", b"}"):
            depth -= 1
    return deepest


def json_object() -> dict:
    """The request body as a JSON object, or a 400/415 that says why not."""
    if not request.is_json:
        raise ApiError(415, "unsupported_media_type", "send a JSON body with Content-Type: application/json")
    if json_depth(request.get_data(cache=True)) > MAX_JSON_DEPTH:
        raise ApiError(400, "invalid_json", f"JSON body is nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        body = request.get_json(force=False, silent=False)
    except Exception:
        raise ApiError(400, "invalid_json", "request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_json", "JSON body must be an object")
    refuse_invalid_text(body)
    return body


def refuse_invalid_text(value: Any, path: str = "", prefix: str = "") -> None:
    """A 400 naming the first string (key or value) that is not valid Unicode, anywhere in `value`."""
    problem = first_invalid_text(value, path)
    if problem:
        raise ApiError(400, "invalid_text", prefix + problem)


def refuse_unknown_fields(source, allowed, *, code: str = "unknown_field", kind: str = "field") -> None:
    """A 400 naming every key of `source` outside `allowed` (a misspelt option would otherwise be ignored
    in silence), and listing the allowed ones."""
    unknown = sorted(set(source) - set(allowed))
    if unknown:
        raise ApiError(400, code, f"unknown {kind}(s) {unknown}; allowed: {list(allowed)}", fields=unknown)


def text_field(body: dict, key: str, *, max_chars: int, required: bool = True) -> str | None:
    value = body.get(key)
    if value is None:
        if required:
            raise ApiError(400, "missing_field", f"'{key}' is required")
        return None
    if not isinstance(value, str):
        raise ApiError(400, "invalid_type", f"'{key}' must be a string")
    if not value.strip():
        raise ApiError(400, "empty_field", f"'{key}' must not be empty or whitespace")
    if len(value) > max_chars:
        raise ApiError(413, "field_too_large", f"'{key}' is longer than {max_chars} characters")
    if "\x00" in value:  # the graph driver strips NUL, which turns a query into a syntax error
        raise ApiError(400, "invalid_value", f"'{key}' must not contain NUL characters")
    return value


_ASCII_INTEGER = re.compile(r"-?[0-9]+")
_MAX_DIGITS = 18  # more digits are beyond every range checked here (and int() of thousands is slow)


def int_field(source: dict, key: str, *, default: int, minimum: int, maximum: int) -> int:
    value: Any = source.get(key, default)
    out_of_range = ApiError(422, "out_of_range", f"'{key}' must be between {minimum} and {maximum}")
    if isinstance(value, str):  # query-string parameters arrive as text
        # Only ASCII digits: int() also takes fullwidth and other Unicode digits, '_', '+' and spaces.
        if not _ASCII_INTEGER.fullmatch(value):
            raise ApiError(400, "invalid_type", f"'{key}' must be an integer written in ASCII digits")
        if len(value.lstrip("-")) > _MAX_DIGITS:
            raise out_of_range
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(400, "invalid_type", f"'{key}' must be an integer")
    if not minimum <= value <= maximum:
        raise out_of_range
    return value


def choice_field(body: dict, key: str, *, default: str, allowed: tuple[str, ...]) -> str:
    value = body.get(key, default)
    if not isinstance(value, str) or value.lower() not in allowed:
        raise ApiError(422, "invalid_value", f"'{key}' must be one of {list(allowed)}")
    return value.lower()


def graph_id_param(graph_id: str) -> str:
    try:
        return validate_graph_id(graph_id)
    except ValueError as error:
        raise ApiError(400, "invalid_graph_id", str(error)) from None
