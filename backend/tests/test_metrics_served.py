"""/metrics from a served app (`flask serve`, a real socket) in multiprocess mode: a reranked search over
real HTTP to the scripted judge shows up in the scrape, and so does what another process of the same
server (a job worker) counted in the shared PROMETHEUS_MULTIPROC_DIR. The request id travels in the
header and the log file names it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from tests.support.app_process import BACKEND_DIR, AppProcess, call
from tests.support.facts import WATER_FACTS
from tests.support.scripted_llm import ScriptedLLMServer

QUERY = "harbor water utility reservoir town"
SEARCH_ID = "served-search-4f1"


def scrape(app: AppProcess) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(app.url("/metrics"), timeout=60) as response:
        assert response.status == 200
        text = response.read().decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def search(app: AppProcess, graph_id: str) -> tuple[dict, str]:
    """(answer, the X-Request-ID it came back with)."""
    request = urllib.request.Request(
        app.url(f"/api/graph/{graph_id}/search"), method="POST",
        data=json.dumps({"query": QUERY, "limit": 4}).encode(),
        headers={"Content-Type": "application/json", "X-Request-ID": SEARCH_ID})
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read()), response.headers["X-Request-ID"]


def test_a_served_app_in_multiprocess_mode_reports_its_reranking_and_other_processes_jobs(tmp_path):
    metrics_dir = tmp_path / "prometheus"
    metrics_dir.mkdir()
    with ScriptedLLMServer() as llm:  # the keyword-overlap judge
        env = {"RERANKER_PROVIDER": "ollama", "RERANKER_BASE_URL": llm.base_url, "RERANKER_MODEL": "judge-model",
               "RERANKER_SCORE_MODE": "logprobs", "RERANKER_TIMEOUT_S": "5",
               "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}
        with AppProcess(tmp_path / "data", tmp_path / "app.log", **env) as app:
            assert call(app.url("/api/graph"), "POST", {"graph_id": "harbor"})[0] == 201
            assert call(app.url("/api/graph/harbor/facts"), "POST", {"facts": WATER_FACTS})[0] == 201
            before = scrape(app)
            answer, request_id = search(app, "harbor")
            after = scrape(app)

            # A job worker: another process of the same server, writing to the same directory.
            worker = subprocess.run(
                [sys.executable, "-c", "from app.metrics import job_finished; job_finished('report', 'done')"],
                cwd=BACKEND_DIR, capture_output=True, text=True, timeout=120,
                env={**os.environ, "DOTENV_PATH": os.devnull, "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)})
            assert worker.returncode == 0, worker.stderr
            with_job = scrape(app)
            log = app.log_path.read_text(errors="replace")

    assert answer["reranked"] is True and answer["judged"] == llm.count > 0
    assert value(after, "mirofish_rerank_duration_seconds_count", outcome="judged") - \
        value(before, "mirofish_rerank_duration_seconds_count", outcome="judged") == 1
    assert value(after, "mirofish_rerank_passages_judged_total") - \
        value(before, "mirofish_rerank_passages_judged_total") == answer["judged"]
    assert value(after, "mirofish_rerank_score_cache_lookups_total", result="miss") - \
        value(before, "mirofish_rerank_score_cache_lookups_total", result="miss") == llm.count
    assert value(after, "mirofish_http_request_duration_seconds_count",
                 method="POST", route="/api/graph/<graph_id>/search", status="200") == 1
    assert value(after, "mirofish_rerank_breaker_state", state="closed") == 1
    assert value(with_job, "mirofish_jobs_finished_total", kind="report", outcome="done") == 1
    assert value(after, "mirofish_jobs_finished_total", kind="report", outcome="done") == 0
    assert any(name.startswith("counter_") for name in os.listdir(metrics_dir))  # the files the processes share
    # Multiprocess mode reads the shared files only: no per-process series, and no path in a label.
    assert not [key for key in with_job if key[0].startswith("process_")]
    assert not [key for key in with_job if any("harbor" in label for _, label in key[1])]

    assert request_id == SEARCH_ID
    search_lines = [line for line in log.splitlines() if f"[{SEARCH_ID}]" in line]
    assert [line for line in search_lines if "app.access" in line and "path=/api/graph/harbor/search status=200" in line]
    assert [line for line in log.splitlines() if " [-]: " in line]  # lines outside any request show "-"
