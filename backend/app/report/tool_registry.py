"""The report tools, each defined once: its name, what the model reads about it, its parameters and
their checks, how it runs, what it asks (for the query memory and the agent's ready-made calls) and the
result type that renders its answer for the model (`to_text`) and for the API (`to_dict`).

The agent, the HTTP API and the report benchmark read the tools from `TOOLS`; nothing dispatches on a
tool's name. A tool runs on a `ReportTools` (tools.py), the service that reads the graph; this module
does not import it, so that the prompts and the planning, which tools.py itself uses, can read the
definitions too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from app.config import MAX_JUDGED_CANDIDATES
from app.graph.search_filters import MAX_FILTER_ITEMS, parse_filter
from app.report.results import InsightResult, InterviewResult, PanoramaResult, SearchResult, ToolResult
from app.report.tool_args import Param, UnknownToolError, check_arguments

# (the ReportTools service, graph id, checked arguments) -> the tool's result
ToolRun = Callable[[Any, str, dict[str, Any]], ToolResult]
# (a section's question, its subject) -> the arguments of a call asking that question
QuestionCall = Callable[[str, str], dict[str, Any]]


@dataclass(frozen=True)
class ReportTool:
    name: str
    description: str  # what the agent's prompt says the tool does
    parameters: tuple[Param, ...]
    result_type: type[ToolResult]
    run: ToolRun
    asks: tuple[str, ...]  # the arguments whose text is what a call asks, the question first
    question_call: QuestionCall
    abbreviation: str  # the tool's letter in the benchmark's tables
    advice: str | None = None  # why a section's question calls for this tool, for a tool that is recommended

    def check_arguments(self, arguments: Any) -> dict[str, Any]:
        """Validated keyword arguments for `run` (defaults filled in); ToolArgumentError says what is wrong."""
        return check_arguments(self.name, self.parameters, arguments)

    def takes(self, name: str) -> bool:
        return any(param.name == name for param in self.parameters)

    def describe(self, hidden: tuple[str, ...] = ()) -> str:
        """The tool's line in the agent's prompt, without the parameters named in `hidden`."""
        arguments = ", ".join(param.describe() for param in self.parameters if param.name not in hidden)
        return f"- {self.name}: {self.description}. Arguments: {arguments}"

    def api_answer(self, result: ToolResult) -> dict[str, Any]:
        """The HTTP API's answer: the result as data, named by its tool, and the text the model reads."""
        return {"tool": self.name, "result": {"tool": self.name, **result.to_dict()}, "text": result.to_text()}

    def asked(self, arguments: dict[str, Any]) -> str:
        """What a call with `arguments` asks, as one text: its `asks` arguments in order, lists joined."""
        values = (arguments.get(name) or "" for name in self.asks)
        return " ".join(value if isinstance(value, str) else " ".join(value) for value in values).strip()


_MAX_CHARS = Param("max_chars", "int", "size budget of the text answer", default=None, minimum=500, maximum=50_000)
_CANDIDATES = Param("candidates", "int", "first-stage candidates the reranker judges for the query (default: "
                    "RERANKER_CANDIDATES per fact wanted)", default=None, minimum=1,
                    maximum=MAX_JUDGED_CANDIDATES)


# What every tool's searches may be narrowed to (app/graph/search_filters.py has their meaning).
FILTER_PARAMS = (
    Param("as_of", "time", "only facts that held at this time: what was known to be true then"),
    Param("current_only", "bool", "leave out facts no longer true (invalidated or expired)"),
    Param("relation_types", "texts", "only facts of these relations", maximum=MAX_FILTER_ITEMS, max_chars=200),
    Param("valid_at", "window", "only facts that became true in this window"),
    Param("invalid_at", "window", "only facts that stopped being true in this window"),
    Param("created_at", "window", "only facts recorded in this window"),
)
FILTER_NAMES = tuple(param.name for param in FILTER_PARAMS)


def with_filters(arguments: dict[str, Any]) -> dict[str, Any]:
    """A tool's checked arguments as its method takes them: the filter arguments as one `filters`."""
    given = {name: arguments[name] for name in FILTER_NAMES if name in arguments}
    rest = {name: value for name, value in arguments.items() if name not in FILTER_NAMES}
    return {**rest, "filters": parse_filter(given)} if given else rest


def _query_call(part: str, subject: str) -> dict[str, Any]:
    return {"query": part}


SEARCH_GRAPH = ReportTool(
    name="search_graph",
    description="graph search: facts, entities and relations relevant to a query, best first",
    parameters=(
        Param("query", "text", "what to look for", required=True, max_chars=1000),
        Param("limit", "int", "how many facts and entities at most", default=10, maximum=50),
        Param("scope", "choice", "what to search", default="both", choices=("edges", "nodes", "both")),
        Param("neighbourhood", "int", "the top entities whose facts (and their neighbours') the reranker "
              "judges too; 0: the search's own hits only", default=0, minimum=0, maximum=10),
        _CANDIDATES,
        _MAX_CHARS,
        *FILTER_PARAMS,
    ),
    result_type=SearchResult,
    run=lambda tools, graph_id, arguments: tools.search_graph(graph_id, **with_filters(arguments)),
    asks=("query",),
    question_call=_query_call,
    abbreviation="S",
)

INSIGHT_FORGE = ReportTool(
    name="insight_forge",
    description="deep retrieval: splits a question into sub-queries, merges their facts, "
                "adds entity summaries and relationship chains",
    parameters=(
        Param("question", "text", "the question to dig into", required=True, max_chars=1000),
        Param("max_sub_queries", "int", "sub-queries to search, the question included", default=3, maximum=5),
        Param("limit", "int", "facts per sub-query", default=8, maximum=30),
        _CANDIDATES,
        _MAX_CHARS,
        *FILTER_PARAMS,
    ),
    result_type=InsightResult,
    run=lambda tools, graph_id, arguments: tools.insight_forge(graph_id, **with_filters(arguments)),
    asks=("question",),
    question_call=lambda part, subject: {"question": part},
    abbreviation="I",
    advice="this part asks why or asks several things: start with insight_forge",
)

PANORAMA_SEARCH = ReportTool(
    name="panorama_search",
    description="wide view: every entity and fact, current and historical (no longer true) apart, "
                "the relevant ones first",
    parameters=(
        Param("query", "text", "what the overview is about", required=True, max_chars=1000),
        Param("limit", "int", "how many search hits mark facts as relevant", default=30, maximum=100),
        _MAX_CHARS,
        *FILTER_PARAMS,
    ),
    result_type=PanoramaResult,
    run=lambda tools, graph_id, arguments: tools.panorama_search(graph_id, **with_filters(arguments)),
    asks=("query",),
    question_call=_query_call,
    abbreviation="P",
)

INTERVIEW_ENTITIES = ReportTool(
    name="interview_entities",
    description="interviews the most relevant entities as people; they answer only from their facts",
    parameters=(
        Param("topic", "text", "what the interview is about; it picks the entities", required=True, max_chars=500),
        Param("questions", "texts", "questions to ask each entity", required=True, maximum=5, max_chars=500),
        Param("entities", "texts", "entity names to interview (default: the most relevant)", maximum=5,
              max_chars=256),
        Param("max_entities", "int", "how many entities to interview", default=3, maximum=5),
        Param("limit", "int", "search hits that pick the entities and rank their facts", default=20, maximum=50),
        _MAX_CHARS,
        *FILTER_PARAMS,
    ),
    result_type=InterviewResult,
    run=lambda tools, graph_id, arguments: tools.interview_entities(graph_id, **with_filters(arguments)),
    # Its questions and the entities named are part of what it asks: another question is a new interview.
    asks=("topic", "questions", "entities"),
    question_call=lambda part, subject: {"topic": subject or part, "questions": [part]},
    abbreviation="V",
    advice="this part asks who did or said what: interview_entities gives their stance",
)

# In the order the agent's prompt lists them.
TOOLS: dict[str, ReportTool] = {tool.name: tool for tool in (SEARCH_GRAPH, INSIGHT_FORGE, PANORAMA_SEARCH,
                                                             INTERVIEW_ENTITIES)}
TOOL_NAMES = tuple(TOOLS)


def tool_named(name: str) -> ReportTool:
    """The tool called `name`; UnknownToolError (listing the tools) for any other name."""
    tool = TOOLS.get(name)
    if tool is None:
        raise UnknownToolError(f"unknown tool {name!r}; tools: {list(TOOL_NAMES)}")
    return tool


def describe_tools(hidden: tuple[str, ...] = ("max_chars",)) -> str:
    """The tools and their arguments, one line each, for the agent's system prompt."""
    return "\n".join(tool.describe(hidden) for tool in TOOLS.values())
