"""Pytest plugin: the `scripted_llm` fixture, a started ScriptedLLMServer (stopped after the test).

Registered in tests/conftest.py through `pytest_plugins`. The default responder scores judge
prompts by keyword overlap; set `scripted_llm.responder` to script anything else.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.scripted_llm import ScriptedLLMServer


@pytest.fixture
def scripted_llm() -> Iterator[ScriptedLLMServer]:
    with ScriptedLLMServer() as server:
        yield server
