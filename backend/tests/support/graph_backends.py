"""The graph databases the tests run on: the app's embedded FalkorDB and a real local Neo4j.

`neo4j_server` starts one Neo4j 5.26 for the whole session (app/graph/local_neo4j.py, the same
server `make neo4j` runs), under the session's temporary folder. `graph_backend` is a module-scoped
parameter: a test module that takes `on_both_backends` runs every test on each database in turn,
and pytest groups the tests by database, so the runtime switches twice per module, not per test.
"""

from __future__ import annotations

import pytest

from app.config import Config
from app.graph.local_neo4j import LocalNeo4j

BACKENDS = ("falkordb", "neo4j")


@pytest.fixture(scope="session")
def neo4j_server(tmp_path_factory):
    config = Config.from_env()
    server = LocalNeo4j(tmp_path_factory.mktemp("neo4j"), config.neo4j_cache_dir,
                        heap_mb=768, page_cache_mb=128)
    server.start()
    yield server
    server.stop()


def neo4j_env(server: LocalNeo4j, **extra) -> dict[str, str]:
    """The settings that put the app on `server`."""
    return {"GRAPH_BACKEND": "neo4j", "NEO4J_URI": server.uri, "NEO4J_USER": server.connection.user,
            "NEO4J_PASSWORD": server.password, **extra}


@pytest.fixture(scope="module", params=BACKENDS)
def graph_backend(request) -> dict[str, str]:
    """The settings of one graph database; the tests that use it run once per database."""
    if request.param == "neo4j":
        return neo4j_env(request.getfixturevalue("neo4j_server"))
    return {"GRAPH_BACKEND": "falkordb"}


@pytest.fixture
def on_both_backends(graph_backend, backend):
    """(app, client) on the module's current database."""
    return backend(**graph_backend)
