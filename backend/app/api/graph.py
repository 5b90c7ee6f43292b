"""Graph API: create/list/delete graphs, import facts, ingest text, search, paged reads."""

from __future__ import annotations

import json
from pathlib import PurePath

from flask import Blueprint, Response, request, stream_with_context

from app.api.errors import ApiError
from app.api.validation import (
    MAX_JSON_DEPTH, MAX_QUERY_CHARS, adapter, choice_field, graph_id_param, int_field, json_depth, json_object,
    known_graph_id, refuse_invalid_text, refuse_unknown_fields, text_field,
)
from app.config import MAX_JUDGED_CANDIDATES
from app.graph.episodes import chunk_text
from app.graph.fact_parsing import FactValidationError, parse_fact, parse_facts
from app.graph.graph_file import GraphFileError, GraphFileTooLargeError, parse_graph_file
from app.graph.search import SCOPES, SearchOutcome
from app.graph.search_filters import FILTER_FIELDS, MAX_ENTITY_CHARS, parse_filter
from app.tasks import ENDED_STATES

bp = Blueprint("graph", __name__, url_prefix="/api/graph")

MAX_FACTS_PER_IMPORT = 5000
MAX_SEARCH_LIMIT = 100
MAX_NEIGHBOURHOOD = 10  # entities whose facts a search may add to the judged candidates
MAX_PAGE = 500
MAX_EPISODE_CHARS = 200_000
DELETE_WAIT_S = 10.0  # a DELETE answers within this; a longer deletion goes on as a task
TEXT_UPLOAD_SUFFIXES = (".txt", ".md")
SEARCH_FIELDS = ("query", "limit", "scope", "neighbourhood", "candidates", "center", *FILTER_FIELDS)


def _uploaded_text(suffixes: tuple[str, ...]) -> str:
    upload = request.files.get("file")
    if upload is None:
        raise ApiError(400, "missing_file", "multipart upload needs a 'file' field")
    # The client's file name is only looked at, never used as a path.
    suffix = PurePath(upload.filename or "").suffix.lower()
    if suffix not in suffixes:
        raise ApiError(415, "unsupported_file", f"file must end with one of {list(suffixes)}")
    try:
        text = upload.read().decode("utf-8")
    except UnicodeDecodeError as error:
        raise ApiError(400, "invalid_utf8", f"file is not valid UTF-8 (byte {error.start})") from None
    return text.removeprefix("\ufeff")  # a byte order mark (Windows editors write one) is not content


def _facts_from_jsonl(text: str) -> list:
    facts = []
    for line_number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            if json_depth(line.encode()) > MAX_JSON_DEPTH:
                raise ValueError("nested too deeply")
            item = json.loads(line)
        except ValueError:
            raise ApiError(400, "invalid_jsonl", f"line {line_number}: not valid JSON", line=line_number) from None
        facts.append(parse_fact(item, line_number, unit="line"))
        refuse_invalid_text(item, prefix=f"line {line_number}: ")
    if not facts:
        raise ApiError(400, "empty_upload", "the file holds no facts")
    return facts


@bp.post("")
def create_graph():
    # No body at all asks for a generated id; any body (a form included) must be JSON.
    body = json_object() if request.content_length or request.content_type else {}
    name = text_field(body, "name", max_chars=200, required=False)
    graph_id = body.get("graph_id")
    if graph_id is not None:
        graph_id = graph_id_param(graph_id) if isinstance(graph_id, str) else graph_id_param("")
        if adapter().graph.exists(graph_id):
            raise ApiError(409, "graph_exists", f"graph {graph_id!r} already exists")
    return adapter().graph.create(graph_id, name), 201


@bp.get("")
def list_graphs():
    """The app's graphs; with `?include=foreign` also the Graphiti groups it did not create (`foreign`)."""
    include = request.args.get("include")
    if include is None:
        return {"graphs": adapter().graph.list()}
    if include != "foreign":
        raise ApiError(400, "invalid_value", "'include' must be 'foreign' (or left out)")
    graph = adapter().graph
    return {"graphs": graph.list(), "foreign": graph.foreign()}


@bp.delete("/<graph_id>")
def delete_graph(graph_id: str):
    """200 when the graph is gone within DELETE_WAIT_S; else 202 and the deletion goes on as a
    task (a large graph on Neo4j takes many batches): GET /api/tasks/<task_id> shows its progress."""
    graph_id = known_graph_id(graph_id)  # an unknown graph is a 404 here, not a failed task
    tasks = adapter().tasks
    handle = tasks.start("graph_delete", "app.graph.background:delete_graph", graph_id)
    task = tasks.queue.wait(handle.task_id, DELETE_WAIT_S)
    if task["state"] not in ENDED_STATES:
        return {"deleted": graph_id, "task_id": handle.task_id, "state": task["state"]}, 202
    if task["state"] == "failed":
        error = tasks.queue.exception(handle.task_id)
        if error is not None:
            raise error  # the same answer as a failed synchronous call (404, 503, 504...)
        raise ApiError(500, "delete_failed", "; ".join(task["errors"]) or "the deletion failed")
    return {"deleted": graph_id, "task_id": handle.task_id, "state": task["state"]}


@bp.post("/<graph_id>/facts")
def import_facts(graph_id: str):
    graph_id = known_graph_id(graph_id)
    if request.files:
        facts = _facts_from_jsonl(_uploaded_text((".jsonl", ".json", ".ndjson")))
    else:
        facts = json_object().get("facts")
        facts = parse_facts(facts) if isinstance(facts, list) and facts else _missing_facts(facts)
    if len(facts) > MAX_FACTS_PER_IMPORT:
        raise ApiError(413, "too_many_facts", f"at most {MAX_FACTS_PER_IMPORT} facts per import")
    return adapter().graph.import_facts(graph_id, facts), 201


def _missing_facts(value):
    if value is None:
        raise ApiError(400, "missing_field", "'facts' is required (a non-empty list of fact objects)")
    raise ApiError(400, "invalid_type", "'facts' must be a non-empty list of fact objects")


@bp.post("/<graph_id>/episodes")
def add_episodes(graph_id: str):
    graph_id = known_graph_id(graph_id)
    if request.files:
        text, name = _uploaded_text(TEXT_UPLOAD_SUFFIXES), "upload"
        if not text.strip():
            raise ApiError(400, "empty_upload", "the file is empty")
    else:
        body = json_object()
        text = text_field(body, "text", max_chars=MAX_EPISODE_CHARS)
        name = text_field(body, "name", max_chars=200, required=False) or "episode"
    if len(text) > MAX_EPISODE_CHARS:
        raise ApiError(413, "text_too_large", f"text is longer than {MAX_EPISODE_CHARS} characters")
    chunks = chunk_text(text)
    task = adapter().tasks.start("episodes", "app.graph.background:add_episodes", graph_id, chunks, name)
    return {"task_id": task.task_id, "chunks": len(chunks)}, 202


@bp.post("/<graph_id>/search")
def search(graph_id: str):
    graph_id = graph_id_param(graph_id)
    body = json_object()
    refuse_unknown_fields(body, SEARCH_FIELDS)
    query = text_field(body, "query", max_chars=MAX_QUERY_CHARS)
    limit = int_field(body, "limit", default=10, minimum=1, maximum=MAX_SEARCH_LIMIT)
    scope = choice_field(body, "scope", default="edges", allowed=SCOPES)
    neighbourhood = int_field(body, "neighbourhood", default=0, minimum=0, maximum=MAX_NEIGHBOURHOOD)
    candidates = int_field(body, "candidates", default=0, minimum=0, maximum=MAX_JUDGED_CANDIDATES)  # 0: the usual
    filters = parse_filter(body)  # a bad one: FilterError, 400 naming the field
    centre = text_field(body, "center", max_chars=MAX_ENTITY_CHARS, required=False)
    outcome = adapter().graph.search(graph_id, query, limit=limit, scope=scope, neighbourhood=neighbourhood,
                                     candidates=candidates or None, filters=filters, centre=centre)
    return {**outcome.to_dict(), "rerank_fallback": fallback_reason(outcome), "filters": filters.describe(),
            "center": centre}


def fallback_reason(outcome: SearchOutcome) -> str | None:
    """Why the reranker kept the first-stage order ("ModelNotReady: ..."), as its WARNING said; None
    when it judged, was off, or had nothing to judge. "; " between the edges' and the nodes' reasons."""
    reasons = [trace.judgement.fallback_reason for trace in outcome.trace.values() if trace.judgement.fallback_reason]
    return "; ".join(dict.fromkeys(reasons)) or None


def _page():
    return (
        int_field(request.args, "offset", default=0, minimum=0, maximum=10**9),
        int_field(request.args, "limit", default=50, minimum=1, maximum=MAX_PAGE),
    )


@bp.get("/<graph_id>/nodes")
def nodes(graph_id: str):
    return adapter().graph.nodes(graph_id_param(graph_id), *_page())


@bp.get("/<graph_id>/nodes/<node_uuid>")
def node(graph_id: str, node_uuid: str):
    if len(node_uuid) > 64:
        raise ApiError(400, "invalid_node_id", "node id is too long")
    return adapter().graph.node(graph_id_param(graph_id), node_uuid)


@bp.get("/<graph_id>/edges")
def edges(graph_id: str):
    return adapter().graph.edges(graph_id_param(graph_id), *_page())


@bp.get("/<graph_id>/stats")
def stats(graph_id: str):
    return adapter().graph.stats(graph_id_param(graph_id))


GRAPH_FILE_TYPES = ("application/x-ndjson", "application/jsonl", "application/json-lines", "text/plain")


@bp.get("/<graph_id>/export")
def export_graph(graph_id: str):
    """The whole graph as JSONL (app/graph/graph_file.py), read at once under the graph's lock and
    streamed line by line."""
    graph = adapter().graph.export_graph(graph_id_param(graph_id))
    response = Response(stream_with_context(graph.lines()), mimetype="application/x-ndjson")
    response.headers["Content-Disposition"] = f'attachment; filename="{graph.graph_id}.jsonl"'
    return response


@bp.post("/<graph_id>/import")
def import_graph(graph_id: str):
    """A file `GET .../export` wrote, into a new graph id (created here) or an empty graph: the raw
    JSONL as the body, or a multipart 'file'. `?new_uuids=true` stores it under fresh uuids (needed
    to copy a graph within one Neo4j database). Checked whole before anything is written."""
    graph_id = graph_id_param(graph_id)
    new_uuids = _bool_arg("new_uuids")
    name = request.args.get("name")
    if name is not None and not (name.strip() and len(name) <= 200):
        raise ApiError(400, "invalid_value", "'name' must be 1-200 characters")
    try:
        graph = parse_graph_file(_graph_file_text())
    except GraphFileTooLargeError as error:
        raise ApiError(413, "too_many_records", str(error), line=error.line) from None
    except GraphFileError as error:
        raise ApiError(400, "invalid_graph_file", str(error), line=error.line) from None
    return adapter().graph.import_graph(graph_id, graph, name=name, new_uuids=new_uuids), 201


def _graph_file_text() -> str:
    if request.files:
        return _uploaded_text((".jsonl", ".ndjson", ".json"))
    if request.mimetype not in GRAPH_FILE_TYPES:
        raise ApiError(415, "unsupported_media_type",
                       f"send the JSONL as the body with Content-Type one of {list(GRAPH_FILE_TYPES)}, "
                       "or as a multipart 'file'")
    try:
        return request.get_data().decode("utf-8")
    except UnicodeDecodeError as error:
        raise ApiError(400, "invalid_utf8", f"the body is not valid UTF-8 (byte {error.start})") from None


def _bool_arg(key: str) -> bool:
    value = request.args.get(key, "false").lower()
    if value not in ("true", "false"):
        raise ApiError(400, "invalid_value", f"'{key}' must be true or false")
    return value == "true"


@bp.post("/<graph_id>/adopt")
def adopt_graph(graph_id: str):
    """Register a Graphiti group this app did not create (listed by `GET /api/graph?include=foreign`),
    leaving its data where it is; `{"reembed": true}` embeds its names and facts again with this
    app's embedder (needed when its vectors have another length)."""
    graph_id = graph_id_param(graph_id)
    body = json_object() if request.content_length or request.content_type else {}
    name = text_field(body, "name", max_chars=200, required=False)
    reembed = body.get("reembed", False)
    if not isinstance(reembed, bool):
        raise ApiError(400, "invalid_type", "'reembed' must be true or false")
    return adapter().graph.adopt(graph_id, name, reembed), 201


__all__ = ["bp", "FactValidationError"]
