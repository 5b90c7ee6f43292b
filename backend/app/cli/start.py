"""The start step of a served app: each server worker runs it before it takes requests (app/cli/server.py,
for `flask serve` and the image's gunicorn alike).

`create_app()` contacts nothing (tests build apps in-process). A served app connects to its graph
database before it takes requests, builds its indexes, and starts warming the reranker's model in
the background (graphiti_llm_rerank/warmup.py: readiness says when it has loaded). A database that cannot be
used fails the start with one line that says which database, what is wrong and the setting that
names it, and a non-zero exit, instead of a stack trace or an app that answers 503 to everything.
"""

from __future__ import annotations

import sys

from app.config import Config
from app.graph.runtime import GraphitiAdapter
from app.graph.unavailable import GraphUnavailableError, setting_of

# Gunicorn's "worker failed to boot": its master stops with it instead of starting the worker again
# and again, and the server exits.
START_FAILED_EXIT = 3


def start(config: Config) -> None:
    """Start the graph runtime (database, indexes, the task broker, the model's warm-up)."""
    GraphitiAdapter(config).runtime


def exit_naming_the_setting(config: Config, error: GraphUnavailableError) -> None:
    print(f"Cannot start: {error} ({setting_of(config)})", file=sys.stderr, flush=True)
    raise SystemExit(START_FAILED_EXIT) from None
