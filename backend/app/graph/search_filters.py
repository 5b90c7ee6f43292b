"""What a graph search may be narrowed to, as one typed object, and how it becomes Graphiti's `SearchFilters`.

A `SearchFilter` holds what a request asks: relation names, entity labels, a source or target entity,
time windows on a fact's `valid_at` / `invalid_at` / `created_at`, an instant `as_of` and `current_only`.
`parse_filter` reads it from a JSON-like mapping (the search API and the report tools both), raising
`FilterError` naming the field; `graphiti_filters` maps it onto `SearchFilters`, which every part of the
first stage applies before it cuts to its limit (Graphiti's own queries, the search hook's keyword half and
the vector index's exact path: search_hook.py, vector_index.py), so the judge reads as many candidates of
the filtered set as it would of the whole graph.

Time semantics (all instants compared in UTC):
- a window `{"from": t1, "to": t2}` keeps facts whose time lies in [t1, t2]; a fact without that time is
  outside every window;
- `as_of` keeps facts valid then: `valid_at` unset or at or before it (a fact with no start is taken to
  hold from the beginning, as Graphiti's ingestion leaves `valid_at` unset when a text gives no date), and
  neither invalidated nor expired by then (`invalid_at` / `expired_at` unset or after it);
- `current_only` keeps facts neither invalidated nor expired now.

Graphiti ANDs the inner lists of a date filter and ORs the outer ones, and names each inner entry's
parameter by its place in the inner list alone (`valid_at_0`, ...): two outer lists whose entries at one
place carry different instants would share a parameter. Each field's conditions here are built as one
list of comparisons, plus at most one list holding only `IS NULL`, which has no parameter.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from typing import Any, Mapping

from graphiti_core.helpers import SAFE_CYPHER_IDENTIFIER_PATTERN
from graphiti_core.search.search_filters import ComparisonOperator, DateFilter, SearchFilters

from app.graph.fact_import import relation_name

MAX_FILTER_ITEMS = 50  # relation names or labels in one filter
MAX_ENTITY_CHARS = 256
WINDOW_FIELDS = ("valid_at", "invalid_at", "created_at")
# Every field a filter may hold, as requests spell them.
FILTER_FIELDS = ("relation_types", "entity_labels", "source", "target", *WINDOW_FIELDS, "as_of", "current_only")


class FilterError(ValueError):
    """A filter that cannot be read; `field` names the request's field."""

    def __init__(self, field_name: str, message: str):
        super().__init__(message)
        self.field = field_name


@dataclass(frozen=True)
class TimeWindow:
    start: datetime | None = None  # inclusive; None: open
    end: datetime | None = None  # inclusive; None: open


@dataclass(frozen=True)
class SearchFilter:
    """What a search is narrowed to; the default narrows nothing."""

    relation_types: tuple[str, ...] | None = None  # as stored: UPPER_SNAKE_CASE (fact_import.relation_name)
    entity_labels: tuple[str, ...] | None = None
    source: str | None = None  # an entity's name or uuid
    target: str | None = None
    valid_at: TimeWindow | None = None
    invalid_at: TimeWindow | None = None
    created_at: TimeWindow | None = None
    as_of: datetime | None = None
    current_only: bool = False

    @property
    def empty(self) -> bool:
        return self == SearchFilter()

    def describe(self) -> dict[str, Any]:
        """The filter as the API echoes it: only the fields set, times in ISO 8601."""
        out: dict[str, Any] = {}
        for item in fields(self):
            value = getattr(self, item.name)
            if value in (None, False):
                continue
            if isinstance(value, TimeWindow):
                value = {"from": _iso(value.start), "to": _iso(value.end)}
            elif isinstance(value, datetime):
                value = _iso(value)
            elif isinstance(value, tuple):
                value = list(value)
            out[item.name] = value
        return out


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def parse_instant(field_name: str, value: Any) -> datetime:
    """An ISO 8601 instant in UTC ("2024-05-01", "2024-05-01T10:00:00Z", "...+02:00"); no offset means UTC."""
    if not isinstance(value, str) or not value.strip():
        raise FilterError(field_name, f"'{field_name}' must be an ISO 8601 date or time, e.g. '2024-05-01T10:00:00Z'")
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise FilterError(field_name, f"'{field_name}' is not an ISO 8601 date or time: {value[:64]!r}") from None
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)).astimezone(timezone.utc)


def _window(field_name: str, value: Any) -> TimeWindow:
    if not isinstance(value, Mapping) or not value:
        raise FilterError(field_name, f"'{field_name}' must be an object like {{\"from\": iso, \"to\": iso}}")
    unknown = sorted(set(value) - {"from", "to"})
    if unknown:
        raise FilterError(field_name, f"'{field_name}' has unknown key(s) {unknown}; allowed: ['from', 'to']")
    start = parse_instant(f"{field_name}.from", value["from"]) if value.get("from") is not None else None
    end = parse_instant(f"{field_name}.to", value["to"]) if value.get("to") is not None else None
    if start is None and end is None:
        raise FilterError(field_name, f"'{field_name}' needs 'from', 'to' or both")
    if start and end and end < start:
        raise FilterError(field_name, f"'{field_name}' ends before it starts ('to' is before 'from')")
    return TimeWindow(start, end)


def _names(field_name: str, value: Any) -> list[str]:
    if isinstance(value, str):
        value = [value]  # one name is a list of one
    if not isinstance(value, list) or not value or len(value) > MAX_FILTER_ITEMS:
        raise FilterError(field_name, f"'{field_name}' must be a list of 1 to {MAX_FILTER_ITEMS} strings")
    if not all(isinstance(item, str) and item.strip() and len(item) <= 200 for item in value):
        raise FilterError(field_name, f"'{field_name}' entries must be non-empty strings of at most 200 characters")
    return [item.strip() for item in value]


def _relation_types(value: Any) -> tuple[str, ...]:
    # Stored names are normalised at import ('works for' -> 'WORKS_FOR'); a name asked is normalised alike.
    return tuple(dict.fromkeys(relation_name(name) for name in _names("relation_types", value)))


def _labels(value: Any) -> tuple[str, ...]:
    labels = _names("entity_labels", value)
    bad = [label for label in labels if not SAFE_CYPHER_IDENTIFIER_PATTERN.fullmatch(label)]
    if bad:  # labels go into the query as identifiers, so only identifiers are taken
        raise FilterError("entity_labels", f"'entity_labels' entries must be identifiers like 'Person' (got {bad[0]!r})")
    return tuple(dict.fromkeys(labels))


def _entity(field_name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise FilterError(field_name, f"'{field_name}' must be an entity's name or uuid")
    if len(value) > MAX_ENTITY_CHARS or "\x00" in value:
        raise FilterError(field_name, f"'{field_name}' must be at most {MAX_ENTITY_CHARS} characters, without NUL")
    return value.strip()


def parse_filter(source: Mapping[str, Any]) -> SearchFilter:
    """The filter fields of `source` (other keys are the caller's); FilterError names a bad one.
    A field given as null is left unset."""
    present = {name: source[name] for name in FILTER_FIELDS if source.get(name) is not None}
    current_only = present.get("current_only", False)
    if not isinstance(current_only, bool):
        raise FilterError("current_only", "'current_only' must be true or false")
    return SearchFilter(
        relation_types=_relation_types(present["relation_types"]) if "relation_types" in present else None,
        entity_labels=_labels(present["entity_labels"]) if "entity_labels" in present else None,
        source=_entity("source", present["source"]) if "source" in present else None,
        target=_entity("target", present["target"]) if "target" in present else None,
        **{name: _window(name, present[name]) for name in WINDOW_FIELDS if name in present},
        as_of=parse_instant("as_of", present["as_of"]) if "as_of" in present else None,
        current_only=current_only,
    )


# -- onto Graphiti's SearchFilters ----------------------------------------------------------------

_AFTER = ComparisonOperator.greater_than
_IS_NULL = DateFilter(comparison_operator=ComparisonOperator.is_null)


@dataclass
class _Conditions:
    """One date field's conditions: all `compared` hold, or (when `or_null`) the field is unset."""

    compared: list[DateFilter] = field(default_factory=list)
    or_null: bool = False
    any_set: bool = False

    def require(self, compared: list[DateFilter], or_null: bool) -> None:
        """AND these conditions in. A field that must be in a window is never unset, so a window
        drops the `or_null` alternative."""
        self.or_null = (self.or_null and or_null) if self.any_set else or_null
        self.compared += compared
        self.any_set = True

    def graphiti(self) -> list[list[DateFilter]] | None:
        if not self.any_set:
            return None
        return [self.compared, [_IS_NULL]] if self.or_null else [self.compared]


def _in_window(window: TimeWindow) -> list[DateFilter]:
    conditions = []
    if window.start:
        conditions.append(DateFilter(date=window.start, comparison_operator=ComparisonOperator.greater_than_equal))
    if window.end:
        conditions.append(DateFilter(date=window.end, comparison_operator=ComparisonOperator.less_than_equal))
    return conditions


def graphiti_filters(search_filter: SearchFilter, now: datetime, *, source_uuids: list[str] | None = None,
                     target_uuids: list[str] | None = None) -> SearchFilters:
    """Graphiti's SearchFilters for `search_filter`, with its source and target entities already
    resolved to uuids (`resolve_entities`); `now` is the instant `current_only` reads."""
    dates = {name: _Conditions() for name in ("valid_at", "invalid_at", "created_at", "expired_at")}
    for name in WINDOW_FIELDS:
        window = getattr(search_filter, name)
        if window is not None:
            dates[name].require(_in_window(window), or_null=False)
    if search_filter.as_of is not None:
        as_of = search_filter.as_of
        dates["valid_at"].require([DateFilter(date=as_of, comparison_operator=ComparisonOperator.less_than_equal)],
                                  or_null=True)
        for name in ("invalid_at", "expired_at"):
            dates[name].require([DateFilter(date=as_of, comparison_operator=_AFTER)], or_null=True)
    if search_filter.current_only:
        for name in ("invalid_at", "expired_at"):
            dates[name].require([DateFilter(date=now, comparison_operator=_AFTER)], or_null=True)
    return SearchFilters(
        edge_types=list(search_filter.relation_types) if search_filter.relation_types is not None else None,
        node_labels=list(search_filter.entity_labels) if search_filter.entity_labels is not None else None,
        edge_source_node_uuids=source_uuids,
        edge_target_node_uuids=target_uuids,
        **{name: conditions.graphiti() for name, conditions in dates.items()},
    )


def is_current(invalid_at: datetime | None, expired_at: datetime | None, now: datetime) -> bool:
    """Whether a fact still holds at `now`: neither invalidated nor expired by then."""
    return all(moment is None or _utc(moment) > now for moment in (invalid_at, expired_at))


def _utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


# -- what the filter reads in the graph -----------------------------------------------------------

class UnknownEntityError(LookupError):
    """A filter or centre names an entity the graph does not hold (`field`: the request's field)."""

    def __init__(self, field_name: str, value: str, graph_id: str):
        super().__init__(f"'{field_name}': graph {graph_id!r} holds no entity named or with uuid {value[:64]!r}")
        self.field = field_name


ENTITY_BY_UUID_QUERY = "MATCH (n:Entity {uuid: $value}) WHERE n.group_id = $graph_id RETURN n.uuid AS uuid"
ENTITY_BY_NAME_QUERY = "MATCH (n:Entity {name: $value}) WHERE n.group_id = $graph_id RETURN n.uuid AS uuid"


async def resolve_entity(driver, graph_id: str, field_name: str, value: str) -> list[str]:
    """The uuids of the graph's entity with this uuid, else of those with this exact name (names
    from a text can repeat); UnknownEntityError when there is none."""
    for query in (ENTITY_BY_UUID_QUERY, ENTITY_BY_NAME_QUERY):
        records, _, _ = await driver.execute_query(query, value=value, graph_id=graph_id, routing_="r")
        if records:
            return [record["uuid"] for record in records]
    raise UnknownEntityError(field_name, value, graph_id)


async def resolved_filters(driver, graph_id: str, search_filter: SearchFilter, now: datetime) -> SearchFilters:
    """Graphiti's SearchFilters for `search_filter` in this graph: its entities looked up."""
    ends = {}
    for name in ("source", "target"):
        value = getattr(search_filter, name)
        ends[name] = await resolve_entity(driver, graph_id, name, value) if value is not None else None
    return graphiti_filters(search_filter, now, source_uuids=ends["source"], target_uuids=ends["target"])
