"""The report tools' arguments: one declaration used by the HTTP API (4xx on bad input), by the
agent (an error message back to the LLM) and to describe the tools in the agent's prompt."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.config import MAX_JUDGED_CANDIDATES
from app.graph.text_rules import lone_surrogate_problem


class UnknownToolError(LookupError):
    pass


class ToolArgumentError(ValueError):
    pass


@dataclass(frozen=True)
class Param:
    name: str
    kind: str  # "text" | "int" | "texts" | "choice"
    help: str
    required: bool = False
    default: Any = None
    minimum: int = 1
    maximum: int = 10_000  # ints: largest value; texts: most items
    max_chars: int = 1000  # text and each item of texts
    choices: tuple[str, ...] = ()


_MAX_CHARS = Param("max_chars", "int", "size budget of the text answer", default=None, minimum=500, maximum=50_000)
_CANDIDATES = Param("candidates", "int", "first-stage candidates the reranker judges for the query (default: "
                    "RERANKER_CANDIDATES per fact wanted)", default=None, minimum=1,
                    maximum=MAX_JUDGED_CANDIDATES)

TOOL_PARAMS: dict[str, tuple[Param, ...]] = {
    "search_graph": (
        Param("query", "text", "what to look for", required=True, max_chars=1000),
        Param("limit", "int", "how many facts and entities at most", default=10, maximum=50),
        Param("scope", "choice", "what to search", default="both", choices=("edges", "nodes", "both")),
        Param("neighbourhood", "int", "the top entities whose facts (and their neighbours') the reranker "
              "judges too; 0: the search's own hits only", default=0, minimum=0, maximum=10),
        _CANDIDATES,
        _MAX_CHARS,
    ),
    "insight_forge": (
        Param("question", "text", "the question to dig into", required=True, max_chars=1000),
        Param("max_sub_queries", "int", "sub-queries to search, the question included", default=3, maximum=5),
        Param("limit", "int", "facts per sub-query", default=8, maximum=30),
        _CANDIDATES,
        _MAX_CHARS,
    ),
    "panorama_search": (
        Param("query", "text", "what the overview is about", required=True, max_chars=1000),
        Param("limit", "int", "how many search hits mark facts as relevant", default=30, maximum=100),
        _MAX_CHARS,
    ),
    "interview_entities": (
        Param("topic", "text", "what the interview is about; it picks the entities", required=True, max_chars=500),
        Param("questions", "texts", "questions to ask each entity", required=True, maximum=5, max_chars=500),
        Param("entities", "texts", "entity names to interview (default: the most relevant)", maximum=5,
              max_chars=256),
        Param("max_entities", "int", "how many entities to interview", default=3, maximum=5),
        Param("limit", "int", "search hits that pick the entities and rank their facts", default=20, maximum=50),
        _MAX_CHARS,
    ),
}

TOOL_NAMES = tuple(TOOL_PARAMS)

TOOL_PURPOSES = {
    "search_graph": "graph search: facts, entities and relations relevant to a query, best first",
    "insight_forge": "deep retrieval: splits a question into sub-queries, merges their facts, "
                     "adds entity summaries and relationship chains",
    "panorama_search": "wide view: every entity and fact, current and historical (no longer true) apart, "
                       "the relevant ones first",
    "interview_entities": "interviews the most relevant entities as people; they answer only from their facts",
}


def _check(param: Param, value: Any) -> Any:
    name = param.name
    if param.kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ToolArgumentError(f"'{name}' must be an integer")
        if not param.minimum <= value <= param.maximum:
            raise ToolArgumentError(f"'{name}' must be between {param.minimum} and {param.maximum}")
        return value
    if param.kind == "choice":
        if not isinstance(value, str) or value.lower() not in param.choices:
            raise ToolArgumentError(f"'{name}' must be one of {list(param.choices)}")
        return value.lower()
    if param.kind == "texts":
        if isinstance(value, str):
            value = [value]  # a single question is a list of one
        if not isinstance(value, list) or not value or len(value) > param.maximum:
            raise ToolArgumentError(f"'{name}' must be a list of 1 to {param.maximum} strings")
        return [_text(name, item, param.max_chars) for item in value]
    return _text(name, value, param.max_chars)


def _text(name: str, value: Any, max_chars: int) -> str:
    if not isinstance(value, str):
        raise ToolArgumentError(f"'{name}' must be a string")
    if not value.strip():
        raise ToolArgumentError(f"'{name}' must not be empty")
    if len(value) > max_chars:
        raise ToolArgumentError(f"'{name}' is longer than {max_chars} characters")
    if "\x00" in value:  # graph search refuses it too: the driver strips NUL, breaking the query
        raise ToolArgumentError(f"'{name}' must not contain NUL characters")
    problem = lone_surrogate_problem(value)
    if problem:
        raise ToolArgumentError(f"'{name}' {problem}")
    return value.strip()


def parse_tool_arguments(tool: str, arguments: Any) -> dict[str, Any]:
    """Validated keyword arguments for the tool (defaults filled in); raises a clear error."""
    if tool not in TOOL_PARAMS:
        raise UnknownToolError(f"unknown tool {tool!r}; tools: {list(TOOL_NAMES)}")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise ToolArgumentError("arguments must be a JSON object")
    params = {param.name: param for param in TOOL_PARAMS[tool]}
    unknown = sorted(set(arguments) - set(params))
    if unknown:
        raise ToolArgumentError(f"unknown argument(s) {unknown} for {tool}; allowed: {list(params)}")
    parsed: dict[str, Any] = {}
    for name, param in params.items():
        value = arguments.get(name)
        if value is None:
            if param.required:
                raise ToolArgumentError(f"'{name}' is required for {tool}")
            if param.default is not None:
                parsed[name] = param.default
            continue
        parsed[name] = _check(param, value)
    return parsed


def describe_tools(exclude: tuple[str, ...] = ("max_chars",)) -> str:
    """The tools and their arguments, for the agent's system prompt."""
    lines = []
    for tool, params in TOOL_PARAMS.items():
        args = ", ".join(
            f"{p.name}{'' if p.required else '?'}: {'list of strings' if p.kind == 'texts' else p.kind}"
            f"{' ' + '|'.join(p.choices) if p.choices else ''} ({p.help})"
            for p in params if p.name not in exclude
        )
        lines.append(f"- {tool}: {TOOL_PURPOSES[tool]}. Arguments: {args}")
    return "\n".join(lines)
