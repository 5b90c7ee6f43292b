"""A recording Neo4j for tests: graphiti's real `Neo4jDriver` with its network client replaced.

This is a test double of the database driver, kept for faults a real server cannot be made to show on
demand (the suite's real Neo4j runs everything else: test_neo4j_server.py). Everything above the wire is the
real code: the app's Cypher, graphiti's Neo4j queries and operations classes, `Neo4jDriver`'s own
`execute_query`/`session`/`transaction`/`close`. Only `neo4j.AsyncDriver` (the Bolt client) is
stood in for: it records every query with its parameters, database and transaction, and answers
with the rows a test scripts. What a real server would do with the Cypher is checked on the real
local Neo4j, not here.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from graphiti_core.driver.neo4j_driver import Neo4jDriver
from neo4j import EagerResult, Record

Answer = Callable[[str, dict], list[dict]]


@dataclass
class Call:
    query: str
    params: dict
    database: str | None
    transaction: int | None = None  # None: one auto-committed query (execute_query, session.run)
    outcome: str = "auto-commit"  # explicit transactions: open -> committed | rolled back

    def normalized(self) -> str:
        return " ".join(self.query.split())


class _Result:
    """What `run` answers: the rows, readable the ways graphiti and the app read them."""

    def __init__(self, rows: list[dict]):
        self._records = [Record(row) for row in rows]

    async def data(self) -> list[dict]:
        return [dict(record) for record in self._records]

    async def single(self):
        return self._records[0] if self._records else None

    async def consume(self) -> None:
        return None

    def __aiter__(self):
        return self._iterate()

    async def _iterate(self):
        for record in self._records:
            yield record


class RecordingTransaction:
    def __init__(self, client: "RecordingClient", database: str | None):
        self._client, self._database = client, database
        self.id = next(client.transaction_ids)
        self._calls: list[Call] = []

    async def run(self, query: str, parameters: dict | None = None, **kwparameters) -> _Result:
        call = Call(query, {**(parameters or {}), **kwparameters}, self._database, self.id, "open")
        self._calls.append(call)
        return _Result(self._client.respond(call))

    async def commit(self) -> None:
        self._end("committed")

    async def rollback(self) -> None:
        self._end("rolled back")

    def _end(self, outcome: str) -> None:
        for call in self._calls:
            call.outcome = outcome


class RecordingSession:
    def __init__(self, client: "RecordingClient", database: str | None):
        self._client, self._database = client, database

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc) -> None:
        return None

    async def run(self, query: str, parameters: dict | None = None, **kwparameters) -> _Result:
        call = Call(query, {**(parameters or {}), **kwparameters}, self._database)
        return _Result(self._client.respond(call))

    async def begin_transaction(self, **config) -> RecordingTransaction:
        return RecordingTransaction(self._client, self._database)

    async def execute_write(self, work, *args, **kwargs):
        """One managed transaction: committed when `work` returns, rolled back when it raises."""
        tx = RecordingTransaction(self._client, self._database)
        try:
            result = await work(tx, *args, **kwargs)
        except BaseException:
            await tx.rollback()
            raise
        await tx.commit()
        return result

    execute_read = execute_write

    async def close(self) -> None:
        return None


class RecordingClient:
    """Stands in for `neo4j.AsyncDriver`: records, answers from `answer(query, params)`."""

    def __init__(self, answer: Answer, connect_error: BaseException | None = None):
        self.answer = answer
        self.connect_error = connect_error
        self.calls: list[Call] = []
        self.transaction_ids = itertools.count(1)
        self.closed = False

    def respond(self, call: Call) -> list[dict]:
        self.calls.append(call)
        return self.answer(call.query, call.params)

    async def verify_connectivity(self, **config) -> None:
        if self.connect_error is not None:
            raise self.connect_error

    async def execute_query(self, query_: str, parameters_: dict | None = None, **kwargs) -> EagerResult:
        # As in neo4j's AsyncDriver: keyword arguments ending in "_" configure, the others are parameters.
        params = {**(parameters_ or {}), **{k: v for k, v in kwargs.items() if not k.endswith("_")}}
        rows = self.respond(Call(query_, params, kwargs.get("database_")))
        return EagerResult([Record(row) for row in rows], None, list(rows[0]) if rows else [])

    def session(self, database: str | None = None, **config) -> RecordingSession:
        return RecordingSession(self, database)

    async def close(self) -> None:
        self.closed = True


class RecordingNeo4jDriver(Neo4jDriver):
    """graphiti's Neo4jDriver (provider neo4j) whose Bolt client records instead of connecting."""

    def __init__(self, answer: Answer | None = None, database: str = "neo4j",
                 connect_error: BaseException | None = None):
        super().__init__("bolt://recording.invalid:7687", "neo4j", "unused", database=database)
        self._unused_bolt_client = self.client  # built by the constructor, never connected
        self.client = RecordingClient(answer or (lambda query, params: []), connect_error)

    @property
    def calls(self) -> list[Call]:
        return self.client.calls

    def queries(self, pattern: str) -> list[Call]:
        """The recorded calls whose whitespace-normalised Cypher matches `pattern` (a regex)."""
        return [call for call in self.calls if re.search(pattern, call.normalized())]

    async def close(self) -> None:
        await super().close()  # cancels the index task, closes the recording client
        await self._unused_bolt_client.close()


@dataclass
class ScriptedNeo4j:
    """Answers for the queries the app sends: a small registry of graphs, and rules a test adds.

    Rules are (regex on the normalised Cypher, handler(query, params) -> rows), newest first; a
    query no rule and no registry answer matches gets no rows (what index creation gets), except
    an import's read of which edges are stored, which gets those an edge write was sent (a write no
    rule refuses stores all), and a graph lock's claim or renewal, which always succeeds.
    """

    registry: dict[str, dict] = field(default_factory=dict)
    rules: list[tuple[str, Callable[[str, dict], list[dict]]]] = field(default_factory=list)
    edges: set[str] = field(default_factory=set)  # uuids of the edges writes were sent

    def on(self, pattern: str, handler: Callable[[str, dict], list[dict]] | list[dict]) -> None:
        answer = handler if callable(handler) else (lambda query, params, rows=handler: rows)
        self.rules.insert(0, (pattern, answer))

    def add_graph(self, graph_id: str, name: str | None = None) -> None:
        created = datetime.now(timezone.utc).isoformat()
        self.registry[graph_id] = {"graph_id": graph_id, "name": name or graph_id, "created_at": created}

    def __call__(self, query: str, params: dict) -> list[dict]:
        text = " ".join(query.split())
        for pattern, handler in self.rules:
            if re.search(pattern, text):
                return handler(text, params)
        if "MiroGraph" in text:
            return self._registry(text, params)
        if "MiroLock" in text:  # one process: every graph lock is free, and stays held once taken
            return [{"free": True, "held": 1}]
        if text.startswith("UNWIND $entity_edges"):
            self.edges.update(edge["uuid"] for edge in params["entity_edges"])
            return []
        if "RELATES_TO {uuid: u}" in text and "e.uuid AS uuid" in text:
            return [{"uuid": uuid} for uuid in params["uuids"] if uuid in self.edges]
        return []

    def _registry(self, text: str, params: dict) -> list[dict]:
        graph_id = params.get("graph_id")
        if "collect(g) AS copies" in text:
            return [{"removed": 0}]
        if text.startswith("MERGE"):
            if graph_id not in self.registry:
                self.add_graph(graph_id, params.get("name"))
                self.registry[graph_id].update(incarnation=params.get("incarnation"),
                                               keyed_facts="g.keyed_facts = true" in text,
                                               passage_vectors="g.passage_vectors = true" in text)
            return [{"incarnation": None, **self.registry[graph_id]}]
        if "AS incarnation" in text:
            row = self.registry.get(graph_id)
            return [{"incarnation": row.get("incarnation") or row["created_at"]}] if row else []
        if "AS keyed" in text:
            row = self.registry.get(graph_id)
            return [{"keyed": row.get("keyed_facts", False)}] if row else []
        if "AS passages" in text:
            row = self.registry.get(graph_id)
            return [{"passages": row.get("passage_vectors", False)}] if row else []
        if "SET g.keyed_facts = false" in text:
            self.registry.get(graph_id, {})["keyed_facts"] = False
            return []
        if "DELETE g" in text:
            self.registry.pop(graph_id, None)
            return []
        if "CONTAINS $token" in text:
            return [{"graph_id": other} for other in self.registry
                    if params["token"] in other.lower() and other != graph_id]
        if "count(g)" in text:
            return [{"n": int(graph_id in self.registry)}]
        if graph_id is not None:
            return [dict(self.registry[graph_id])] if graph_id in self.registry else []
        return sorted((dict(row) for row in self.registry.values()),
                      key=lambda row: (row["created_at"], row["graph_id"]))


def edge_row(uuid: str, fact: str, group_id: str, source_uuid: str, target_uuid: str,
             created_at: Any, name: str = "RELATES_TO", valid_at: Any = None, **extra) -> dict:
    """A row in the shape graphiti's Neo4j edge queries return (`get_entity_edge_return_query`)."""
    return {
        "uuid": uuid, "source_node_uuid": source_uuid, "target_node_uuid": target_uuid,
        "group_id": group_id, "created_at": created_at, "name": name, "fact": fact, "episodes": [],
        "expired_at": None, "valid_at": valid_at, "invalid_at": None, "reference_time": None,
        "attributes": {"uuid": uuid, "fact": fact, "group_id": group_id, **extra},
    }


def node_row(uuid: str, name: str, group_id: str, created_at: Any, summary: str = "") -> dict:
    """A row in the shape graphiti's Neo4j entity queries return (`get_entity_node_return_query`)."""
    return {"uuid": uuid, "name": name, "group_id": group_id, "created_at": created_at,
            "summary": summary, "labels": ["Entity"], "attributes": {"uuid": uuid, "name": name}}
