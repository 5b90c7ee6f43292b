"""GET /metrics in one process (the test process: PROMETHEUS_MULTIPROC_DIR unset), on the real app:
request latency by route, never by path; the job queue's hooks; the settings."""

from __future__ import annotations

import logging

import pytest
from prometheus_client.parser import text_string_to_metric_families

from app import create_app
from app.config import Config
from app.metrics import JOBS_FINISHED, job_finished, register_queue_depth

TOKEN = "tok-SECRET-metrics-5e0a"


def scrape(client, **headers) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted labels): value} of one scrape."""
    response = client.get("/metrics", headers=headers)
    assert response.status_code == 200, response.get_data(as_text=True)
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(response.get_data(as_text=True))
            for sample in family.samples}


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def requests_counted(samples: dict, method: str, route: str, status: str) -> float:
    return value(samples, "mirofish_http_request_duration_seconds_count", method=method, route=route, status=status)


def test_request_latency_is_labelled_by_route_method_and_status_never_by_path(client):
    before = scrape(client)
    client.get("/api/tasks/t_secret0a1b2c")
    client.get("/api/tasks/t_secret3d4e5f")
    client.get("/no/such/x9y8z7")
    client.open("/metrics", method="BREW")
    response = client.get("/metrics")
    after = scrape(client)
    text = response.get_data(as_text=True)
    assert requests_counted(after, "GET", "/api/tasks/<task_id>", "404") - \
        requests_counted(before, "GET", "/api/tasks/<task_id>", "404") == 2
    assert requests_counted(after, "GET", "unmatched", "404") - requests_counted(before, "GET", "unmatched", "404") == 1
    # An unknown method is "other", whatever the client sent: the labels stay a short list.
    assert requests_counted(after, "other", "unmatched", "405") - requests_counted(before, "other", "unmatched", "405") == 1
    assert requests_counted(after, "GET", "/metrics", "200") >= 2
    assert "t_secret" not in text and "x9y8z7" not in text and "BREW" not in text
    assert 'le="300.0"' in text  # searches may take SEARCH_TIMEOUT_S: the buckets reach that far
    assert "process_resident_memory_bytes" in text  # one process: the library's own process metrics too


def test_metrics_need_the_token_when_one_is_set(backend):
    _, client = backend(API_TOKEN=TOKEN)
    refused = client.get("/metrics")
    assert refused.status_code == 401 and refused.get_json()["error"]["code"] == "unauthorized"
    assert "mirofish_" not in refused.get_data(as_text=True)
    assert client.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    samples = scrape(client, Authorization=f"Bearer {TOKEN}")
    assert requests_counted(samples, "GET", "/metrics", "401") >= 2  # refused scrapes are counted too


def test_a_scraper_that_asks_for_openmetrics_gets_it(client):
    response = client.get("/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("application/openmetrics-text")
    assert response.get_data(as_text=True).endswith("# EOF\n")
    plain = client.get("/metrics")
    assert plain.headers["Content-Type"].startswith("text/plain") and "# EOF" not in plain.get_data(as_text=True)


def test_queue_depths_come_from_the_registered_callables_at_each_scrape(client, caplog):
    depths = {"default": 3, "reports": 0}

    def broken():
        raise ConnectionError("broker down")

    remove = register_queue_depth(lambda: depths)
    remove_broken = register_queue_depth(broken)
    try:
        with caplog.at_level(logging.WARNING, logger="app.metrics"):
            first = scrape(client)
            depths["default"] = 7
            second = scrape(client)
    finally:
        remove()
        remove_broken()
    assert value(first, "mirofish_queue_depth", queue="default") == 3
    assert ("mirofish_queue_depth", (("queue", "reports"),)) in first
    assert value(second, "mirofish_queue_depth", queue="default") == 7
    assert "broker down" in caplog.text  # a failing source is logged and left out; the scrape still answers
    assert [key for key in scrape(client) if key[0] == "mirofish_queue_depth"] == []  # removed: gone


def test_job_outcomes_are_counted_by_kind_and_outcome(client):
    before = scrape(client)
    job_finished("report", "done")
    job_finished("report", "done")
    JOBS_FINISHED.labels(kind="episodes", outcome="failed").inc()
    after = scrape(client)
    assert value(after, "mirofish_jobs_finished_total", kind="report", outcome="done") - \
        value(before, "mirofish_jobs_finished_total", kind="report", outcome="done") == 2
    assert value(after, "mirofish_jobs_finished_total", kind="episodes", outcome="failed") - \
        value(before, "mirofish_jobs_finished_total", kind="episodes", outcome="failed") == 1


def test_the_settings(monkeypatch, tmp_path):
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    config = Config.from_env()
    assert config.prometheus_multiproc_dir is None and config.access_log is True
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    monkeypatch.setenv("ACCESS_LOG", "off")
    config = Config.from_env()
    assert config.prometheus_multiproc_dir == tmp_path and config.access_log is False
    for bad in (str(tmp_path / "missing"), str(tmp_path / "a-file")):
        (tmp_path / "a-file").write_text("")
        monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", bad)
        with pytest.raises(ValueError, match="PROMETHEUS_MULTIPROC_DIR must be an existing, writable directory"):
            Config.from_env()
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR")
    monkeypatch.setenv("ACCESS_LOG", "maybe")
    with pytest.raises(ValueError, match="ACCESS_LOG"):
        Config.from_env()


def test_a_multiprocess_directory_the_library_did_not_see_is_refused_at_start(tmp_path):
    # The library chose single-process mode when it was imported (this process started without the
    # variable): workers would each count on their own, so the app refuses to start.
    with pytest.raises(RuntimeError, match="PROMETHEUS_MULTIPROC_DIR must be set .* in the environment"):
        create_app(Config(prometheus_multiproc_dir=tmp_path))
    assert create_app(Config()) is not None
