"""Shared fixtures. Every test runs against a real FalkorDB that the app itself starts
(embedded, under a temporary DATA_DIR) and the real in-process embedder."""

from __future__ import annotations

import importlib.util
import os
import uuid

import pytest

from tests.support.facts import WATER_FACTS

# Fixture plugins owned by each area; registered when present.
pytest_plugins = [
    name
    for name in (
        "tests.support.scripted_llm_fixtures",
        "tests.support.local_llm_fixtures",
        "tests.support.ollama_fixtures",
        "tests.support.graph_backends",
        "tests.support.model_lane",
    )
    if importlib.util.find_spec(name) is not None
]

_BASE_ENV = {
    "DOTENV_PATH": os.devnull,  # a developer's .env must not change what the tests see
    "GRAPHITI_TELEMETRY_ENABLED": "false",
    "EMBEDDING_PROVIDER": "local",
    "RERANKER_PROVIDER": "none",
    # The warm-up's extra request would shift the scripted servers' request counts and scripts; the tests
    # of the warm-up turn it on (tests/test_reranker_warmup.py, tests/test_ollama_server.py).
    "RERANKER_WARMUP_TIMEOUT_S": "0",
    "LOG_LEVEL": "INFO",
    # The suite runs beside itself on a 2-core machine: one model-server thread never waits for a
    # descheduled sibling (docs/CONFIGURATION.md, LOCAL_LLM_THREADS), and the local Neo4j's JVM compiles
    # with its quick compiler only, which halves the CPU a start costs (docs/bench/NEO4J.md).
    "LOCAL_LLM_THREADS": "1",
    "JDK_JAVA_OPTIONS": "-XX:TieredStopAtLevel=1",
}
_CLEARED_PREFIXES = ("RERANKER_", "LLM_", "GRAPHITI_LLM", "FALKORDB_", "NEO4J_", "GRAPH_BACKEND", "API_TOKEN")


@pytest.fixture(scope="session", autouse=True)
def _test_environment(tmp_path_factory):
    from app import configure_logging

    configure_logging("INFO")
    saved = dict(os.environ)
    for key in list(os.environ):
        if key.startswith(_CLEARED_PREFIXES):
            del os.environ[key]
    os.environ.update(_BASE_ENV)
    os.environ["DATA_DIR"] = str(tmp_path_factory.mktemp("data"))
    yield
    from app.graph.runtime import reset_graphiti

    reset_graphiti()
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture
def backend(monkeypatch):
    """`backend(**env)` -> (app, client): the app on the given settings.

    The graph runtime is a process singleton; it is rebuilt only when the settings differ
    from the running one, over the same data directory (so rebuilding is also a restart).
    """
    from app import create_app
    from app.config import Config
    from app.graph import runtime as graphiti_adapter
    def build(**env):
        for key, value in env.items():
            monkeypatch.setenv(key, str(value))
        config = Config.from_env()
        current = graphiti_adapter._graphiti
        if current is not None and current.config != config:
            graphiti_adapter.reset_graphiti()
        app = create_app(config)
        app.config["TESTING"] = True
        return app, app.test_client()

    return build


@pytest.fixture
def client(backend):
    return backend()[1]


def unique_graph_id(prefix: str = "t") -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


@pytest.fixture
def graph_id(client):
    """A fresh, empty graph for one test."""
    gid = unique_graph_id()
    response = client.post("/api/graph", json={"graph_id": gid})
    assert response.status_code == 201, response.get_json()
    return gid


@pytest.fixture
def water_graph(graph_id, client):
    """A fresh graph holding the water facts (tests/support/facts.py) for one test."""
    response = client.post(f"/api/graph/{graph_id}/facts", json={"facts": WATER_FACTS})
    assert response.status_code == 201, response.get_json()
    return graph_id
