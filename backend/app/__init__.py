"""MiroFish graph backend: Flask app factory."""

from __future__ import annotations

import logging
import os

# Graphiti sends usage telemetry to a hosted service by default; this backend runs offline.
os.environ.setdefault("GRAPHITI_TELEMETRY_ENABLED", "false")

from flask import Flask  # noqa: E402

from app.config import Config  # noqa: E402
from app.request_id import RequestIdFilter  # noqa: E402

# Every line names the request it was written for ("-" outside a request; app/request_id.py).
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s"


def configure_logging(level: str | None = None) -> None:
    """Root logging for the app's entry points (serve, CLI, WSGI); LOG_LEVEL through Config."""
    logging.basicConfig(level=level or Config.from_env().log_level, format=LOG_FORMAT)
    for handler in logging.getLogger().handlers:  # on the handler: records of every logger pass it
        if not any(isinstance(known, RequestIdFilter) for known in handler.filters):
            handler.addFilter(RequestIdFilter())
    # Index-exists notices on every graph clone, and one line per HTTP call, drown the app's own log.
    logging.getLogger("graphiti_core.driver.falkordb_driver").setLevel(logging.WARNING)
    # Neo4j reports every index that already exists and every property no graph has yet (a
    # fresh database has no `reference_time`) as a notification on each query: not faults.
    logging.getLogger("neo4j.notifications").setLevel(logging.ERROR)
    for name in ("httpx", "httpx2"):
        logging.getLogger(name).setLevel(logging.WARNING)


def create_app(config: Config | None = None) -> Flask:
    """Build the app. No database or model server is contacted here: the graph runtime is built
    on the first request that needs it (or by `warm_up`)."""
    config = config or Config.from_env()
    if not logging.getLogger().handlers:  # `flask <command>` and WSGI servers start with none
        configure_logging(config.log_level)
    app = Flask(__name__, static_folder=None)
    app.config["APP_CONFIG"] = config
    app.config["MAX_CONTENT_LENGTH"] = config.max_request_bytes
    app.json.sort_keys = False
    # "//" in a path would otherwise get an HTML 308 redirect; bad paths get the JSON 404 instead.
    app.url_map.merge_slashes = False

    # Imported here, not at the top: `import app.config` (the local-model kit, stack_env) must not
    # pull in Flask blueprints, Graphiti and the database drivers.
    from app.api import errors, graph, health, metrics, report, rerank, tasks
    from app.api.auth import install_auth
    from app.api.request_log import install_request_log
    from app.api.body_limit import install_body_limit
    from app.api.cors import install_cors
    from app.cli import register_cli
    from app.metrics import check_mode

    check_mode(config.prometheus_multiproc_dir)
    # The request id and the timer first: a request the token check refuses is logged and timed too.
    install_request_log(app, config)
    metrics.install_request_metrics(app)
    install_auth(app, config)
    install_body_limit(app)
    install_cors(app, config)
    errors.register(app)
    for blueprint in (health.bp, graph.bp, tasks.bp, report.bp, rerank.bp, metrics.bp):
        app.register_blueprint(blueprint)
    register_cli(app)
    return app
