"""Import facts given as data: entities and edges written with embeddings and no LLM call.

`add_triplet` is not LLM-free (it may call the LLM for timestamps and dedupe), so the import
builds EntityNode/EntityEdge objects itself and bulk-writes them. All input is validated
before anything is written; if the write fails part way, what this import wrote is deleted
again, so a failed import leaves the graph as it was.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from graphiti_core.edges import EntityEdge
from graphiti_core.nodes import EntityNode
from graphiti_core.utils.bulk_utils import add_nodes_and_edges_bulk

from app.graph.store import cypher_rows, require_graph

logger = logging.getLogger(__name__)

MAX_TEXT_CHARS = {"source": 256, "target": 256, "relation": 128, "fact": 4000,
                  "source_summary": 2000, "target_summary": 2000}
MAX_LABELS = 8
_LABEL = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
_METADATA_KEY = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
_RESERVED_KEYS = {"uuid", "name", "fact", "group_id", "episodes", "created_at", "expired_at", "valid_at",
                  "invalid_at", "reference_time", "fact_embedding", "source_node_uuid", "target_node_uuid"}


class FactValidationError(ValueError):
    """One fact is malformed; `position` is its 1-based index (or line number in a JSONL upload)."""

    def __init__(self, position: int, message: str, unit: str = "fact"):
        super().__init__(f"{unit} {position}: {message}")
        self.position = position


class ImportFailedError(RuntimeError):
    pass


@dataclass
class FactInput:
    source: str
    target: str
    relation: str
    fact: str
    source_summary: str = ""
    target_summary: str = ""
    source_labels: list[str] = field(default_factory=list)
    target_labels: list[str] = field(default_factory=list)
    valid_at: datetime | None = None
    invalid_at: datetime | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


def _text(item: dict, key: str, required: bool) -> str:
    value = item.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"'{key}' must be a string" if value is not None else f"'{key}' is required")
    if required and not value.strip():
        raise ValueError(f"'{key}' must not be empty")
    if len(value) > MAX_TEXT_CHARS[key]:
        raise ValueError(f"'{key}' is longer than {MAX_TEXT_CHARS[key]} characters")
    if "\x00" in value:
        raise ValueError(f"'{key}' contains a NUL character")
    return value.strip() if key in ("source", "target", "relation") else value


def _labels(item: dict, key: str) -> list[str]:
    value = item.get(key) or []
    if not isinstance(value, list) or len(value) > MAX_LABELS:
        raise ValueError(f"'{key}' must be a list of at most {MAX_LABELS} labels")
    for label in value:
        if not isinstance(label, str) or not _LABEL.fullmatch(label):
            raise ValueError(f"'{key}' entries must be identifiers like 'Person' (got {label!r})")
    return list(dict.fromkeys(value))


def _time(item: dict, key: str) -> datetime | None:
    value = item.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"'{key}' must be an ISO-8601 string")
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"'{key}' is not ISO-8601: {value!r}") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def _metadata(item: dict) -> dict[str, Any]:
    value = item.get("metadata") or {}
    if not isinstance(value, dict) or len(value) > 16:
        raise ValueError("'metadata' must be an object with at most 16 keys")
    for key, entry in value.items():
        if not _METADATA_KEY.fullmatch(key) or key in _RESERVED_KEYS:
            raise ValueError(f"metadata key {key!r} must be lower_snake_case and not a reserved name")
        if not isinstance(entry, (str, int, float, bool)) or (isinstance(entry, str) and len(entry) > 512):
            raise ValueError(f"metadata value for {key!r} must be a short string, number or boolean")
        _check_storable(key, entry)
    return dict(value)


def _check_storable(key: str, entry: Any) -> None:
    """Values the database would reject mid-import (NaN, Infinity: JSON bodies may carry them),
    clamp silently (integers beyond 64 bits) or strip (NUL) are refused up front."""
    if isinstance(entry, float) and not math.isfinite(entry):
        raise ValueError(f"metadata value for {key!r} must be a finite number")
    if isinstance(entry, int) and not isinstance(entry, bool) and not -(2**63) <= entry < 2**63:
        raise ValueError(f"metadata value for {key!r} does not fit in 64 bits")
    if isinstance(entry, str) and "\x00" in entry:
        raise ValueError(f"metadata value for {key!r} contains a NUL character")


def parse_fact(item: Any, position: int, unit: str = "fact") -> FactInput:
    if not isinstance(item, dict):
        raise FactValidationError(position, "must be a JSON object", unit)
    try:
        fact = FactInput(
            source=_text(item, "source", True),
            target=_text(item, "target", True),
            relation=_text(item, "relation", True),
            fact=_text(item, "fact", True),
            source_summary=_text(item, "source_summary", False),
            target_summary=_text(item, "target_summary", False),
            source_labels=_labels(item, "source_labels"),
            target_labels=_labels(item, "target_labels"),
            valid_at=_time(item, "valid_at"),
            invalid_at=_time(item, "invalid_at"),
            metadata=_metadata(item),
        )
    except ValueError as error:
        raise FactValidationError(position, str(error), unit) from None
    if fact.valid_at and fact.invalid_at and fact.invalid_at < fact.valid_at:
        raise FactValidationError(position, "'invalid_at' is before 'valid_at'", unit)
    return fact


def parse_facts(items: Any) -> list[FactInput]:
    if not isinstance(items, list) or not items:
        raise ValueError("'facts' must be a non-empty list")
    return [parse_fact(item, position) for position, item in enumerate(items, start=1)]


def _relation_name(relation: str) -> str:
    """Graphiti names edges in UPPER_SNAKE_CASE ('works for' -> 'WORKS_FOR')."""
    return re.sub(r"[^A-Za-z0-9]+", "_", relation).strip("_").upper() or "RELATES_TO"


async def _existing_entities(driver, graph_id: str, names: list[str]) -> dict[str, str]:
    # UNWIND + equality, not `n.name IN $names`: FalkorDB 1.4.1 crashes (SIGSEGV) on an indexed
    # IN-filter whose list holds a full-text stopword, i.e. an entity called "The" or "it".
    rows = await cypher_rows(
        driver,
        "UNWIND $names AS wanted MATCH (n:Entity {name: wanted}) WHERE n.group_id = $graph_id "
        "RETURN n.name AS name, n.uuid AS uuid",
        graph_id=graph_id, names=names,
    )
    return {row["name"]: row["uuid"] for row in rows}


def _new_entities(facts: list[FactInput], graph_id: str, existing: dict[str, str], now) -> dict[str, EntityNode]:
    created: dict[str, EntityNode] = {}
    for fact in facts:
        for name, summary, labels in (
            (fact.source, fact.source_summary, fact.source_labels),
            (fact.target, fact.target_summary, fact.target_labels),
        ):
            if name in existing:
                continue  # existing entities are never rewritten, so a failed import cannot damage them
            node = created.get(name)
            if node is None:
                created[name] = EntityNode(name=name, group_id=graph_id, summary=summary,
                                           labels=list(labels), created_at=now)
            else:
                node.summary = node.summary or summary
                node.labels = list(dict.fromkeys(node.labels + labels))
    return created


async def import_facts(runtime, graph_id: str, facts: list[FactInput]) -> dict:
    """Write facts to one graph; answer {'imported', 'entities', 'entities_created'}."""
    await require_graph(runtime, graph_id)
    driver = runtime.driver_for(graph_id)
    embedder = runtime.graphiti.embedder
    now = datetime.now(timezone.utc)
    names = list(dict.fromkeys(name for fact in facts for name in (fact.source, fact.target)))
    existing = await _existing_entities(driver, graph_id, names)
    created = _new_entities(facts, graph_id, existing, now)
    uuid_of = {**existing, **{name: node.uuid for name, node in created.items()}}
    edges = [
        EntityEdge(
            group_id=graph_id,
            source_node_uuid=uuid_of[fact.source],
            target_node_uuid=uuid_of[fact.target],
            name=_relation_name(fact.relation),
            fact=fact.fact,
            episodes=[],
            created_at=now,
            valid_at=fact.valid_at,
            invalid_at=fact.invalid_at,
            expired_at=now if fact.invalid_at and fact.invalid_at <= now else None,
            attributes=fact.metadata,
        )
        for fact in facts
    ]
    # One batch per kind: far faster than Graphiti's one-embedding-per-object path.
    nodes = list(created.values())
    for node, vector in zip(nodes, await embedder.create_batch([n.name.replace("\n", " ") for n in nodes])):
        node.name_embedding = vector
    for edge, vector in zip(edges, await embedder.create_batch([e.fact.replace("\n", " ") for e in edges])):
        edge.fact_embedding = vector
    try:
        await add_nodes_and_edges_bulk(driver, [], [], nodes, edges, embedder)
    except Exception as error:
        await _undo(driver, [n.uuid for n in nodes], [e.uuid for e in edges])
        logger.error("Import into %s failed (%s); nothing was kept", graph_id, type(error).__name__)
        raise ImportFailedError(f"import failed and was rolled back: {type(error).__name__}") from error
    return {"imported": len(edges), "entities": len(names), "entities_created": len(nodes)}


async def _undo(driver, node_uuids: list[str], edge_uuids: list[str]) -> None:
    await cypher_rows(driver, "MATCH ()-[e:RELATES_TO]->() WHERE e.uuid IN $uuids DELETE e", uuids=edge_uuids)
    await cypher_rows(driver, "MATCH (n:Entity) WHERE n.uuid IN $uuids DETACH DELETE n", uuids=node_uuids)
