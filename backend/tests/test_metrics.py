"""GET /metrics in one process (the test process: PROMETHEUS_MULTIPROC_DIR unset), on the real app:
request latency by route, never by path; the reranker's latency, passages judged, score cache and
circuit breaker over real HTTP to the scripted judge and the scripted rerank API; the job queue's hooks;
the settings. Several processes adding up: tests/test_metrics_served.py."""

from __future__ import annotations

import asyncio
import logging

import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from app import create_app
from app.config import Config
from app.metrics import JOBS_FINISHED, job_finished, register_queue_depth
from graphiti_llm_rerank.providers import shared_breaker
from graphiti_llm_rerank.rerank_api import RerankApiReranker
from graphiti_llm_rerank.circuit_breaker import CircuitBreaker
from graphiti_llm_rerank.rerank_api_client import RerankApiClient
from tests.support.scripted_llm import judge, server_error
from tests.support.scripted_rerank_api import ScriptedRerankApi

TOKEN = "tok-SECRET-metrics-5e0a"
QUERY = "harbor water utility reservoir town"


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


def rank_calls(samples: dict, outcome: str) -> float:
    return value(samples, "mirofish_rerank_duration_seconds_count", outcome=outcome)


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


def _judging(backend, llm, **extra):
    return backend(RERANKER_PROVIDER="ollama", RERANKER_BASE_URL=llm.base_url, RERANKER_MODEL="judge-model",
                   RERANKER_SCORE_MODE="logprobs", RERANKER_TIMEOUT_S=5, **extra)


def test_a_reranked_search_is_timed_and_its_judged_passages_and_cache_lookups_counted(
        backend, scripted_llm, water_graph):
    _, client = _judging(backend, scripted_llm)
    before = scrape(client)
    first = client.post(f"/api/graph/{water_graph}/search", json={"query": QUERY, "limit": 4}).get_json()
    after_first = scrape(client)
    requests_sent = scripted_llm.count
    second = client.post(f"/api/graph/{water_graph}/search", json={"query": QUERY, "limit": 4}).get_json()
    after_second = scrape(client)

    def grew(name: str, since: dict, until: dict, **labels) -> float:
        return value(until, name, **labels) - value(since, name, **labels)

    assert first["reranked"] and first["judged"] == 8 and requests_sent == 8
    assert grew("mirofish_rerank_duration_seconds_count", before, after_first, outcome="judged") == 1
    assert grew("mirofish_rerank_passages_judged_total", before, after_first) == 8
    assert grew("mirofish_rerank_score_cache_lookups_total", before, after_first, result="miss") == 8
    assert grew("mirofish_rerank_score_cache_lookups_total", before, after_first, result="hit") == 0
    # The same search again: every score from the cache, no model request, still eight judged.
    assert second["judged"] == 8 and scripted_llm.count == requests_sent
    assert grew("mirofish_rerank_duration_seconds_count", after_first, after_second, outcome="judged") == 1
    assert grew("mirofish_rerank_passages_judged_total", after_first, after_second) == 8
    assert grew("mirofish_rerank_score_cache_lookups_total", after_first, after_second, result="hit") == 8
    assert grew("mirofish_rerank_score_cache_lookups_total", after_first, after_second, result="miss") == 0
    assert grew("mirofish_rerank_duration_seconds_sum", before, after_first, outcome="judged") > 0
    assert requests_counted(after_second, "POST", "/api/graph/<graph_id>/search", "200") - \
        requests_counted(before, "POST", "/api/graph/<graph_id>/search", "200") == 2


def test_the_breaker_gauge_follows_the_shared_breaker_and_a_fallback_is_counted(backend, scripted_llm, water_graph):
    scripted_llm.responder = judge(lambda query, passage: server_error())
    _, client = _judging(backend, scripted_llm, RERANKER_BREAKER_THRESHOLD=1, RERANKER_BREAKER_COOLDOWN_S=0)
    before = scrape(client)
    failed = client.post(f"/api/graph/{water_graph}/search", json={"query": QUERY, "limit": 2}).get_json()
    opened = scrape(client)
    scripted_llm.responder = judge(lambda query, passage: 0.5)
    recovered = client.post(f"/api/graph/{water_graph}/search", json={"query": QUERY + " council", "limit": 2})
    closed = scrape(client)

    def states(samples):
        return {state: value(samples, "mirofish_rerank_breaker_state", state=state)
                for state in ("closed", "half_open", "open")}

    assert failed["reranked"] is False
    assert states(opened) == {"closed": 0, "half_open": 0, "open": 1}
    assert rank_calls(opened, "fell_back") - rank_calls(before, "fell_back") == 1
    assert value(opened, "mirofish_rerank_passages_judged_total") == value(before, "mirofish_rerank_passages_judged_total")
    assert recovered.get_json()["reranked"] is True
    assert states(closed) == {"closed": 1, "half_open": 0, "open": 0}  # through half_open, closed by a success


def test_a_breaker_reports_each_state_it_enters_once():
    now = [0.0]
    breaker = CircuitBreaker(2, 10, clock=lambda: now[0])
    seen: list[str] = []
    breaker.report_to(seen.append)
    breaker.record_success()  # still closed: nothing new
    breaker.record_failure()
    breaker.record_failure()  # the second in a row opens it
    assert not breaker.allow()
    now[0] = 11
    assert breaker.allow()  # cool-down over: half_open
    breaker.record_failure()  # one failure re-opens it
    now[0] = 22
    breaker.allow()
    breaker.record_success()
    assert seen == ["closed", "open", "half_open", "open", "half_open", "closed"]


def test_the_rerank_api_provider_counts_its_cache_and_reports_its_shared_breaker():
    passages = ["The water utility runs the reservoir.", "A bakery opened downtown.", "The harbor town votes."]

    def sample(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    with ScriptedRerankApi("cohere") as server:
        reranker = RerankApiReranker(RerankApiClient(base_url=server.base_url, model="m", api_key=None))
        misses, hits = (sample("mirofish_rerank_score_cache_lookups_total", result=result) for result in ("miss", "hit"))
        asyncio.run(reranker.judge_positions(QUERY, passages))
        assert sample("mirofish_rerank_score_cache_lookups_total", result="miss") - misses == 3
        asyncio.run(reranker.judge_positions(QUERY, passages))
        assert sample("mirofish_rerank_score_cache_lookups_total", result="hit") - hits == 3
        assert server.count == 1

        config = Config(reranker_provider="rerank_api", reranker_base_url=server.base_url,
                        reranker_model="shared-metrics-test", reranker_breaker_threshold=2)
        breaker = shared_breaker(config)
        assert sample("mirofish_rerank_breaker_state", state="closed") == 1
        breaker.record_failure()
        breaker.record_failure()
        assert sample("mirofish_rerank_breaker_state", state="open") == 1
        assert sample("mirofish_rerank_breaker_state", state="closed") == 0
        breaker.record_success()
        assert sample("mirofish_rerank_breaker_state", state="closed") == 1


def test_a_private_breaker_does_not_move_the_gauge():
    shared = shared_breaker(Config(reranker_provider="rerank_api", reranker_base_url="http://127.0.0.1:9",
                                   reranker_model="gauge-private-test"))
    shared.record_success()
    private = CircuitBreaker(1, 30)
    private.record_failure()
    assert REGISTRY.get_sample_value("mirofish_rerank_breaker_state", {"state": "open"}) == 0


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
