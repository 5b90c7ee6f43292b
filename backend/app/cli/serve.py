"""`flask serve`: the API on gunicorn as the image serves it (app/cli/server.py); embedded defaults unless
configured."""

from __future__ import annotations

import dataclasses
import socket

import click
from flask import current_app
from flask.cli import with_appcontext

from app.cli.server import bind_address, serve
from app.config import Config


@click.command("serve")
@click.option("--workers", type=click.IntRange(1, 64), default=None,
              help="worker processes  [default: API_WORKERS]")
@click.option("--threads", type=click.IntRange(1, 1000), default=None,
              help="requests one worker serves at once  [default: API_THREADS]")
@with_appcontext
def serve_command(workers: int | None, threads: int | None) -> None:
    """Serve the API on HOST:PORT. SIGTERM lets requests in flight finish (SHUTDOWN_GRACE_S), Ctrl-C stops
    at once; either way a database the app started (the embedded FalkorDB) is stopped."""
    config: Config = current_app.config["APP_CONFIG"]
    config = dataclasses.replace(config, api_workers=workers or config.api_workers,
                                 api_threads=threads or config.api_threads)
    try:
        config.check_serving()
        _check_port_is_free(config)
    except ValueError as error:
        raise click.ClickException(str(error)) from None
    address = bind_address(config.host, config.port)
    click.echo(f"Serving on http://{address}: {config.api_workers} worker process(es) of {config.api_threads} "
               "threads (Ctrl-C stops it)")
    serve(config)


def _check_port_is_free(config: Config) -> None:
    """Say at once, in one line, that the port is taken (gunicorn would try for 5 s and then say less)."""
    host = config.host.strip("[]")
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gunicorn binds
        try:
            probe.bind((host, config.port))
        except OSError as error:
            raise ValueError(f"cannot listen on {bind_address(config.host, config.port)}: {error.strerror} "
                             "(set PORT to another port)") from None


commands = [serve_command]
