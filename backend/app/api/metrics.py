"""GET /metrics (Prometheus text format, or OpenMetrics when the scraper asks for it) and the latency of
every request, by route.

Like every endpoint but /health, /metrics needs the bearer token when API_TOKEN is set: Prometheus
sends it with `authorization: {credentials_file: ...}` in its scrape config. What is measured and how
several processes add up: app/metrics.py.
"""

from __future__ import annotations

import time

from flask import Blueprint, Flask, Response, g, request

from app.api.validation import app_config
from app.metrics import exposition, observe_request

bp = Blueprint("metrics", __name__)


@bp.get("/metrics")
def metrics():
    body, content_type = exposition(app_config().prometheus_multiproc_dir, request.headers.get("Accept"))
    return Response(body, content_type=content_type)


def install_request_metrics(app: Flask) -> None:
    """Time every request, refused ones included: install before the bearer-token check."""

    @app.before_request
    def _start_timer():
        g.request_metrics_started = time.perf_counter()

    @app.after_request
    def _observe(response: Response) -> Response:
        started = g.get("request_metrics_started")
        if started is not None:
            rule = request.url_rule
            observe_request(request.method, rule.rule if rule is not None else None, response.status_code,
                            time.perf_counter() - started)
        return response
