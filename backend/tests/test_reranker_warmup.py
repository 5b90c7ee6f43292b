"""The cold start: a model server that loads the model on its first request (Ollama) gets the first
search judged, not timed out into the first-stage order. When the app builds the reranker it sends
one warm-up request with RERANKER_WARMUP_TIMEOUT_S to answer, and searches that arrive meanwhile wait
for it (app/rerank/warmup.py). A model that never becomes ready gives a fallback that says why, in the
answer, in /health and in one WARNING, within the warm-up's time.

Over real HTTP to the scripted server: its "loading" judge holds every request until the test lets
the model finish loading, as Ollama holds the requests that arrive while it loads the model."""

from __future__ import annotations

import logging
import threading
import time

from app.graph.runtime import GraphitiAdapter
from app.rerank.judge import WARMUP_PASSAGE
from tests.support.scripted_llm import always, hang, judge

QUERY = "harbor water utility reservoir town"
TIMEOUT_S = 1.0  # RERANKER_TIMEOUT_S: a warm request answers at once; loading takes longer
LOAD_S = 3.0  # how long the scripted model takes to load, from its first request
WARMUP_S = 30.0  # RERANKER_WARMUP_TIMEOUT_S: generous, as for a real model
LIMIT = 4


def loading_judge(loaded: threading.Event):
    """A judge whose requests wait until `loaded` is set (the model is in memory), then answer."""

    def score(query: str, passage: str) -> float:
        loaded.wait(60)
        return 0.9 if "water" in passage.lower() else 0.2

    return judge(score)


def reranking_backend(backend, base_url: str, **settings):
    return backend(RERANKER_PROVIDER="ollama", RERANKER_BASE_URL=base_url, RERANKER_MODEL="judge-model",
                   RERANKER_SCORE_MODE="logprobs", RERANKER_TIMEOUT_S=TIMEOUT_S, RERANKER_DEADLINE_S=60,
                   RERANKER_BREAKER_THRESHOLD=100, **settings)


def warnings_in(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records
            if record.levelno >= logging.WARNING and record.name.startswith("app.")]


def search(client, gid: str) -> dict:
    response = client.post(f"/api/graph/{gid}/search", json={"query": QUERY, "limit": LIMIT})
    assert response.status_code == 200, response.get_json()
    return response.get_json()


def test_the_first_search_waits_for_the_model_to_load_and_is_judged(backend, scripted_llm, water_graph, caplog):
    loaded = threading.Event()
    scripted_llm.responder = loading_judge(loaded)
    _, client = reranking_backend(backend, scripted_llm.base_url, RERANKER_WARMUP_TIMEOUT_S=WARMUP_S)
    GraphitiAdapter().runtime  # the app builds the reranker: the warm-up request goes out
    warmup = client.get("/health").get_json()["reranker"]["stats"]["warmup"]
    assert warmup["state"] == "warming" and warmup["timeout_s"] == WARMUP_S
    threading.Timer(LOAD_S, loaded.set).start()  # longer than RERANKER_TIMEOUT_S, shorter than the warm-up's

    started = time.monotonic()
    body = search(client, water_graph)
    waited = time.monotonic() - started

    assert body["reranked"] is True and body["rerank_fallback"] is None
    assert body["judged"] == body["candidates"] > 0
    assert all(edge["rerank_score"] is not None for edge in body["edges"])
    assert waited >= LOAD_S - 1.0  # it did wait for the load (the timer started just before it)
    # The warm-up was the first request; each candidate was then judged once, none timed out.
    assert scripted_llm.requests[0]["messages"][-1]["content"].count(WARMUP_PASSAGE) == 1
    assert scripted_llm.count == 1 + body["candidates"]
    stats = client.get("/health").get_json()["reranker"]["stats"]
    assert stats["warmup"]["state"] == "ready" and stats["warmup"]["seconds"] >= LOAD_S - 1.0
    assert stats["fallbacks"] == 0 and stats["errors"] == {} and stats["passage_failures"] == 0
    assert warnings_in(caplog) == []


def test_without_the_warm_up_the_same_server_times_the_first_search_out(backend, scripted_llm, water_graph,
                                                                        caplog):
    """The failure the warm-up prevents, on the same scripted load."""
    loaded = threading.Event()
    scripted_llm.responder = loading_judge(loaded)
    _, client = reranking_backend(backend, scripted_llm.base_url, RERANKER_WARMUP_TIMEOUT_S=0)
    GraphitiAdapter().runtime
    assert client.get("/health").get_json()["reranker"]["stats"]["warmup"] == {"state": "off"}
    timer = threading.Timer(LOAD_S, loaded.set)
    timer.start()
    try:
        body = search(client, water_graph)
    finally:
        timer.cancel()
        loaded.set()
    assert body["reranked"] is False and body["rerank_fallback"].startswith("NotSent: ")
    [warning] = warnings_in(caplog)
    assert "timed out" in warning


def test_a_model_that_never_becomes_ready_falls_back_and_says_why(backend, water_graph, caplog):
    from tests.support.scripted_llm import ScriptedLLMServer

    # Long enough for the app's start (which starts the embedded database after the warm-up) and the
    # first stage on a busy machine: the search must reach the reranker while the warm-up runs, since
    # a call that comes after a failed warm-up tries the model itself.
    warmup_s = 6.0
    with ScriptedLLMServer(always(hang())) as server:
        _, client = reranking_backend(backend, server.base_url, RERANKER_WARMUP_TIMEOUT_S=warmup_s)
        started = time.monotonic()
        GraphitiAdapter().runtime  # the app builds the reranker: the warm-up request goes out
        assert client.get("/health").get_json()["reranker"]["stats"]["warmup"]["state"] == "warming"
        body = search(client, water_graph)
        elapsed = time.monotonic() - started
        sent = server.count

    # The first stage's order, answered within the warm-up's time (plus the app's start), not a hang.
    assert body["reranked"] is False and body["judged"] == 0
    assert [edge["first_stage_rank"] for edge in body["edges"]] == list(range(1, len(body["edges"]) + 1))
    assert all(edge["rerank_score"] is None for edge in body["edges"])
    assert warmup_s <= elapsed < warmup_s + 15
    said = f"did not answer its warm-up request within {warmup_s:g}s"
    assert body["rerank_fallback"].startswith("ModelNotReady: ") and said in body["rerank_fallback"]
    [warning] = warnings_in(caplog)
    assert "ModelNotReady" in warning and said in warning
    assert sent == 1  # only the warm-up: the search sent nothing to a model that was not ready
    stats = client.get("/health").get_json()["reranker"]["stats"]
    assert stats["warmup"]["state"] == "not_ready" and said in stats["warmup"]["detail"]
    assert stats["last_error"] == "ModelNotReady" and said in stats["last_error_detail"]
    assert stats["fallbacks"] == 1


def test_a_warm_up_refused_by_the_server_leaves_the_search_to_report_the_error_once(backend, water_graph, caplog):
    """An unknown model is not a load in progress: the search does not wait for it and reports the
    server's own 404 as before, in one WARNING."""
    from tests.support.scripted_llm import ScriptedLLMServer

    with ScriptedLLMServer(models={"another-model"}) as server:
        _, client = reranking_backend(backend, server.base_url, RERANKER_WARMUP_TIMEOUT_S=WARMUP_S)
        started = time.monotonic()
        body = search(client, water_graph)
        elapsed = time.monotonic() - started

    assert body["reranked"] is False and body["rerank_fallback"].startswith("NotFoundError: ")
    assert "judge-model" in body["rerank_fallback"]
    assert elapsed < WARMUP_S / 2  # not the warm-up's time: nothing was loading
    [warning] = warnings_in(caplog)
    assert "NotFoundError" in warning
    warmup = client.get("/health").get_json()["reranker"]["stats"]["warmup"]
    assert warmup["state"] == "failed" and "NotFoundError" in warmup["detail"]
