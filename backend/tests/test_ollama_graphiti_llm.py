"""Graphiti's LLM client for GRAPHITI_LLM_PROVIDER=openai (the default, what production ingests with) on the
project's own Ollama: it asks /v1/responses for output in a JSON schema, which Ollama 0.17.4 turns into a
grammar. One short structured answer, the client's contract alone; tests/test_ollama_ingestion.py sends a
whole episode through the API."""

from __future__ import annotations

import asyncio
import dataclasses

from graphiti_core.prompts.models import Message
from pydantic import BaseModel

from app.config import Config
from app.graph.runtime import build_llm_client

TEXT = "Mara Lindqvist is the director of the Harbor Water Utility in the town of Saltby."


class PeopleNamed(BaseModel):
    # A key the model would not pick on its own: asked without the schema (a json_object request, which
    # Ollama answers with any JSON) it wrote {"name": ..., "position": ..., "town": ...} here.
    full_names_of_people: list[str]


def test_graphitis_openai_client_gets_answers_in_its_schema_from_ollama_responses(local_ollama, ollama_model):
    config = dataclasses.replace(Config.from_env(), graphiti_llm_provider="openai", llm_base_url=local_ollama,
                                 llm_model_name=ollama_model, llm_small_model_name=ollama_model)
    client = build_llm_client(config)
    messages = [Message(role="system", content="List the full names of the people the text names."),
                Message(role="user", content=TEXT)]
    answer = asyncio.run(client.generate_response(messages, response_model=PeopleNamed, max_tokens=64))
    # Exactly the schema's shape. Its contents are the model's: Graphiti's OpenAIClient samples at
    # LLMConfig's temperature 1, so they vary ("Marla Lindqvist" once); the grammar holds them to the shape.
    assert set(answer) == {"full_names_of_people"}, answer
    assert PeopleNamed.model_validate(answer).full_names_of_people, answer
