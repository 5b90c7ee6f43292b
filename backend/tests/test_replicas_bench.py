"""`python -m bench replicas`, run small as the real command in its own process: two API replicas and two
workers on the local Neo4j and one broker, one replica and one worker killed -9 mid-run. Its figures
(--json-out) must show no error on the replica that lived, no report or task left pending or running,
every acknowledged fact in the graph, and every report answered by the replica that did not start it;
a task or report kept by one process alone would be 404 there, and the run would fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.support.app_process import BACKEND_DIR


def test_a_small_run_keeps_every_must_across_a_killed_replica_and_worker(tmp_path):
    figures_path = tmp_path / "replicas.json"
    command = [sys.executable, "-m", "bench", "replicas", "--duration", "10",
               "--clients", "4", "--reports", "2", "--facts", "60", "--output", str(tmp_path / "out"),
               "--json-out", str(figures_path)]
    run = subprocess.run(command, cwd=BACKEND_DIR, env={**os.environ, "DOTENV_PATH": os.devnull},
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, f"{run.stdout[-4000:]}\n{run.stderr[-4000:]}"
    figures = json.loads(figures_path.read_text())
    assert figures["passed"] and all(check["ok"] for check in figures["musts"])

    assert figures["errors_on_live_replicas"] == {"searches": 0, "imports": 0, "report_calls": 0}
    assert figures["searches"]["requests"] > 0 and figures["searches"]["errors"] == 0

    reports = figures["reports"]
    assert reports["started"] >= 2 and reports["stuck"] == 0 and reports["failed_otherwise"] == []
    assert figures["broker"] == {"queued": 0, "running": 0}
    assert reports["polled_on_other_replica"] >= 2
    assert reports["answered_from_other_replica"] == reports["polled_on_other_replica"]
    assert reports["readable_on_survivor"] == reports["started"]

    facts = figures["facts"]
    assert facts["acknowledged_facts"] > 0 and facts["lost"] == 0
    assert facts["edges_in_graph"] >= 60 + facts["acknowledged_facts"]

    kill = figures["kill"]
    assert kill["done"] and kill["task_id"], "the kill found no worker with a task in hand"
    assert kill["task_state"] == "failed" and kill["task_failed_after_s"] <= figures["heartbeat_ttl_s"] + 15
    assert "| reports answered from the other replica (must be all of those polled there) |" in run.stdout
