"""`python -m bench load` end to end, briefly: two real served APIs (reranker off, then on against the
stand-in judge), a few clients for two seconds each. The figures themselves are for the command's
own output (docs/bench/SCALE.md, "Load"); this only proves the command runs, counts, and holds its bounds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BACKEND = Path(__file__).resolve().parents[1]


def test_a_short_load_run_serves_both_phases_without_errors_within_the_parallel_bound(tmp_path):
    out = tmp_path / "load.json"
    command = [sys.executable, "-m", "bench", "load", "--clients", "4", "--duration", "2",
               "--facts", "30", "--limit", "3", "--max-parallel", "2", "--server-threads", "4",
               "--json-out", str(out)]
    done = subprocess.run(command, cwd=BACKEND, env=dict(os.environ), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    off, on = json.loads(out.read_text())
    assert (off["phase"], on["phase"]) == ("off", "on")
    for phase in (off, on):
        assert phase["requests"] > 0 and phase["errors"] == 0 and phase["p50_ms"] > 0
        assert phase["memory_after"]["app_rss_mib"] > 0
    assert off["model_requests"] == 0 and off["max_parallel"] is None
    # Every "on" search asked the judge (cache off), never more than RERANKER_MAX_PARALLEL at once.
    assert on["model_requests"] >= on["requests"] and on["fallbacks"] == 0
    assert 1 <= on["peak_model_requests_seen_by_judge"] <= 2
    assert "== reranker on:" in done.stdout and "p95" in done.stdout
