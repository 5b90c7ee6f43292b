"""`flask export-graph ID` and `flask import-graph FILE --graph ID`: a whole graph to and from a JSONL
file, through a running API (`GET /api/graph/<id>/export`, `POST /api/graph/<id>/import`).

    cd backend && ../.venv/bin/python -m flask --app app export-graph city --out city.jsonl
    ../.venv/bin/python -m flask --app app import-graph city.jsonl --graph city_copy --new-uuids

With API_TOKEN set (the environment or .env), every request carries it as `Authorization: Bearer <token>`.
"""

from __future__ import annotations

import http.client
import json
from pathlib import Path
from urllib.parse import quote, urlencode, urlsplit

import click
from flask import current_app
from flask.cli import with_appcontext

from app.cli.import_facts import default_url

TIMEOUT_S = 900.0  # an import embeds every name and fact before it answers


def _request(url: str, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise click.ClickException(f"--url must be an http(s) URL such as http://127.0.0.1:5001, got {url!r}")
    token = current_app.config["APP_CONFIG"].api_token
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if body is not None:
        headers["Content-Type"] = "application/x-ndjson"
    connection_class = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    connection = connection_class(parts.hostname, parts.port, timeout=TIMEOUT_S)
    try:
        connection.request(method, parts.path.rstrip("/") + path, body, headers)
        response = connection.getresponse()
        return response.status, response.read()
    except (OSError, http.client.HTTPException) as error:
        raise click.ClickException(f"cannot reach the API at {url} ({type(error).__name__}: {error}); start it "
                                   "with `make serve` (or pass --url)") from None
    finally:
        connection.close()


def _failure(status: int, body: bytes) -> click.ClickException:
    try:
        message = json.loads(body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = body[:200].decode("utf-8", "replace")
    return click.ClickException(f"HTTP {status}: {message}")


@click.command("export-graph")
@click.argument("graph_id")
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="the file to write  [default: GRAPH_ID.jsonl]")
@click.option("--url", default=None, help="the API's base URL  [default: http://HOST:PORT of the settings]")
@with_appcontext
def export_graph_command(graph_id: str, out: Path | None, url: str | None) -> None:
    """Write graph GRAPH_ID (entities, facts, episodes) as a JSONL file."""
    status, body = _request(url or default_url(), "GET", f"/api/graph/{quote(graph_id, safe='')}/export")
    if status != 200:
        raise _failure(status, body)
    out = out or Path(f"{graph_id}.jsonl")
    out.write_bytes(body)
    header = json.loads(body.split(b"\n", 1)[0])
    click.echo(f"Wrote {out}: {header['entities']} entities, {header['facts']} facts, "
               f"{header['episodes']} episodes ({len(body):,} bytes).")


@click.command("import-graph")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--graph", "graph_id", required=True, help="a new graph id, or an empty graph")
@click.option("--new-uuids", is_flag=True, help="store it under fresh uuids (a copy within one Neo4j database)")
@click.option("--url", default=None, help="the API's base URL  [default: http://HOST:PORT of the settings]")
@with_appcontext
def import_graph_command(file: Path, graph_id: str, new_uuids: bool, url: str | None) -> None:
    """Import FILE, as export-graph wrote it, into a new or empty graph."""
    query = urlencode({"new_uuids": "true"}) if new_uuids else ""
    status, body = _request(url or default_url(), "POST",
                            f"/api/graph/{quote(graph_id, safe='')}/import" + (f"?{query}" if query else ""),
                            file.read_bytes())
    if status != 201:
        raise _failure(status, body)
    result = json.loads(body)
    click.echo(f"Imported into {result['graph_id']}: {result['entities']} entities, {result['facts']} facts, "
               f"{result['episodes']} episodes.")


commands = [export_graph_command, import_graph_command]
