"""Report API: run one report tool, start a report (a background task), read a stored report.

    POST /api/report/<graph_id>/tools/<tool>   JSON arguments -> {"tool", "result", "text"}
    POST /api/report/<graph_id>                {"requirement", "max_sections"?} -> 202 {"report_id", "task_id"}
    GET  /api/report/<report_id>               markdown, sections, outline and the step log
Progress of a running report: GET /api/tasks/<task_id>.
"""

from __future__ import annotations

from flask import Blueprint

from app.api.errors import ApiError
from app.api.validation import app_config, int_field, json_object, known_graph_id, text_field
from app.report.agent import start_report
from app.report.store import ReportStore, UnknownReportError, validate_report_id
from app.report.tool_args import ToolArgumentError
from app.report.tool_registry import TOOL_NAMES, TOOLS
from app.report.tools import ReportTools

bp = Blueprint("report", __name__, url_prefix="/api/report")

MAX_REQUIREMENT_CHARS = 4000
MAX_SECTIONS = 6


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
    unknown = sorted(set(body) - {"requirement", "max_sections"})
    if unknown:
        raise ApiError(400, "unknown_field", f"unknown field(s) {unknown}; allowed: ['requirement', 'max_sections']")
    graph_id = known_graph_id(graph_id)
    report_id, task = start_report(app_config(), graph_id, requirement.strip(), max_sections)
    return {"report_id": report_id, "task_id": task.task_id, "graph_id": graph_id}, 202


@bp.get("/<report_id>")
def get_report(report_id: str):
    try:
        validate_report_id(report_id)
    except ValueError as error:
        raise ApiError(400, "invalid_report_id", str(error)) from None
    try:
        return ReportStore(app_config().data_dir).read(report_id)
    except UnknownReportError as error:
        raise ApiError(404, "report_not_found", str(error)) from None
