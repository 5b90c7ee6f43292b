"""One error shape for the whole API: {"error": {"code", "message"}} with a 4xx/5xx status."""

from __future__ import annotations

import logging

from flask import Flask, jsonify
from neo4j.exceptions import ServiceUnavailable, SessionExpired
from werkzeug.exceptions import HTTPException

from app.graph.fact_import import GraphChangedError, ImportFailedError
from app.graph.fact_parsing import FactValidationError
from app.graph.store import GraphExistsError, UnknownGraphError, UnknownNodeError
from app.graph.loop import GraphTimeoutError
from app.graph.unavailable import RETRY_AFTER_S, GraphUnavailableError

logger = logging.getLogger(__name__)


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, *, headers: dict[str, str] | None = None, **details):
        super().__init__(message)
        self.status, self.code, self.message, self.details = status, code, message, details
        self.headers = headers or {}  # e.g. Retry-After on a 503


def error_response(status: int, code: str, message: str, **details):
    body = {"error": {"code": code, "message": message, **details}}
    return jsonify(body), status


def register(app: Flask) -> None:
    @app.errorhandler(ApiError)
    def _api_error(error: ApiError):
        response, status = error_response(error.status, error.code, error.message, **error.details)
        response.headers.update(error.headers)
        return response, status

    @app.errorhandler(FactValidationError)
    def _bad_fact(error: FactValidationError):
        return error_response(422, "invalid_fact", str(error), position=error.position)

    @app.errorhandler(UnknownGraphError)
    def _unknown_graph(error: UnknownGraphError):
        return error_response(404, "graph_not_found", str(error))

    @app.errorhandler(UnknownNodeError)
    def _unknown_node(error: UnknownNodeError):
        return error_response(404, "node_not_found", str(error))

    @app.errorhandler(GraphExistsError)
    def _graph_exists(error: GraphExistsError):
        return error_response(409, "graph_exists", str(error))

    @app.errorhandler(GraphChangedError)
    def _graph_changed(error: GraphChangedError):
        return error_response(409, "graph_changed", str(error), stored=0)

    @app.errorhandler(ImportFailedError)
    def _import_failed(error: ImportFailedError):
        return error_response(503, "import_failed", str(error), stored=0)

    @app.errorhandler(GraphUnavailableError)
    def _graph_unavailable(error: GraphUnavailableError):
        response, status = error_response(503, "graph_unavailable", str(error))
        response.headers["Retry-After"] = str(int(error.retry_after_s))
        return response, status

    @app.errorhandler(ServiceUnavailable)
    @app.errorhandler(SessionExpired)
    def _graph_went_away(error: Exception):  # Neo4j stopped answering after a good start
        logger.error("Graph database unavailable: %s: %s", type(error).__name__, error)
        response, status = error_response(503, "graph_unavailable", "the graph database does not answer")
        response.headers["Retry-After"] = str(int(RETRY_AFTER_S))
        return response, status

    @app.errorhandler(GraphTimeoutError)
    def _timeout(error: GraphTimeoutError):
        return error_response(504, "timeout", str(error))

    @app.errorhandler(HTTPException)
    def _http(error: HTTPException):
        messages = {413: f"request body is larger than {app.config['MAX_CONTENT_LENGTH']} bytes"}
        code = (error.name or "error").lower().replace(" ", "_")
        return error_response(error.code or 500, code, messages.get(error.code, error.description or code))

    @app.errorhandler(Exception)
    def _unexpected(error: Exception):
        logger.exception("Unhandled error")
        return error_response(500, "internal_error", f"internal error ({type(error).__name__})")
