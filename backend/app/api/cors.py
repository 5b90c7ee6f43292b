"""CORS: pages from the web origins in CORS_ORIGINS may call the API from a browser; none by default.

Before a request that carries a bearer token or JSON, a browser asks first (a preflight: OPTIONS with
Access-Control-Request-Method, never with the token); the answer names the origin, the methods the path
takes and the headers the page may send. Every answer to an allowed origin names it, errors included,
so a page can read a 401 or a 503's Retry-After. Other origins get no CORS headers, and the browser
keeps the answer from their pages. The bearer token (app/api/auth.py) still guards every request that
reads or writes; a preflight does neither, so it passes without one.
"""

from __future__ import annotations

from flask import Flask, Response, request

from app.config import Config

PREFLIGHT_MAX_AGE_S = 600  # how long a browser may reuse a preflight's answer
EXPOSED_HEADERS = "Retry-After"  # the 503s say when to try again


def is_preflight() -> bool:
    return request.method == "OPTIONS" and "Access-Control-Request-Method" in request.headers


def install_cors(app: Flask, config: Config) -> None:
    if not config.cors_origins:
        return
    allowed = frozenset(config.cors_origins)

    @app.after_request
    def _cors_headers(response: Response) -> Response:
        response.vary.add("Origin")  # a cache must not give one origin's answer to another
        origin = request.headers.get("Origin", "")
        if origin.lower() not in allowed:
            return response
        response.headers["Access-Control-Allow-Origin"] = origin
        if is_preflight():
            # Flask's own OPTIONS answer lists the path's methods in Allow; the headers asked for are
            # allowed as asked (the token decides what a request may do, not its headers).
            response.headers["Access-Control-Allow-Methods"] = ", ".join(sorted(response.allow))
            requested = request.headers.get("Access-Control-Request-Headers")
            if requested:
                response.headers["Access-Control-Allow-Headers"] = requested
            response.headers["Access-Control-Max-Age"] = str(PREFLIGHT_MAX_AGE_S)
        else:
            response.headers["Access-Control-Expose-Headers"] = EXPOSED_HEADERS
        return response
