"""Graphiti's LLM client for llama.cpp-style servers (GRAPHITI_LLM_PROVIDER=openai_generic).

llama-cpp-python's server (the local kit's server before llama-server) answers Graphiti's
`response_format: {"type": "json_schema", ...}` with HTTP 500. Both it and llama-server accept
`{"type": "json_object", "schema": {...}}` and compile the schema into a grammar, so the model can only
write an instance of it. Measured here with the 1.5B model on
Graphiti's entity-extraction prompt (two short chunks): plain json_object with the schema pasted
into the prompt (OpenAIGenericClient's fallback) came back as the schema itself (`{"$defs": ...}`);
the grammar plus the pasted schema returned no entities in 6 of 16 tries; the grammar alone
returned the entities in 12 of 12. So this client sends the schema in the request only, and
decodes greedily.

A server that ignores the extra `schema` key would get no schema at all: for servers that support
`json_schema`, use GRAPHITI_LLM_PROVIDER=openai. Ollama is one: it turns `json_object` into its plain
JSON grammar and drops the schema (0.17.4, checked here: asked for {"zq_people": [...]} it answered
{"name": ..., "position": ..., "town": ...}), while it enforces `json_schema` and the schema of
/v1/responses, which GRAPHITI_LLM_PROVIDER=openai uses (tests/test_ollama_graphiti_llm.py).
"""

from __future__ import annotations

from typing import Any

from graphiti_core.llm_client.config import LLMConfig
from graphiti_core.llm_client.openai_generic_client import OpenAIGenericClient
from pydantic import BaseModel


class SchemaGuidedJsonClient(OpenAIGenericClient):
    """OpenAIGenericClient that sends the response schema as a llama.cpp json_object grammar."""

    def __init__(self, config: LLMConfig):
        # "json_schema" mode only tells the parent that the server enforces the schema, so it does
        # not paste it into the prompt; the wire format is chosen below.
        super().__init__(config=config, structured_output_mode="json_schema")
        # Extraction is not creative writing; LLMConfig's default temperature is 1.
        self.temperature = 0.0

    def _build_response_format(self, response_model: type[BaseModel] | None) -> dict[str, Any]:
        # Overrides a private hook of graphiti-core 0.31.1 (pinned).
        if response_model is None:
            return {"type": "json_object"}
        return {"type": "json_object", "schema": response_model.model_json_schema()}
