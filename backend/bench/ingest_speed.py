"""Ingestion through a given model server: one text episode through the app's own API, timed.

Graphiti's extraction (entities, edges, dedupe, summaries) sends several structured requests of
1,200-2,200 prompt tokens per chunk, so this is the other workload a local model server carries
besides the judge. The app runs in this process on the embedded defaults, in a fresh data folder.

    python -m bench ingest-speed --base-url URL --model M [--repeats 2]
"""

from __future__ import annotations

import dataclasses
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from app import create_app
from app.config import Config

TEXT = ("Mara Lindqvist is the director of the Harbor Water Utility in the town of Saltby. "
        "In March 2025 the utility replaced the cracked seal of Well 4 after a storm flooded the pump house.")
TASK_DEADLINE_S = 3600


def ingest_once(client, text: str) -> dict:
    graph_id = f"ingest_{uuid.uuid4().hex[:8]}"
    client.post("/api/graph", json={"graph_id": graph_id})
    started = time.monotonic()
    accepted = client.post(f"/api/graph/{graph_id}/episodes", json={"text": text, "name": "bench"})
    if accepted.status_code != 202:
        raise RuntimeError(f"episode refused: {accepted.status_code} {accepted.get_json()}")
    task_id = accepted.get_json()["task_id"]
    while time.monotonic() - started < TASK_DEADLINE_S:
        task = client.get(f"/api/tasks/{task_id}").get_json()
        if task["state"] in ("done", "failed"):
            break
        time.sleep(0.5)
    took = time.monotonic() - started
    stats = client.get(f"/api/graph/{graph_id}/stats").get_json()
    return {"seconds": round(took, 1), "state": task["state"], "stats": stats}


def ingest_config(base_url: str, model: str) -> Config:
    """The embedded defaults (in-process FalkorDB and embedder) in a fresh data folder, with Graphiti's
    LLM on the server measured and no reranker; the rest as configured."""
    return dataclasses.replace(
        Config.from_env(), graph_backend="falkordb", falkordb_url=None, embedding_provider="local",
        graphiti_llm_provider="openai_generic", llm_base_url=base_url, llm_api_key="unused", llm_model_name=model,
        llm_small_model_name=model, llm_timeout_s=600.0, reranker_provider="none",
        data_dir=Path(tempfile.mkdtemp(prefix="ingest-speed-")))


def measure(base_url: str, model: str, repeats: int = 1, label: str | None = None) -> dict:
    """`repeats` episodes of TEXT through the API; seconds per episode and what each left in its graph."""
    client = create_app(ingest_config(base_url, model)).test_client()
    runs = [ingest_once(client, TEXT) for _ in range(repeats)]
    seconds = [run["seconds"] for run in runs]
    return {"server": label or base_url, "model": model, "characters": len(TEXT), "seconds_per_episode": seconds,
            "median_s": statistics.median(seconds), "runs": runs}
