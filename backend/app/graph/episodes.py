"""Text ingestion through Graphiti's LLM extraction (the only write path that calls the LLM)."""

from __future__ import annotations

import re
from datetime import datetime, timezone

from graphiti_core.nodes import EpisodeType

from app.graph.store import embedding_stored_texts_of, require_graph, unkey_facts

DEFAULT_CHUNK_CHARS = 1200


def chunk_text(text: str, max_chars: int = DEFAULT_CHUNK_CHARS) -> list[str]:
    """Split on paragraph, then sentence boundaries; never cut a sentence unless it alone is too long."""
    pieces: list[str] = []
    for paragraph in re.split(r"\n\s*\n", text):
        sentences = re.split(r"(?<=[.!?])\s+", paragraph.strip())
        for sentence in sentences:
            while len(sentence) > max_chars:
                pieces.append(sentence[:max_chars])
                sentence = sentence[max_chars:]
            if sentence:
                pieces.append(sentence)
        pieces.append("\n\n")
    chunks, current = [], ""
    for piece in pieces:
        joiner = "" if piece == "\n\n" or not current or current.endswith("\n\n") else " "
        if current and len(current) + len(joiner) + len(piece) > max_chars and piece != "\n\n":
            chunks.append(current.strip())
            current = piece
        else:
            current += joiner + piece
    if current.strip():
        chunks.append(current.strip())
    return chunks


async def add_episode(runtime, graph_id: str, text: str, name: str, source_description: str) -> dict:
    await require_graph(runtime, graph_id)
    await unkey_facts(runtime, graph_id)  # Graphiti gives the facts it extracts random uuids
    async with embedding_stored_texts_of(runtime, graph_id):
        result = await runtime.graphiti.add_episode(
            name=name,
            episode_body=text,
            source_description=source_description,
            reference_time=datetime.now(timezone.utc),
            source=EpisodeType.text,
            group_id=graph_id,
        )
    return {"episode_uuid": result.episode.uuid, "nodes": len(result.nodes), "edges": len(result.edges)}
