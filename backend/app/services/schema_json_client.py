"""Graphiti's OpenAI-compatible LLM client for servers without `json_schema` (llama.cpp), made usable
by small models.

llama-cpp-python's server answers `response_format: {"type": "json_schema", ...}` (Graphiti's
default) with HTTP 500. Plain `json_object` works, with the schema pasted into the prompt, but a
1.5B model then often answers with the schema itself (`{"$defs": ...}`) instead of an instance, and
the extraction fails validation. llama-cpp-python also accepts `{"type": "json_object", "schema":
{...}}` and compiles the schema into a grammar, so the model can only produce an instance of it.
Servers that do not know the extra `schema` key (Ollama, vLLM) ignore it and behave as json_object.
"""

from __future__ import annotations

from typing import Any

from graphiti_core.llm_client.config import LLMConfig
from graphiti_core.llm_client.openai_generic_client import OpenAIGenericClient
from pydantic import BaseModel


class SchemaGuidedJsonClient(OpenAIGenericClient):
    """OpenAIGenericClient in json_object mode whose requests also carry the response schema."""

    def __init__(self, config: LLMConfig):
        super().__init__(config=config, structured_output_mode="json_object")

    def _build_response_format(self, response_model: type[BaseModel] | None) -> dict[str, Any]:
        # Overrides a private hook of graphiti-core 0.31.1 (pinned); the schema is also still
        # injected into the prompt by the json_object mode, which helps the model fill it in.
        if response_model is None:
            return {"type": "json_object"}
        return {"type": "json_object", "schema": response_model.model_json_schema()}
