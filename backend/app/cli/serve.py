"""`flask serve`: the API on a production WSGI server (waitress), embedded defaults unless configured."""

from __future__ import annotations

import logging
import signal
import sys

import click
from flask import current_app
from flask.cli import with_appcontext

from app.cli.start import start_or_exit
from app.graph.runtime import reset_graphiti

logger = logging.getLogger(__name__)


@click.command("serve")
@click.option("--threads", default=16, show_default=True, help="waitress worker threads")
@with_appcontext
def serve_command(threads: int) -> None:
    """Serve the API with waitress on HOST:PORT; stops the embedded FalkorDB on exit (also SIGTERM)."""
    from waitress import serve

    config = current_app.config["APP_CONFIG"]

    def _shutdown(signum, _frame):
        logger.info("Signal %s: shutting down", signum)
        reset_graphiti()
        sys.exit(0)

    signal.signal(signal.SIGTERM, _shutdown)
    signal.signal(signal.SIGINT, _shutdown)
    start_or_exit(config)  # the graph database before accepting requests; a bad one exits with one line
    click.echo(f"Serving on http://{config.host}:{config.port} (Ctrl-C stops it)")
    try:
        # One process, many threads: the graph singleton and its event-loop thread are per process.
        serve(current_app._get_current_object(), host=config.host, port=config.port, threads=threads)
    finally:
        reset_graphiti()


commands = [serve_command]
