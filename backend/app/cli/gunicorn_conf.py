"""gunicorn's configuration, read from the settings: `gunicorn --config python:app.cli.gunicorn_conf app.wsgi:app`
(the image's command). What it sets and why: app/cli/server.py, which `flask serve` runs as well."""

from __future__ import annotations

from app.config import Config
from app.cli.server import gunicorn_settings

try:
    globals().update(gunicorn_settings(Config.from_env()))
except ValueError as error:  # one line naming the setting, not gunicorn's traceback of its config file
    raise SystemExit(f"Error: {error}") from None
