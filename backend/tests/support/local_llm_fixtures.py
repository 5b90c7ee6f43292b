"""Pytest plugin: a real local model server (llama-cpp-python) for tests that need one.

Registered in tests/conftest.py through `pytest_plugins`.

`local_llm` (session scope) yields the OpenAI-compatible base URL; the model name to send
is `local_llm_config.local_llm_model` (LOCAL_LLM_MODEL, default qwen2.5-coder-1.5b).
The server is started through `app.local_llm.ensure_server` on a free loopback port of
its own, with its pid record under the session's DATA_DIR, and stopped at the end of the
session. A private port means a developer's `make local-llm` server, or another test
session running at the same time on this shared machine, is never reused or stopped by
this one. The first run installs llama-cpp-python (compiles, minutes) and assembles the
model into MODEL_CACHE_DIR; later runs reuse both, and the start takes a few seconds.

Tests that use `local_llm` get the `local_model` marker automatically, so
`pytest -m "not local_model"` leaves them out.
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Iterator

import pytest

from app.config import Config
from app.local_llm import ensure_server, stop_server


def free_loopback_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "local_llm" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.local_model)


@pytest.fixture(scope="session")
def local_llm_config() -> Config:
    """The settings the session's local server runs with (its own free port)."""
    return dataclasses.replace(Config.from_env(), local_llm_port=free_loopback_port())


@pytest.fixture(scope="session")
def local_llm(local_llm_config: Config) -> Iterator[str]:
    """Base URL (http://127.0.0.1:<port>/v1) of a running local model server."""
    url = ensure_server(local_llm_config)
    yield url
    stop_server(local_llm_config)
