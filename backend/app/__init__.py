"""MiroFish graph backend: Flask app factory."""

from __future__ import annotations

import logging
import os

# Graphiti sends usage telemetry to a hosted service by default; this backend runs offline.
os.environ.setdefault("GRAPHITI_TELEMETRY_ENABLED", "false")

from flask import Flask  # noqa: E402

from app.config import Config  # noqa: E402


def configure_logging(level: str | None = None) -> None:
    """Root logging for the app's entry points (serve, CLI, WSGI); LOG_LEVEL through Config."""
    logging.basicConfig(
        level=level or Config.from_env().log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # Index-exists notices on every graph clone, and one line per HTTP call, drown the app's own log.
    logging.getLogger("graphiti_core.driver.falkordb_driver").setLevel(logging.WARNING)
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

    from app.api import errors, graph, health, tasks
    from app.api.auth import install_auth

    install_auth(app, config)
    errors.register(app)
    app.register_blueprint(health.bp)
    app.register_blueprint(graph.bp)
    app.register_blueprint(tasks.bp)
    _register_optional_blueprints(app)

    from app.cli import register_cli

    register_cli(app)
    return app


def _register_optional_blueprints(app: Flask) -> None:
    """Areas that live in their own modules (report, rerank) register themselves when present."""
    for module in import_present("app.api.report", "app.api.rerank"):
        app.register_blueprint(module.bp)


def import_present(*module_names: str) -> list:
    """Import the named modules that exist; a missing dependency inside one still raises."""
    import importlib

    modules = []
    for module_name in module_names:
        try:
            modules.append(importlib.import_module(module_name))
        except ModuleNotFoundError as error:
            if error.name != module_name:
                raise
    return modules
