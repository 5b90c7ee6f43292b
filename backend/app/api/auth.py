"""Optional bearer token: when API_TOKEN is set, every endpoint except the health checks requires it (a
CORS preflight, which browsers send without it and which reads nothing, passes: app/api/cors.py)."""

from __future__ import annotations

import hmac

from flask import Flask, request

from app.api.cors import is_preflight
from app.api.errors import error_response
from app.config import Config


def install_auth(app: Flask, config: Config) -> None:
    if not config.api_token:
        return
    expected = f"Bearer {config.api_token}".encode()

    @app.before_request
    def _require_token():
        if request.path in ("/health", "/health/live", "/health/ready") or is_preflight():
            return None
        supplied = request.headers.get("Authorization", "").encode()
        if not hmac.compare_digest(supplied, expected):
            return error_response(401, "unauthorized", "missing or wrong bearer token")
        return None
