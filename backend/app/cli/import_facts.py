"""`flask --app app import-facts FILE --graph ID`: a large JSONL file of facts into a running API.

    make serve                                        # in one terminal
    cd backend && ../.venv/bin/python -m flask --app app import-facts facts.jsonl --graph city --create

One fact per line, as `POST /api/graph/<id>/facts` takes them. The file is checked whole first; then
it goes in batches (app/cli/fact_upload.py), with a progress line per batch. Ctrl-C stops at once;
the same command again goes on from the last acknowledged fact. With API_TOKEN set (the environment or
.env), every request carries it as `Authorization: Bearer <token>`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click
from flask import current_app
from flask.cli import with_appcontext

from app.cli.fact_upload import MAX_BATCH, Api, Upload, UploadError

EXIT_INTERRUPTED = 130


def default_url() -> str:
    config = current_app.config["APP_CONFIG"]
    host = "127.0.0.1" if config.host in ("0.0.0.0", "::", "") else config.host
    return f"http://{host}:{config.port}"


@click.command("import-facts")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--graph", "graph_id", required=True, help="the graph to fill")
@click.option("--create", is_flag=True, help="create the graph when it does not exist")
@click.option("--url", default=None, help="the API's base URL  [default: http://HOST:PORT of the settings]")
@click.option("--batch-size", default=2000, show_default=True, type=click.IntRange(1, MAX_BATCH),
              help="facts per request; each is stored whole or not at all")
@click.option("--in-flight", default=1, show_default=True, type=click.IntRange(1, 8),
              help="requests at once; more than 1 is for an API whose embedder is a remote service or "
                   "that several workers serve (with the in-process embedder, 1 and 2 measured the same)")
@click.option("--state", "state_path", default=None, type=click.Path(dir_okay=False, path_type=Path),
              help="where progress is kept  [default: FILE.<graph>.import-state.json]")
@with_appcontext
def import_facts_command(file: Path, graph_id: str, create: bool, url: str | None, batch_size: int,
                         in_flight: int, state_path: Path | None) -> None:
    """Import FILE (JSONL facts) into a graph through the running API, resumably."""
    config = current_app.config["APP_CONFIG"]
    upload = Upload(Api(url or default_url(), config.api_token), file, graph_id, batch_size=batch_size,
                    in_flight=in_flight, state_path=state_path, create=create)
    try:
        progress = upload.run(echo=click.echo)
    except UploadError as error:
        raise click.ClickException(str(error)) from None
    except KeyboardInterrupt:
        click.echo(f"\nInterrupted; run the same command again to go on ({upload.state_path}).", err=True)
        sys.stdout.flush()
        # Requests already sent may still be running in their threads; the server finishes or drops
        # each one whole, so there is nothing to wait for here.
        os._exit(EXIT_INTERRUPTED)
    click.echo(f"Done: {progress.acknowledged:,} facts acknowledged in {progress.seconds:.0f} s "
               f"({progress.rate:.1f} facts/s this run).")


commands = [import_facts_command]
