"""The cold start: a model server that loads the model on its first request (Ollama) gets the app's
traffic only once the model is in memory, and no search waits for the load beyond its own limits.
When the app builds the reranker it sends one warm-up request with RERANKER_WARMUP_TIMEOUT_S to
answer (graphiti_llm_rerank/warmup.py); meanwhile GET /health/ready answers 503 naming the load, and a search
that comes anyway waits at most RERANKER_TIMEOUT_S, then keeps the first-stage order and says why, in
the answer, in /health and in one WARNING. A warm-up that failed keeps readiness red, naming why,
until another one (started by the readiness check itself) gets an answer.

Over real HTTP to the scripted server: its "loading" judge holds every request until the test lets
the model finish loading, as Ollama holds the requests that arrive while it loads the model."""

from __future__ import annotations

import logging
import threading
import time

from app.graph.runtime import GraphitiAdapter
from graphiti_llm_rerank.judge import WARMUP_PASSAGE
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
    return backend(**{"RERANKER_PROVIDER": "ollama", "RERANKER_BASE_URL": base_url, "RERANKER_MODEL": "judge-model",
                      "RERANKER_SCORE_MODE": "logprobs", "RERANKER_TIMEOUT_S": TIMEOUT_S, "RERANKER_DEADLINE_S": 60,
                      "RERANKER_BREAKER_THRESHOLD": 100, **settings})


def warnings_in(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records
            if record.levelno >= logging.WARNING and record.name.startswith(("app.", "graphiti_llm_rerank."))]


def search(client, gid: str) -> dict:
    response = client.post(f"/api/graph/{gid}/search", json={"query": QUERY, "limit": LIMIT})
    assert response.status_code == 200, response.get_json()
    return response.get_json()


def readiness(client) -> tuple[int, dict]:
    response = client.get("/health/ready")
    return response.status_code, response.get_json()


def assert_not_ready(client, says: str) -> dict:
    """503 reranker_not_ready with Retry-After, the database ready, the reason containing `says`."""
    response = client.get("/health/ready")
    body = response.get_json()
    assert response.status_code == 503, body
    assert response.headers.get("Retry-After")
    assert body["status"] == "not_ready" and body["database"] == "ready", body
    assert body["error"]["code"] == "reranker_not_ready" and says in body["error"]["message"], body
    assert body["reranker"] == body["error"]["message"]
    return body


def ready_within(client, seconds: float) -> float:
    """Poll readiness until 200; how long it took (fails after `seconds`)."""
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        status, body = readiness(client)
        if status == 200:
            assert body == {"status": "ready", "database": "ready", "reranker": "ready", "queue": "ready"}
            return time.monotonic() - started
        time.sleep(0.1)
    raise AssertionError(f"not ready within {seconds}s: {readiness(client)}")


def warmup_ended(client, within_s: float = 30) -> dict:
    deadline = time.monotonic() + within_s
    while (warmup := client.get("/health").get_json()["reranker"]["stats"]["warmup"])["state"] == "warming":
        assert time.monotonic() < deadline, warmup
        time.sleep(0.05)
    return warmup


def test_readiness_waits_for_the_model_to_load_and_a_search_meanwhile_does_not(backend, scripted_llm, water_graph,
                                                                               caplog):
    loaded = threading.Event()
    scripted_llm.responder = loading_judge(loaded)
    _, client = reranking_backend(backend, scripted_llm.base_url, RERANKER_WARMUP_TIMEOUT_S=WARMUP_S)
    GraphitiAdapter().runtime  # the app builds the reranker: the warm-up request goes out
    warmup = client.get("/health").get_json()["reranker"]["stats"]["warmup"]
    assert warmup["state"] == "warming" and warmup["timeout_s"] == WARMUP_S
    assert_not_ready(client, "the reranker's model 'judge-model' is loading")

    # A search that comes anyway waits one RERANKER_TIMEOUT_S for the load, then keeps the first stage.
    started = time.monotonic()
    early = search(client, water_graph)
    waited = time.monotonic() - started
    assert early["reranked"] is False and early["judged"] == 0
    assert early["rerank_fallback"].startswith("ModelNotReady: the model is still loading"), early
    assert TIMEOUT_S - 0.1 <= waited < TIMEOUT_S + 10
    assert scripted_llm.count == 1  # only the warm-up: the search sent the loading model nothing
    [warning] = warnings_in(caplog)
    assert "ModelNotReady" in warning and "still loading" in warning

    threading.Timer(LOAD_S, loaded.set).start()  # longer than RERANKER_TIMEOUT_S, shorter than the warm-up's
    assert ready_within(client, LOAD_S + 30) >= LOAD_S - 1.0  # ready once the model answered, not before
    body = search(client, water_graph)
    assert body["reranked"] is True and body["rerank_fallback"] is None
    assert body["judged"] == body["candidates"] > 0
    assert all(edge["rerank_score"] is not None for edge in body["edges"])
    # The warm-up was the first request; each candidate was then judged once, none timed out.
    assert scripted_llm.requests[0]["messages"][-1]["content"].count(WARMUP_PASSAGE) == 1
    assert scripted_llm.count == 1 + body["candidates"]
    stats = client.get("/health").get_json()["reranker"]["stats"]
    assert stats["warmup"]["state"] == "ready" and stats["warmup"]["seconds"] >= LOAD_S - 1.0
    assert stats["fallbacks"] == 1 and stats["errors"] == {"ModelNotReady": 1} and stats["passage_failures"] == 0
    assert stats["breaker"]["consecutive_failures"] == 0  # the model was not asked: no failure of it
    assert len(warnings_in(caplog)) == 1


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


def test_a_search_during_a_warm_up_that_hangs_falls_back_within_the_timeout_and_says_why(backend, water_graph,
                                                                                          caplog):
    """The start this replaces: against a model server that accepts and never answers, the first search
    waited for the whole 120 s warm-up (115.7 s measured with RERANKER_TIMEOUT_S=3)."""
    from tests.support.scripted_llm import ScriptedLLMServer

    timeout_s, warmup_s = 3.0, 120.0
    with ScriptedLLMServer(always(hang())) as server:
        _, client = reranking_backend(backend, server.base_url, RERANKER_TIMEOUT_S=timeout_s,
                                      RERANKER_WARMUP_TIMEOUT_S=warmup_s)
        GraphitiAdapter().runtime  # the app builds the reranker: the warm-up request goes out
        assert client.get("/health").get_json()["reranker"]["stats"]["warmup"]["state"] == "warming"
        assert_not_ready(client, "is loading: its warm-up request has run")
        started = time.monotonic()
        body = search(client, water_graph)
        elapsed = time.monotonic() - started
        sent = server.count
        logging.getLogger(__name__).info("search during a hanging warm-up: %.1fs (RERANKER_TIMEOUT_S=%gs)",
                                         elapsed, timeout_s)
        assert_not_ready(client, "is loading")  # still: the warm-up has its own time

    # The first stage's order within the search's own timeout (plenty of slack: a busy machine), not a hang.
    assert body["reranked"] is False and body["judged"] == 0
    assert [edge["first_stage_rank"] for edge in body["edges"]] == list(range(1, len(body["edges"]) + 1))
    assert all(edge["rerank_score"] is None for edge in body["edges"])
    assert timeout_s - 0.1 <= elapsed < timeout_s + 10
    said = f"the model is still loading (its warm-up request has run"
    assert body["rerank_fallback"].startswith(f"ModelNotReady: {said}") and f"of up to {warmup_s:g}s" in body[
        "rerank_fallback"]
    [warning] = warnings_in(caplog)
    assert "ModelNotReady" in warning and said in warning
    assert sent == 1  # only the warm-up: the search sent nothing to a model that was not ready
    stats = client.get("/health").get_json()["reranker"]["stats"]
    assert stats["last_error"] == "ModelNotReady" and said in stats["last_error_detail"]
    assert stats["fallbacks"] == 1


def test_a_warm_up_that_got_no_answer_keeps_readiness_red_and_the_next_check_tries_again(backend, water_graph):
    from tests.support.scripted_llm import ScriptedLLMServer

    warmup_s = 2.0
    with ScriptedLLMServer(always(hang())) as server:
        _, client = reranking_backend(backend, server.base_url, RERANKER_WARMUP_TIMEOUT_S=warmup_s)
        GraphitiAdapter().runtime
        assert warmup_ended(client)["state"] == "not_ready" and server.count == 1
        deadline = time.monotonic() + 30
        assert_not_ready(client, f"is not ready: the model did not answer its warm-up request within {warmup_s:g}s")
        while server.count < 2:  # the check started another warm-up
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert_not_ready(client, "is loading")  # which is running now
        server.responder = judge(lambda query, passage: 0.9)  # the server answers again
        # The next warm-up after the hung one gets an answer: ready without any search.
        ready_within(client, warmup_s + 30)
    assert client.get("/health").get_json()["reranker"]["stats"]["warmup"]["state"] == "ready"


def test_a_warm_up_refused_by_the_server_leaves_the_search_to_report_the_error_once(backend, water_graph, caplog):
    """An unknown model is not a load in progress: a search after the warm-up's 404 tries the model
    itself and reports the server's own 404 as before, in one WARNING; readiness names it."""
    from tests.support.scripted_llm import ScriptedLLMServer

    with ScriptedLLMServer(models={"another-model"}) as server:
        _, client = reranking_backend(backend, server.base_url, RERANKER_WARMUP_TIMEOUT_S=WARMUP_S)
        GraphitiAdapter().runtime
        assert warmup_ended(client)["state"] == "failed"
        started = time.monotonic()
        body = search(client, water_graph)
        elapsed = time.monotonic() - started

        assert body["reranked"] is False and body["rerank_fallback"].startswith("NotFoundError: ")
        assert "judge-model" in body["rerank_fallback"]
        assert elapsed < WARMUP_S / 2  # nothing was loading
        [warning] = warnings_in(caplog)
        assert "NotFoundError" in warning
        warmup = client.get("/health").get_json()["reranker"]["stats"]["warmup"]
        assert warmup["state"] == "failed" and "NotFoundError" in warmup["detail"]
        # Not ready, naming the server's answer; once the server has the model, the warm-up that the
        # readiness check starts gets an answer, and the app is ready.
        assert_not_ready(client, "the reranker's model 'judge-model' is not ready: NotFoundError")
        server.models.add("judge-model")
        ready_within(client, 30)
