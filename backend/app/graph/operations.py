"""The synchronous graph operations the app calls: `GraphitiAdapter().graph.<operation>(...)`.

Each runs its coroutine (app/graph/store.py, fact_import.py, episodes.py, search.py) on the graph
loop with a deadline, so Flask views and report tools stay synchronous. A database that cannot be
used comes out of every one of them as GraphUnavailableError (app/graph/unavailable.py), whoever
raised it on the way, so each caller (an endpoint, a background task, a report tool) sees which
database and what, and the runtime learns it was lost.
"""

from __future__ import annotations

import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

from app.graph import episodes, fact_import, foreign, transfer
from app.graph.fact_parsing import FactInput, parse_fact
from app.graph.graph_file import GraphFile
from app.graph import store as graph_store
from app.graph.loop import run_on_loop
from app.graph.search import JudgedPassages, SearchOutcome, judge_passages, search_graph
from app.graph.search_filters import SearchFilter, UnknownEntityError
from app.graph.unavailable import GraphUnavailableError, as_unavailable

logger = logging.getLogger(__name__)

T = TypeVar("T")


class GraphOperations:
    """Synchronous graph operations; each runs on the graph loop with a deadline."""

    def __init__(self, runtime) -> None:  # the GraphitiRuntime of app/graph/runtime.py
        self._runtime = runtime

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float | None = 120.0) -> T:
        """run_on_loop, with a database that cannot be used raised as GraphUnavailableError."""
        try:
            return run_on_loop(coro, timeout=timeout)
        except Exception as error:
            refusal = as_unavailable(error, self._runtime.config)
            if refusal is None or refusal is error:
                raise
            self._runtime.database_lost = True
            if isinstance(error, fact_import.ImportFailedError):  # what became of its writes; stored: 0
                refusal = GraphUnavailableError(f"{refusal}; the {error}", stored=0)
            raise refusal from error

    def create(self, graph_id: str | None = None, name: str | None = None) -> dict:
        return self._run(graph_store.create_graph(self._runtime, graph_id or graph_store.new_graph_id(), name))

    def list(self) -> list[dict]:
        return self._run(graph_store.list_graphs(self._runtime))

    def exists(self, graph_id: str) -> bool:
        graph_store.validate_graph_id(graph_id)
        return self._run(graph_store.graph_exists(self._runtime, graph_id))

    def delete(self, graph_id: str, progress: dict | None = None) -> dict:
        """On Neo4j a large graph goes in many batches, each with its own deadline, and none overall."""
        timeout = 120.0 if self._runtime.is_falkordb else None
        return self._run(graph_store.delete_graph(self._runtime, graph_id, progress), timeout=timeout)

    def import_facts(self, graph_id: str, facts: list) -> dict:
        """Facts as dicts (validated here) or FactInput objects; no LLM call."""
        parsed = [f if isinstance(f, FactInput) else parse_fact(f, i)
                  for i, f in enumerate(facts, start=1)]
        return self._run(fact_import.import_facts(self._runtime, graph_id, parsed), timeout=600)

    def add(self, graph_id: str, text: str, name: str = "episode", source_description: str = "text") -> dict:
        """One text episode through Graphiti's LLM extraction."""
        return self._run(episodes.add_episode(self._runtime, graph_id, text, name, source_description),
                         timeout=self._runtime.config.llm_timeout_s * 10)

    def search(self, graph_id: str, query: str, limit: int = 10, scope: str = "edges",
               neighbourhood: int = 0, exclude: frozenset[str] = frozenset(),
               candidates: int | None = None, filters: SearchFilter | None = None,
               centre: str | None = None) -> SearchOutcome:
        """Hybrid search scoped to one graph, reranked by the configured reranker (`neighbourhood`,
        `candidates`, `filters`, `centre`: app/graph/search.py).

        Errors are logged and answered with an empty result and `error` set, never raised, except
        for an unknown graph or an entity the filters or the centre name that the graph does not
        hold (UnknownEntityError), which are the caller's mistakes, and a database that cannot be
        used (GraphUnavailableError: an empty result would read as "nothing found").
        """
        if not self._run(graph_store.graph_exists(self._runtime, graph_store.validate_graph_id(graph_id))):
            raise graph_store.UnknownGraphError(graph_id)
        try:
            return self._run(search_graph(self._runtime, graph_id, query, limit, scope, neighbourhood, exclude,
                                          candidates, filters, centre),
                             timeout=self._runtime.config.search_timeout_s)
        except (GraphUnavailableError, UnknownEntityError):  # the caller answers 503 / 404, not an empty result
            raise
        except Exception as error:
            logger.error("Search in %s failed: %s: %s", graph_id, type(error).__name__, error)
            return SearchOutcome(error=f"search failed: {type(error).__name__}")

    def judge_passages(self, query: str, passages: list[str]) -> JudgedPassages | None:
        """The configured reranker's order of `passages` for `query` and the scores it gave, or None
        (reranking off, or nothing judged in time): see search.judge_passages."""
        try:
            return run_on_loop(judge_passages(self._runtime, query, passages),
                               timeout=self._runtime.config.search_timeout_s)
        except Exception as error:
            logger.warning("Judging %d passages failed: %s", len(passages), type(error).__name__)
            return None

    def nodes(self, graph_id: str, offset: int = 0, limit: int = 50) -> dict:
        return self._run(graph_store.list_nodes(self._runtime, graph_id, offset, limit))

    def edges(self, graph_id: str, offset: int = 0, limit: int = 50) -> dict:
        return self._run(graph_store.list_edges(self._runtime, graph_id, offset, limit))

    def node(self, graph_id: str, node_uuid: str) -> dict:
        return self._run(graph_store.get_node(self._runtime, graph_id, node_uuid))

    def stats(self, graph_id: str) -> dict:
        return self._run(graph_store.graph_stats(self._runtime, graph_id))

    def export_graph(self, graph_id: str) -> GraphFile:
        """The whole graph as records (app/graph/transfer.py); its lines from `GraphFile.lines()`."""
        return self._run(transfer.export_graph(self._runtime, graph_id), timeout=600)

    def import_graph(self, graph_id: str, graph: GraphFile, name: str | None = None,
                     new_uuids: bool = False) -> dict:
        """A checked graph file into a new or empty graph (app/graph/transfer.py)."""
        return self._run(transfer.import_graph(self._runtime, graph_id, graph, name=name, new_uuids=new_uuids),
                         timeout=600)

    def foreign(self) -> list[dict]:
        """Graphiti groups in the database that the registry does not list (app/graph/foreign.py)."""
        return self._run(foreign.list_foreign(self._runtime))

    def adopt(self, group_id: str, name: str | None = None, reembed: bool = False) -> dict:
        """Register a foreign group as a graph of this app, its vectors checked or made again (foreign.py)."""
        return self._run(foreign.adopt_graph(self._runtime, group_id, name, reembed), timeout=600)
