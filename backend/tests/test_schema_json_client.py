"""GRAPHITI_LLM_PROVIDER=openai_generic: the request format llama.cpp accepts, over real HTTP."""

from __future__ import annotations

import asyncio

from graphiti_core.llm_client.config import LLMConfig
from graphiti_core.prompts.models import Message
from pydantic import BaseModel

from app.graph.schema_json_client import SchemaGuidedJsonClient
from tests.support.scripted_llm import ScriptedLLMServer, chat


class Person(BaseModel):
    name: str
    age: int


def _client(base_url: str) -> SchemaGuidedJsonClient:
    return SchemaGuidedJsonClient(LLMConfig(api_key="k", base_url=base_url, model="m", small_model="m"))


def test_requests_carry_the_schema_inside_json_object_and_answers_parse():
    with ScriptedLLMServer(chat(lambda messages, body: '```json\n{"name": "Mara", "age": 51}\n```')) as llm:
        client = _client(llm.base_url)
        messages = [Message(role="system", content="Extract."), Message(role="user", content="Mara is 51.")]
        answer = asyncio.run(client.generate_response(messages, response_model=Person))
        sent = llm.requests[0]
    assert answer == {"name": "Mara", "age": 51}  # fenced JSON is unwrapped
    # json_object (llama.cpp rejects json_schema), with the schema for its grammar...
    assert sent["response_format"] == {"type": "json_object", "schema": Person.model_json_schema()}
    # ...and not pasted into the prompt, where it confuses small models; greedy decoding.
    assert "$defs" not in sent["messages"][-1]["content"] and '"properties"' not in sent["messages"][-1]["content"]
    assert sent["messages"][-1]["content"].startswith("Mara is 51.")
    assert sent["temperature"] == 0


def test_a_request_without_a_response_model_asks_for_plain_json_object():
    with ScriptedLLMServer(chat(lambda messages, body: '{"ok": true}')) as llm:
        client = _client(llm.base_url)
        answer = asyncio.run(client.generate_response([Message(role="user", content="Say ok as JSON.")]))
        sent = llm.requests[0]
    assert answer == {"ok": True} and sent["response_format"] == {"type": "json_object"}


def test_the_adapter_picks_it_for_openai_generic(backend):
    from app.graph.runtime import _build_llm_and_embedder

    app, _ = backend(GRAPHITI_LLM_PROVIDER="openai_generic")
    llm_client, _ = _build_llm_and_embedder(app.config["APP_CONFIG"])
    assert isinstance(llm_client, SchemaGuidedJsonClient)
