"""A report tool's parameters and their checks. Each tool declares its parameters once
(tool_registry.py); the same declaration checks the HTTP API's input (4xx on bad input) and the
agent's calls (an error message back to the LLM), and lists the arguments in the agent's prompt."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.graph.search_filters import FilterError, parse_filter
from app.graph.text_rules import lone_surrogate_problem


class UnknownToolError(LookupError):
    pass


class ToolArgumentError(ValueError):
    pass


@dataclass(frozen=True)
class Param:
    name: str
    kind: str  # "text" | "int" | "texts" | "choice" | "time" | "window" | "bool" (the last three: search filters)
    help: str
    required: bool = False
    default: Any = None
    minimum: int = 1
    maximum: int = 10_000  # ints: largest value; texts: most items
    max_chars: int = 1000  # text and each item of texts
    choices: tuple[str, ...] = ()

    def describe(self) -> str:
        """How the agent's prompt lists the parameter: 'name?: kind (help)', '?' when optional."""
        kind = _KIND_WORDS.get(self.kind, self.kind)
        choices = " " + "|".join(self.choices) if self.choices else ""
        return f"{self.name}{'' if self.required else '?'}: {kind}{choices} ({self.help})"


_KIND_WORDS = {"texts": "list of strings", "time": "ISO 8601 time", "window": 'object {"from": time, "to": time}',
               "bool": "true|false"}
FILTER_KINDS = ("time", "window", "bool")


def _check(param: Param, value: Any) -> Any:
    name = param.name
    if param.kind in FILTER_KINDS:  # checked as the search API checks it; kept as given
        try:
            parse_filter({name: value})
        except FilterError as error:
            raise ToolArgumentError(str(error)) from None
        return value
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


def check_arguments(tool: str, params: tuple[Param, ...], arguments: Any) -> dict[str, Any]:
    """Validated keyword arguments for `tool` (defaults filled in, in the order of `params`);
    ToolArgumentError says what is wrong."""
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise ToolArgumentError("arguments must be a JSON object")
    by_name = {param.name: param for param in params}
    unknown = sorted(set(arguments) - set(by_name))
    if unknown:
        raise ToolArgumentError(f"unknown argument(s) {unknown} for {tool}; allowed: {list(by_name)}")
    parsed: dict[str, Any] = {}
    for name, param in by_name.items():
        value = arguments.get(name)
        if value is None:
            if param.required:
                raise ToolArgumentError(f"'{name}' is required for {tool}")
            if param.default is not None:
                parsed[name] = param.default
            continue
        parsed[name] = _check(param, value)
    return parsed
