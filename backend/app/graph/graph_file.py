"""A graph as a JSONL file: what one line holds, its canonical form, and the checks a file passes
before anything of it is written.

The first line is a header (`kind: "header"`, format, version, the graph's id, and how many
entities, facts and episodes follow); then one object per line with a `kind`: every entity, then
every fact, then every episode, each kind ordered by uuid. Keys are sorted, times are ISO 8601 with
six fractional digits (graph/timestamps.py `iso`), entity labels are sorted and an episode's
`mentions` (the entities it names) too. Embeddings are not in the file: they belong to the embedder
that made them, and the graph they land in embeds the names and facts again with its own.

Exact round trip: a file the checks accept is written so that exporting the graph gives the same
bytes back. So the checks refuse what a database would store differently from what the file says:
an unknown key (it would be dropped), a time not in the canonical form, a null attribute (a
database drops it), a list mixing types (Neo4j refuses it), an integer beyond 64 bits.
"""

from __future__ import annotations

import json
import math
import re
import uuid as uuid_module
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterable, Iterator

from graphiti_core.nodes import EpisodeType

from app.graph.text_rules import first_invalid_text
from app.graph.timestamps import iso

FORMAT = "mirofish-graph"
VERSION = 1
# Entities, facts and episodes together in one import, which runs within the request: 2,000 took about
# 60 s on FalkorDB on a busy two-core machine (embedding most of it), so this many stays well inside
# the import's 600 s deadline.
MAX_RECORDS = 10_000
MAX_JSON_DEPTH = 8  # deeper than any record's own nesting (attributes hold lists at most)
MAX_ID_CHARS = 64
MAX_TEXT_CHARS = 200_000  # an episode's content; names, facts and summaries are far shorter in practice
MAX_ATTRIBUTES = 64
MAX_LABELS = 16
# What an imported uuid becomes when `new_uuids` asks for fresh ones: the same old uuid in the same
# graph gives the same new one, so references between the file's records stay intact.
UUID_NAMESPACE = uuid_module.UUID("a3c5e0b2-6f4d-4e8a-9c1b-7d2e5f8a0b63")

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_JSON_STRUCTURE = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')
_SOURCES = tuple(kind.value for kind in EpisodeType)

# Each kind's keys: (name, check). Properties the databases store under these names are not
# attributes; every other property of an entity or a fact is one.
ENTITY_PROPERTIES = frozenset({"uuid", "name", "group_id", "summary", "created_at", "name_embedding", "labels"})
FACT_PROPERTIES = frozenset({"uuid", "group_id", "source_node_uuid", "target_node_uuid", "name", "fact",
                             "fact_embedding", "episodes", "created_at", "expired_at", "valid_at", "invalid_at",
                             "reference_time"})


class GraphFileError(ValueError):
    """A line of the file is not what it must be; `line` is its 1-based number (0: the file as a whole)."""

    def __init__(self, line: int, message: str):
        super().__init__(f"line {line}: {message}" if line else message)
        self.line = line


class GraphFileTooLargeError(GraphFileError):
    """More records than one import takes (413)."""


@dataclass
class GraphFile:
    """A whole graph: its records in canonical form, each a dict as its line holds it."""

    graph_id: str
    entities: list[dict] = field(default_factory=list)
    facts: list[dict] = field(default_factory=list)
    episodes: list[dict] = field(default_factory=list)

    def header(self) -> dict:
        return {"kind": "header", "format": FORMAT, "version": VERSION, "graph_id": self.graph_id,
                "entities": len(self.entities), "facts": len(self.facts), "episodes": len(self.episodes),
                "embeddings": "excluded"}

    def counts(self) -> dict:
        return {"entities": len(self.entities), "facts": len(self.facts), "episodes": len(self.episodes)}

    def lines(self) -> Iterator[str]:
        """The file, one line each (newline included), in canonical order."""
        yield dump_line(self.header())
        for records in (self.entities, self.facts, self.episodes):
            for record in sorted(records, key=lambda r: r["uuid"]):
                yield dump_line(record)


def dump_line(record: dict) -> str:
    return json.dumps(record, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False) + "\n"


# --- reading what a database holds into records ----------------------------------------------------


def json_value(value: Any) -> Any:
    """A stored property as the file writes it: times in the one ISO form, lists item by item."""
    if isinstance(value, (list, tuple)):
        return [json_value(item) for item in value]
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, datetime) or hasattr(value, "to_native"):
        return iso(value)
    return str(value)


def entity_record(props: dict, labels: list[str]) -> dict:
    return {
        "kind": "entity", "uuid": props["uuid"], "name": props.get("name") or "",
        "labels": sorted({label for label in labels if label != "Entity"}),
        "summary": props.get("summary") or "", "created_at": iso(props.get("created_at")),
        "attributes": _attributes_of(props, ENTITY_PROPERTIES),
    }


def fact_record(props: dict, source_uuid: str, target_uuid: str) -> dict:
    return {
        "kind": "fact", "uuid": props["uuid"], "source_uuid": source_uuid, "target_uuid": target_uuid,
        "relation": props.get("name") or "", "fact": props.get("fact") or "",
        "valid_at": iso(props.get("valid_at")), "invalid_at": iso(props.get("invalid_at")),
        "expired_at": iso(props.get("expired_at")), "created_at": iso(props.get("created_at")),
        "reference_time": iso(props.get("reference_time")),
        "episodes": [str(item) for item in props.get("episodes") or []],
        "attributes": _attributes_of(props, FACT_PROPERTIES),
    }


def episode_record(props: dict, mentions: Iterable[str]) -> dict:
    return {
        "kind": "episode", "uuid": props["uuid"], "name": props.get("name") or "",
        "content": props.get("content") or "", "source": props.get("source") or "text",
        "source_description": props.get("source_description") or "",
        "valid_at": iso(props.get("valid_at")), "created_at": iso(props.get("created_at")),
        "entity_edges": [str(item) for item in props.get("entity_edges") or []],
        "mentions": sorted(set(mentions)),
    }


def _attributes_of(props: dict, known: frozenset[str]) -> dict:
    return {key: json_value(value) for key, value in sorted(props.items())
            if key not in known and value is not None}


# --- parsing a file -----------------------------------------------------------------------------


def parse_graph_file(text: str, max_records: int = MAX_RECORDS) -> GraphFile:
    """The file's records, checked; GraphFileError naming the first line that is wrong."""
    lines = text.removeprefix("\ufeff").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise GraphFileError(0, "the file is empty: its first line must be the header")
    header = _header(_load(lines[0], 1))
    graph = GraphFile(graph_id=header["graph_id"])
    seen: dict[str, int] = {}
    order = {"entity": 0, "fact": 1, "episode": 2}
    last_kind = 0
    for number, line in enumerate(lines[1:], start=2):
        if len(seen) >= max_records:
            raise GraphFileTooLargeError(number, f"the file holds more than {max_records} records, "
                                                 "more than one import takes")
        record = _load(line, number)
        kind = record.get("kind")
        if kind not in order:
            raise GraphFileError(number, f"'kind' must be one of {list(order)} (got {kind!r})")
        if order[kind] < last_kind:
            raise GraphFileError(number, "records go entities first, then facts, then episodes")
        last_kind = order[kind]
        checked = _CHECKS[kind](record, number)
        if checked["uuid"] in seen:
            raise GraphFileError(number, f"uuid {checked['uuid']!r} is already used on line {seen[checked['uuid']]}")
        seen[checked["uuid"]] = number
        {"entity": graph.entities, "fact": graph.facts, "episode": graph.episodes}[kind].append(checked)
    _check_references(graph, seen)
    for key, records in graph.counts().items():
        if header[key] != records:
            raise GraphFileError(0, f"the header says {header[key]} {key} but the file holds {records}"
                                    " (a file cut short?)")
    return graph


def _load(line: str, number: int) -> dict:
    if not line.strip():
        raise GraphFileError(number, "empty line")
    if _depth(line) > MAX_JSON_DEPTH:  # before json.loads: see api/validation.json_depth
        raise GraphFileError(number, f"nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        record = json.loads(line, parse_constant=_no_constant)
    except ValueError as error:
        raise GraphFileError(number, f"not valid JSON ({error})") from None
    if not isinstance(record, dict):
        raise GraphFileError(number, "must be a JSON object")
    problem = first_invalid_text(record)
    if problem:
        raise GraphFileError(number, problem)
    return record


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def _depth(line: str) -> int:
    depth = deepest = 0
    for match in _JSON_STRUCTURE.finditer(line):
        token = match.group()
        depth += 1 if token in "[{" else -1 if token in "]}" else 0
        deepest = max(deepest, depth)
    return deepest


def _header(record: dict) -> dict:
    if record.get("kind") != "header":
        raise GraphFileError(1, "the first line must be the header ({\"kind\": \"header\", ...})")
    if record.get("format") != FORMAT or record.get("version") != VERSION:
        raise GraphFileError(1, f"unknown format: expected format {FORMAT!r} version {VERSION}")
    for key in ("entities", "facts", "episodes"):
        if isinstance(record.get(key), bool) or not isinstance(record.get(key), int) or record[key] < 0:
            raise GraphFileError(1, f"'{key}' must be a count (a whole number, 0 or more)")
    if not isinstance(record.get("graph_id"), str):
        raise GraphFileError(1, "'graph_id' must be a string")
    return record


class _Record:
    """One record's checks, each naming the line and the key on failure."""

    def __init__(self, record: dict, line: int, keys: tuple[str, ...]):
        self.record, self.line = record, line
        unknown = sorted(set(record) - set(keys) - {"kind"})
        if unknown:
            self.fail(f"unknown keys {unknown} (a {record['kind']} has {sorted(keys)})")
        missing = sorted(set(keys) - set(record))
        if missing:
            self.fail(f"missing keys {missing}")

    def fail(self, message: str):
        raise GraphFileError(self.line, message)

    def text(self, key: str, *, max_chars: int = MAX_TEXT_CHARS, non_empty: bool = False) -> str:
        value = self.record[key]
        if not isinstance(value, str):
            self.fail(f"'{key}' must be a string")
        if non_empty and not value.strip():
            self.fail(f"'{key}' must not be empty")
        if len(value) > max_chars:
            self.fail(f"'{key}' is longer than {max_chars} characters")
        if "\x00" in value:
            self.fail(f"'{key}' contains a NUL character")
        return value

    def uuid(self, key: str) -> str:
        return self.text(key, max_chars=MAX_ID_CHARS, non_empty=True)

    def uuids(self, key: str, *, sort: bool = False) -> list[str]:
        value = self.record[key]
        if not isinstance(value, list) or not all(isinstance(item, str) and item.strip() and
                                                  len(item) <= MAX_ID_CHARS for item in value):
            self.fail(f"'{key}' must be a list of uuids")
        if sort and value != sorted(set(value)):
            self.fail(f"'{key}' must be sorted and without repeats")
        return value

    def time(self, key: str, *, required: bool = False) -> str | None:
        value = self.record[key]
        if value is None and not required:
            return None
        if not isinstance(value, str):
            self.fail(f"'{key}' must be an ISO 8601 time" + ("" if required else " or null"))
        try:
            canonical = iso(datetime.fromisoformat(value))
        except ValueError:
            self.fail(f"'{key}' is not an ISO 8601 time: {value!r}")
        if canonical != value:
            self.fail(f"'{key}' must be written {canonical!r} (six fractional digits), as an export writes it")
        return value

    def labels(self, key: str) -> list[str]:
        value = self.record[key]
        if not isinstance(value, list) or len(value) > MAX_LABELS or not all(
                isinstance(label, str) and _IDENTIFIER.fullmatch(label) and label != "Entity" for label in value):
            self.fail(f"'{key}' must be a list of at most {MAX_LABELS} identifiers like 'Person' "
                      "('Entity' is implied)")
        if value != sorted(set(value)):
            self.fail(f"'{key}' must be sorted and without repeats")
        return value

    def attributes(self, key: str, reserved: frozenset[str]) -> dict:
        value = self.record[key]
        if not isinstance(value, dict) or len(value) > MAX_ATTRIBUTES:
            self.fail(f"'{key}' must be an object with at most {MAX_ATTRIBUTES} keys")
        for name, item in value.items():
            if not _IDENTIFIER.fullmatch(name) or name in reserved:
                self.fail(f"attribute {name!r} must be an identifier and not one of {sorted(reserved)}")
            problem = _storable(item)
            if problem:
                self.fail(f"attribute {name!r} {problem}")
        return value


def _storable(value: Any) -> str | None:
    """Why a database would not store `value` as given, or None."""
    if value is None:
        return "is null: a database stores no property for it (leave it out)"
    if isinstance(value, list):
        kinds = {_scalar_kind(item) for item in value}
        if None in kinds or len(kinds) > 1:
            return "must be a list of strings, numbers or booleans, all of one type"
        return next((_storable(item) for item in value if _storable(item)), None)
    if _scalar_kind(value) is None:
        return "must be a string, number, boolean or a list of them"
    if isinstance(value, float) and not math.isfinite(value):
        return "must be a finite number"
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
        return "does not fit in 64 bits"
    if isinstance(value, str) and "\x00" in value:
        return "contains a NUL character"
    return None


def _scalar_kind(value: Any) -> str | None:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number" if not isinstance(value, float) else "float"
    return "str" if isinstance(value, str) else None


def _entity(record: dict, line: int) -> dict:
    check = _Record(record, line, ("uuid", "name", "labels", "summary", "created_at", "attributes"))
    return {"kind": "entity", "uuid": check.uuid("uuid"), "name": check.text("name", max_chars=1000, non_empty=True),
            "labels": check.labels("labels"), "summary": check.text("summary"),
            "created_at": check.time("created_at", required=True),
            "attributes": check.attributes("attributes", ENTITY_PROPERTIES)}


def _fact(record: dict, line: int) -> dict:
    check = _Record(record, line, ("uuid", "source_uuid", "target_uuid", "relation", "fact", "valid_at",
                                   "invalid_at", "expired_at", "created_at", "reference_time", "episodes",
                                   "attributes"))
    return {"kind": "fact", "uuid": check.uuid("uuid"), "source_uuid": check.uuid("source_uuid"),
            "target_uuid": check.uuid("target_uuid"),
            "relation": check.text("relation", max_chars=256, non_empty=True),
            "fact": check.text("fact", non_empty=True),
            **{key: check.time(key) for key in ("valid_at", "invalid_at", "expired_at", "reference_time")},
            "created_at": check.time("created_at", required=True), "episodes": check.uuids("episodes"),
            "attributes": check.attributes("attributes", FACT_PROPERTIES)}


def _episode(record: dict, line: int) -> dict:
    check = _Record(record, line, ("uuid", "name", "content", "source", "source_description", "valid_at",
                                   "created_at", "entity_edges", "mentions"))
    if record["source"] not in _SOURCES:
        check.fail(f"'source' must be one of {list(_SOURCES)}")
    return {"kind": "episode", "uuid": check.uuid("uuid"), "name": check.text("name", max_chars=1000),
            "content": check.text("content"), "source": record["source"],
            "source_description": check.text("source_description", max_chars=1000),
            "valid_at": check.time("valid_at", required=True), "created_at": check.time("created_at", required=True),
            "entity_edges": check.uuids("entity_edges"), "mentions": check.uuids("mentions", sort=True)}


_CHECKS = {"entity": _entity, "fact": _fact, "episode": _episode}


def _check_references(graph: GraphFile, lines: dict[str, int]) -> None:
    """A fact's ends and an episode's mentions are entities of the file: an edge needs both its
    nodes. A fact's `episodes` and an episode's `entity_edges` are lists the file keeps as given."""
    entities = {entity["uuid"] for entity in graph.entities}
    for fact in graph.facts:
        for key in ("source_uuid", "target_uuid"):
            if fact[key] not in entities:
                raise GraphFileError(lines[fact["uuid"]], f"'{key}' {fact[key]!r} is no entity of the file")
    for episode in graph.episodes:
        unknown = [uuid for uuid in episode["mentions"] if uuid not in entities]
        if unknown:
            raise GraphFileError(lines[episode["uuid"]], f"'mentions' names {unknown[0]!r}, no entity of the file")


def with_new_uuids(graph: GraphFile, graph_id: str) -> GraphFile:
    """The same graph under fresh uuids (one per old uuid and target graph), every reference kept."""
    def new(old: str) -> str:
        return str(uuid_module.uuid5(UUID_NAMESPACE, json.dumps([graph_id, old])))

    return GraphFile(
        graph_id=graph.graph_id,
        entities=[{**e, "uuid": new(e["uuid"])} for e in graph.entities],
        facts=[{**f, "uuid": new(f["uuid"]), "source_uuid": new(f["source_uuid"]),
                "target_uuid": new(f["target_uuid"]), "episodes": [new(u) for u in f["episodes"]]}
               for f in graph.facts],
        episodes=[{**e, "uuid": new(e["uuid"]), "entity_edges": [new(u) for u in e["entity_edges"]],
                   "mentions": sorted(new(u) for u in e["mentions"])} for e in graph.episodes],
    )
