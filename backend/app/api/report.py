"""Report API: run one report tool, start, list, read, cancel and delete reports.

    POST   /api/report/<graph_id>/tools/<tool>   JSON arguments -> {"tool", "result", "text"}
    POST   /api/report/<graph_id>                {"requirement", "max_sections"?} -> 202 {"report_id", "task_id"}
    GET    /api/report                           reports newest first (?graph_id=, ?limit=, ?offset=), no text
    GET    /api/report/<report_id>               markdown, sections, outline and the step log
    POST   /api/report/<report_id>/cancel        stop a queued or running report (its status ends "canceled")
    DELETE /api/report/<report_id>               cancel it if it runs, then remove it
Progress of a running report: GET /api/tasks/<task_id>. Reports live on the task broker, so every
API process answers for every report.
"""

from __future__ import annotations

from flask import Blueprint, request

from app.api.errors import ApiError
from app.api.validation import (
    adapter, app_config, graph_id_param, int_field, json_object, known_graph_id, refuse_unknown_fields, text_field,
)
from app.report.agent import start_report
from app.report.store import ACTIVE_STATUSES, ReportStore, UnknownReportError, validate_report_id
from app.report.tool_args import ToolArgumentError
from app.report.tool_registry import TOOL_NAMES, TOOLS
from app.report.tools import ReportTools

bp = Blueprint("report", __name__, url_prefix="/api/report")

MAX_REQUIREMENT_CHARS = 4000
MAX_SECTIONS = 6
MAX_LISTED = 200


def _store() -> ReportStore:
    return ReportStore(adapter().tasks.queue.connection)


def _report_id(report_id: str) -> str:
    try:
        return validate_report_id(report_id)
    except ValueError as error:
        raise ApiError(400, "invalid_report_id", str(error)) from None


@bp.post("/<graph_id>/tools/<tool>")
def run_tool(graph_id: str, tool: str):
    report_tool = TOOLS.get(tool)
    if report_tool is None:
        raise ApiError(404, "unknown_tool", f"unknown tool {tool[:64]!r}; tools: {list(TOOL_NAMES)}")
    body = json_object()
    try:
        arguments = report_tool.check_arguments(body)
    except ToolArgumentError as error:
        raise ApiError(400, "invalid_arguments", str(error)) from None
    graph_id = known_graph_id(graph_id)
    tools = ReportTools(app_config())
    try:
        result = report_tool.run(tools, graph_id, arguments)
    finally:
        tools.close()
    return report_tool.api_answer(result)


@bp.post("/<graph_id>")
def create_report(graph_id: str):
    body = json_object()
    requirement = text_field(body, "requirement", max_chars=MAX_REQUIREMENT_CHARS)
    max_sections = int_field(body, "max_sections", default=3, minimum=1, maximum=MAX_SECTIONS)
    refuse_unknown_fields(body, ("requirement", "max_sections"))
    graph_id = known_graph_id(graph_id)
    report_id, task = start_report(app_config(), graph_id, requirement.strip(), max_sections)
    return {"report_id": report_id, "task_id": task.task_id, "graph_id": graph_id}, 202


@bp.get("")
def list_reports():
    query = dict(request.args)
    refuse_unknown_fields(query, ("graph_id", "limit", "offset"), code="unknown_parameter", kind="parameter")
    graph_id = query.get("graph_id")
    if graph_id is not None:
        graph_id = graph_id_param(graph_id)
    limit = int_field(query, "limit", default=50, minimum=1, maximum=MAX_LISTED)
    offset = int_field(query, "offset", default=0, minimum=0, maximum=10**9)
    return {"reports": _store().list(graph_id=graph_id, limit=limit, offset=offset), "limit": limit, "offset": offset}


@bp.get("/<report_id>")
def get_report(report_id: str):
    try:
        return _store().read(_report_id(report_id))
    except UnknownReportError as error:
        raise ApiError(404, "report_not_found", str(error)) from None


def _cancel(store: ReportStore, report_id: str) -> dict:
    """Ask the report's task to stop; the report as it reads then."""
    meta = store.meta(report_id)
    if meta.get("status") in ACTIVE_STATUSES and meta.get("task_id"):
        adapter().tasks.queue.cancel(meta["task_id"])
        if store.meta(report_id).get("status") == "queued":  # taken off the queue before any step ran
            store.update_meta(report_id, status="canceled")
    return store.meta(report_id)


@bp.post("/<report_id>/cancel")
def cancel_report(report_id: str):
    store = _store()
    try:
        return _cancel(store, _report_id(report_id))
    except UnknownReportError as error:
        raise ApiError(404, "report_not_found", str(error)) from None


@bp.delete("/<report_id>")
def delete_report(report_id: str):
    store = _store()
    report_id = _report_id(report_id)
    try:
        _cancel(store, report_id)
    except UnknownReportError as error:
        raise ApiError(404, "report_not_found", str(error)) from None
    store.delete(report_id)  # a task still finishing its step writes nothing back: the report is gone
    return {"deleted": report_id}
