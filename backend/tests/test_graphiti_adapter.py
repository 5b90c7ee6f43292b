"""The adapter's singleton, event loop, persistence and error handling, on a real FalkorDB."""

from __future__ import annotations

import logging
import threading

import pytest

from app.config import Config
from app.graph import runtime as graphiti_adapter
from app.graph.loop import run_on_loop
from app.graph.runtime import GraphitiAdapter, _get_graphiti, reset_graphiti
from app.graph.server_process import free_port
from app.graph.unavailable import GraphUnavailableError
from tests.conftest import unique_graph_id
from tests.support.facts import WATER_FACTS


def test_singleton_is_built_once_under_concurrent_first_calls(caplog):
    reset_graphiti()
    config = Config.from_env()
    results, barrier = [], threading.Barrier(8)

    def first_call():
        barrier.wait()
        results.append(_get_graphiti(config))

    with caplog.at_level(logging.INFO):
        threads = [threading.Thread(target=first_call) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    assert len(results) == 8 and len({id(runtime) for runtime in results}) == 1
    assert sum("Embedded FalkorDB started" in r.message for r in caplog.records) == 1
    assert sum("Initializing Graphiti reranker (provider=none)" in r.message for r in caplog.records) == 1


def test_everything_runs_on_one_loop_thread():
    async def loop_thread_name():
        return threading.current_thread().name

    assert run_on_loop(loop_thread_name()) == "graphiti-loop"
    assert run_on_loop(loop_thread_name()) == "graphiti-loop"


def test_data_survives_an_app_restart():
    graph = GraphitiAdapter().graph
    gid = unique_graph_id()
    graph.create(gid)
    graph.import_facts(gid, WATER_FACTS)
    reset_graphiti()  # stops the embedded server; the next call starts a new one on the same data
    graph = GraphitiAdapter().graph
    assert graph.exists(gid)
    assert graph.stats(gid)["edges"] == len(WATER_FACTS)
    hits = graph.search(gid, "sourdough bread", limit=1).edges
    assert hits[0].fact == "Harbor Bakery sells sourdough bread baked every morning"


def test_a_search_whose_database_is_gone_raises_graph_unavailable_not_an_empty_result():
    graph = GraphitiAdapter().graph
    gid = unique_graph_id()
    graph.create(gid)
    graph.import_facts(gid, WATER_FACTS[:2])
    runtime = graphiti_adapter._graphiti
    runtime.embedded_db.stop()  # the database disappears under a running app
    original_exists = graphiti_adapter.graph_store.graph_exists

    async def exists(_runtime, _gid):  # the registry lives in the same (stopped) database
        return True

    graphiti_adapter.graph_store.graph_exists = exists  # so the search itself meets the stopped database
    try:
        with pytest.raises(GraphUnavailableError, match="^the embedded FalkorDB does not answer"):
            graph.search(gid, "water", limit=3)
        assert runtime.database_lost  # the next request checks the server before it uses it
    finally:
        graphiti_adapter.graph_store.graph_exists = original_exists
        reset_graphiti()


def test_search_errors_are_answered_with_an_error_flag(caplog, monkeypatch):
    """Any other failure, here the embedding server refusing the connection: an empty result with
    `error` set, not a 503 that blames the database."""
    graph = GraphitiAdapter().graph
    gid = unique_graph_id()
    graph.create(gid)
    graph.import_facts(gid, WATER_FACTS[:2])
    reset_graphiti()
    monkeypatch.setenv("EMBEDDING_PROVIDER", "openai")
    monkeypatch.setenv("EMBEDDING_BASE_URL", f"http://127.0.0.1:{free_port()}/v1")  # nothing listens
    try:
        with caplog.at_level(logging.ERROR):
            outcome = GraphitiAdapter(Config.from_env()).graph.search(gid, "water", limit=3)
    finally:
        reset_graphiti()
    assert outcome.edges == [] and outcome.error and outcome.error.startswith("search failed"), outcome.error
    assert any("Search in" in record.message for record in caplog.records)
