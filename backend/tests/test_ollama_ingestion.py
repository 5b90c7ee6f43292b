"""Text ingestion through the API with the judge's server being production's: the project's own Ollama,
and GRAPHITI_LLM_PROVIDER=openai, which the compose file sets. Graphiti's OpenAIClient asks
/v1/responses for output in each prompt's JSON schema; Ollama 0.17.4 turns the schema into a grammar.

The episode is one short sentence: each Graphiti call still carries 1,200-2,200 prompt tokens, and
Ollama's CPU build evaluates them at about a third of llama-server's rate (docs/bench/SERVERS.md): about
100 s on two quiet cores. The limits only stop a hang."""

from __future__ import annotations

import logging
import time

from tests.conftest import unique_graph_id
from tests.support.tasks import wait_for_task

logger = logging.getLogger(__name__)

SENTENCE = "Mara Lindqvist directs the Harbor Water Utility."
LLM_TIMEOUT_S = 900
TASK_DEADLINE_S = 3600


def test_an_episode_posted_to_the_api_is_extracted_by_ollama_and_found_by_search(backend, local_ollama,
                                                                                 ollama_model):
    _, client = backend(GRAPHITI_LLM_PROVIDER="openai", LLM_BASE_URL=local_ollama, LLM_MODEL_NAME=ollama_model,
                        LLM_SMALL_MODEL_NAME=ollama_model, LLM_TIMEOUT_S=LLM_TIMEOUT_S,
                        RERANKER_PROVIDER="none")
    gid = unique_graph_id("ollama-ingest")
    assert client.post("/api/graph", json={"graph_id": gid}).status_code == 201

    started = time.monotonic()
    accepted = client.post(f"/api/graph/{gid}/episodes", json={"text": SENTENCE, "name": "utility"})
    assert accepted.status_code == 202, accepted.get_json()
    task = wait_for_task(client, accepted.get_json()["task_id"], TASK_DEADLINE_S, poll_s=1.0)
    logger.info("One sentence ingested through Ollama (%s) in %.1f s", ollama_model, time.monotonic() - started)

    assert task["state"] == "done", task["errors"]
    assert task["errors"] == [] and task["progress"] == {"chunks_done": 1, "chunks_total": 1}
    nodes = client.get(f"/api/graph/{gid}/nodes?limit=100").get_json()
    names = " ".join(node["name"] for node in nodes["items"]).lower()
    assert any(word in names for word in ("mara", "lindqvist", "harbor", "utility")), names
    assert client.get(f"/api/graph/{gid}/stats").get_json()["episodes"] == 1
    # What Ollama extracted is searchable: the graph's own entities answer a query about them.
    found = client.post(f"/api/graph/{gid}/search", json={"query": "Who directs the Harbor Water Utility?",
                                                          "scope": "nodes", "limit": 5})
    assert found.status_code == 200, found.get_json()
    hits = " ".join(node["name"] for node in found.get_json()["nodes"]).lower()
    assert any(word in hits for word in ("mara", "lindqvist", "harbor", "utility")), hits

