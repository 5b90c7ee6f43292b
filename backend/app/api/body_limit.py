"""MAX_REQUEST_BYTES for bodies sent without a Content-Length (chunked).

A declared Content-Length over the limit is refused by Werkzeug before anything is read. A chunked body has
none: gunicorn hands it over as a stream, and Werkzeug stops reading it at the limit without a word, so a
body over the limit would reach the API cut short (a JSON body as invalid JSON, an uploaded file without its
end). This reads such a body once, before the endpoint does, and refuses it with the same 413 when the
client sent more than the limit; the endpoint then reads it from memory.
"""

from __future__ import annotations

from flask import Flask, current_app, request
from werkzeug.exceptions import RequestEntityTooLarge


def install_body_limit(app: Flask) -> None:
    @app.before_request
    def _refuse_chunked_bodies_over_the_limit():
        if request.content_length is not None or "chunked" not in request.headers.get("Transfer-Encoding", "").lower():
            return None
        limit = current_app.config["MAX_CONTENT_LENGTH"]
        body = request.get_data(cache=True)  # at most `limit` bytes, kept for the endpoint
        if limit is not None and len(body) >= limit and request.environ["wsgi.input"].read(1):
            raise RequestEntityTooLarge()
        return None
