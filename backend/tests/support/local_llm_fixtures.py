"""Pytest plugin: a real local model server (llama.cpp's llama-server) for tests that need one.

Registered in tests/conftest.py through `pytest_plugins`.

`local_llm` (session scope) yields the OpenAI-compatible base URL; the model name to send
is `local_llm_config.local_llm_model` (LOCAL_LLM_MODEL, default qwen2.5-coder-1.5b).

Test sessions on this machine share one test server per model, on a test port of its own
(LOCAL_LLM_TEST_PORT, default 18088 for the 1.5B and 18089 for the 0.5B), with its pid
record and log in a state folder shared by all sessions (not the session's DATA_DIR).
Each session holds a lease while it runs; the session that ends last stops the server.
One shared server is what a 2-core machine can afford: several servers running at once
only fight over the cores, and each holds 2-4 GB of memory. A developer's `make local-llm`
server (port 8088) is never reused or stopped by the tests.

The first run builds llama-server (about 6 minutes) and assembles the model into
MODEL_CACHE_DIR; later runs reuse both, and a start takes a few seconds.

Tests that use `local_llm` get the `local_model` marker automatically, so
`pytest -m "not local_model"` leaves them out.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.config import LOCAL_LLM_MODELS, Config
from app.local_llm import ensure_server, stop_server
from tests.support.server_leases import ServerLeases

TEST_PORT_BASE = 18088
SHARED_STATE_DIR = Path(tempfile.gettempdir()) / f"mirofish-local-llm-tests-{os.getuid()}"


def shared_server_config(config: Config) -> Config:
    """`config` pointed at the shared test server of its model."""
    base = int(os.environ.get("LOCAL_LLM_TEST_PORT", TEST_PORT_BASE))
    # One port per model, so sessions that test different models never replace each other's.
    port = base + LOCAL_LLM_MODELS.index(config.local_llm_model)
    return dataclasses.replace(config, local_llm_port=port, data_dir=SHARED_STATE_DIR)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "local_llm" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.local_model)


@pytest.fixture(scope="session")
def local_llm_config() -> Config:
    """The settings the shared test server runs with (test port, shared state folder)."""
    return shared_server_config(Config.from_env())


@pytest.fixture(scope="session")
def local_llm(local_llm_config: Config) -> Iterator[str]:
    """Base URL (http://127.0.0.1:<port>/v1) of a running local model server."""
    leases = ServerLeases(SHARED_STATE_DIR / f"leases-{local_llm_config.local_llm_port}",
                          lambda: stop_server(local_llm_config))
    leases.take()
    try:
        url = ensure_server(local_llm_config)
        yield url
    finally:
        leases.release_and_stop_if_last()
