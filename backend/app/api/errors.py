"""One error shape for the whole API: {"error": {"code", "message", "request_id"}} with a 4xx/5xx status.

`request_id` is the request's id (app/api/request_log.py), as in its X-Request-ID header and its log lines."""

from __future__ import annotations

import logging

from flask import Flask, current_app, jsonify
from werkzeug.exceptions import HTTPException

from app.graph.fact_import import GraphChangedError, ImportFailedError
from app.graph.fact_parsing import FactValidationError
from app.graph.foreign import EmbeddingMismatchError, UnknownForeignGraphError
from app.graph.search_filters import FilterError, UnknownEntityError
from app.graph.store import GraphExistsError, UnknownGraphError, UnknownNodeError
from app.graph.loop import GraphTimeoutError
from app.graph.transfer import GraphNotEmptyError, UuidConflictError
from app.graph.unavailable import GraphUnavailableError, as_unavailable
from app.request_id import current_request_id

logger = logging.getLogger(__name__)


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, *, headers: dict[str, str] | None = None, **details):
        super().__init__(message)
        self.status, self.code, self.message, self.details = status, code, message, details
        self.headers = headers or {}  # e.g. Retry-After on a 503


def error_body(code: str, message: str, **details) -> dict:
    """The "error" object: code, message, what the error adds, and the request's id."""
    return {"code": code, "message": message, **details, "request_id": current_request_id()}


def error_response(status: int, code: str, message: str, **details):
    return jsonify({"error": error_body(code, message, **details)}), status


def graph_unavailable(error: GraphUnavailableError, **body):
    """503 graph_unavailable with Retry-After; `body` adds fields beside "error" (health)."""
    response = jsonify({**body, "error": error_body("graph_unavailable", str(error), **error.details)})
    response.headers["Retry-After"] = str(int(error.retry_after_s))
    return response, 503


def not_ready(code: str, message: str, retry_after_s: float, **body):
    """503 `code` with Retry-After; `body` adds fields beside "error" (readiness)."""
    response = jsonify({**body, "error": {"code": code, "message": message}})
    response.headers["Retry-After"] = str(max(1, int(retry_after_s)))
    return response, 503


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

    @app.errorhandler(UnknownEntityError)
    def _unknown_entity(error: UnknownEntityError):
        return error_response(404, "entity_not_found", str(error), field=error.field)

    @app.errorhandler(FilterError)
    def _bad_filter(error: FilterError):
        return error_response(400, "invalid_filter", str(error), field=error.field)

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
    def _import_failed(error: ImportFailedError):  # the database answered, but the import did not hold
        return error_response(503, "import_failed", str(error), stored=0)

    @app.errorhandler(GraphNotEmptyError)
    def _graph_not_empty(error: GraphNotEmptyError):
        return error_response(409, "graph_not_empty", str(error), stored=0)

    @app.errorhandler(UuidConflictError)
    def _uuid_conflict(error: UuidConflictError):
        return error_response(409, "uuid_conflict", str(error), stored=0)

    @app.errorhandler(UnknownForeignGraphError)
    def _unknown_foreign(error: UnknownForeignGraphError):
        return error_response(404, "graph_not_found", str(error))

    @app.errorhandler(EmbeddingMismatchError)
    def _embedding_mismatch(error: EmbeddingMismatchError):
        return error_response(409, "embedding_mismatch", str(error), stored_dimension=error.stored,
                              embedder_dimension=error.ours)

    @app.errorhandler(GraphUnavailableError)
    def _graph_unavailable(error: GraphUnavailableError):
        return graph_unavailable(error)

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
        # A database error that reached a view without passing the graph operations (which raise
        # GraphUnavailableError themselves): a driver error, also one wrapped by graphiti or by us.
        refusal = as_unavailable(error, current_app.config["APP_CONFIG"])
        if refusal is not None:
            logger.error("Graph database unavailable: %s (%s: %s)", refusal, type(error).__name__, error)
            return graph_unavailable(refusal)
        logger.exception("Unhandled error")
        return error_response(500, "internal_error", f"internal error ({type(error).__name__})")
