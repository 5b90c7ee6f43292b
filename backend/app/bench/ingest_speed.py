"""Ingestion through a given model server: one text episode through the app's own API, timed.

Graphiti's extraction (entities, edges, dedupe, summaries) sends several structured requests of
1,200-2,200 prompt tokens per chunk, so this is the other workload a local model server carries
besides the judge. The app runs in this process on the embedded defaults, in a fresh data folder.

    python -m app.bench.ingest_speed --base-url URL --model M [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import uuid

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True, help="OpenAI-compatible /v1 URL of the model server")
    parser.add_argument("--model", required=True)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--label", help="name of the server in the output")
    args = parser.parse_args()
    os.environ.update(DOTENV_PATH=os.devnull, GRAPHITI_TELEMETRY_ENABLED="false", EMBEDDING_PROVIDER="local",
                      GRAPHITI_LLM_PROVIDER="openai_generic", LLM_BASE_URL=args.base_url, LLM_API_KEY="unused",
                      LLM_MODEL_NAME=args.model, LLM_SMALL_MODEL_NAME=args.model, LLM_TIMEOUT_S="600",
                      RERANKER_PROVIDER="none", DATA_DIR=tempfile.mkdtemp(prefix="ingest-speed-"))
    client = create_app(Config.from_env()).test_client()
    runs = [ingest_once(client, TEXT) for _ in range(args.repeats)]
    seconds = [run["seconds"] for run in runs]
    print(json.dumps({"server": args.label or args.base_url, "model": args.model, "characters": len(TEXT),
                      "seconds_per_episode": seconds, "median_s": statistics.median(seconds), "runs": runs},
                     indent=2))


if __name__ == "__main__":
    main()
