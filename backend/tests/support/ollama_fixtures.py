"""Pytest plugin: the project's own Ollama (app/local_llm/ollama.py) serving the kit's model, for the
tests that check the reranker on the server software production runs.

Registered in tests/conftest.py through `pytest_plugins`.

`local_ollama` (session scope) yields the OpenAI-compatible base URL; the model name to send is
`ollama_model` (`mirofish/<LOCAL_LLM_MODEL>`). Like the llama-server tier (local_llm_fixtures.py),
test sessions on this machine share one test Ollama, on a port of its own (OLLAMA_TEST_PORT, default
18434; a developer's `make ollama` on 11434 is never used or stopped), with its state in a folder
shared by all sessions, so the 1 GB model is imported once, not once per session. The session that
ends last stops it.

The first run builds Ollama (about 6 minutes, see app/local_llm/ollama_build.py) and imports the
model (seconds); a later start takes a second or two, and the first request loads the model.

Tests that use `local_ollama` get the `local_model` and `ollama` markers, so `pytest -m "not
local_model"` leaves them out and `pytest -m ollama` runs only them.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.config import Config
from app.local_llm.ollama import ensure_ollama, model_name, stop_ollama
from tests.support.server_leases import ServerLeases

TEST_PORT = 18434
SHARED_STATE_DIR = Path(tempfile.gettempdir()) / f"mirofish-ollama-tests-{os.getuid()}"


def shared_ollama_config(config: Config) -> Config:
    """`config` pointed at the shared test Ollama."""
    port = int(os.environ.get("OLLAMA_TEST_PORT", TEST_PORT))
    return dataclasses.replace(config, ollama_local_port=port, data_dir=SHARED_STATE_DIR)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "local_ollama" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.local_model)
            item.add_marker(pytest.mark.ollama)


@pytest.fixture(scope="session")
def ollama_config() -> Config:
    """The settings the shared test Ollama runs with (test port, shared state folder)."""
    return shared_ollama_config(Config.from_env())


@pytest.fixture(scope="session")
def ollama_model(ollama_config: Config) -> str:
    return model_name(ollama_config)


@pytest.fixture(scope="session")
def local_ollama(ollama_config: Config) -> Iterator[str]:
    """Base URL (http://127.0.0.1:<port>/v1) of the shared test Ollama, with the kit's model imported."""
    leases = ServerLeases(SHARED_STATE_DIR / f"leases-{ollama_config.ollama_local_port}",
                          lambda: stop_ollama(ollama_config))
    leases.take()
    try:
        yield ensure_ollama(ollama_config)
    finally:
        leases.release_and_stop_if_last()
