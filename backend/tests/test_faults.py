"""Faults between the API and its two servers, over real HTTP to the scripted model server and a
real embedded FalkorDB: every search still answers within its deadline, in first-stage order where
the reranker failed, with the same results (nothing lost or duplicated), one WARNING per failed rank
call, and /health counters that say what happened."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

import pytest

from app.graph import runtime as graphiti_adapter
from tests.conftest import unique_graph_id
from tests.support import scripted_llm
from tests.support.facts import WATER_FACTS
from tests.support.scripted_llm import (
    ScriptedLLMServer, always, delay, empty_choices, garbage, hang, judge, model_not_found, no_logprobs,
    rate_limited, server_error, truncated_json, unused_base_url, wrong_shape,
)

QUERY = "harbor water utility reservoir town"
LIMIT = 4  # x RERANKER_CANDIDATES=2: eight candidates reach the judge, the whole fact set
TIMEOUT_S, DEADLINE_S = 1, 3
MARGIN_S = 5.0  # first stage, query embedding and HTTP on a 2-core machine busy with other work
API_KEY = "sk-fault-SECRET-93be1"
FAST = dict(
    RERANKER_PROVIDER="ollama", RERANKER_MODEL="judge-model", RERANKER_SCORE_MODE="logprobs",
    RERANKER_API_KEY=API_KEY, RERANKER_TIMEOUT_S=TIMEOUT_S, RERANKER_DEADLINE_S=DEADLINE_S,
    # Failures of one test must not open the breaker for the next; the breaker has its own test.
    RERANKER_BREAKER_THRESHOLD=1000, RERANKER_CACHE_SIZE=0,
    # The judge's own order: these tests check the judge's failure handling; fusion has test_fusion.py.
    RERANKER_FUSION="none",
    RERANKER_PASSAGE_TIME="off",  # the scripted judge knows the facts by their text (time: test_passage_time.py)
)


# The judge's own order (alphabetical): one no first stage produces by chance, with distinct scores.
JUDGE_ORDER = sorted(fact["fact"] for fact in WATER_FACTS)


def judge_score(query: str, passage: str) -> float:
    return 0.9 - 0.1 * JUDGE_ORDER.index(passage)


@pytest.fixture(scope="module")
def llm():
    """One scripted server for the module: same URL, same settings, so the runtime is reused."""
    with ScriptedLLMServer() as server:
        yield server


@pytest.fixture(scope="module")
def water_graph():
    return {}


@pytest.fixture
def water(backend, water_graph):
    """The water facts in one graph, imported once per module (data survives runtime rebuilds)."""
    if "id" not in water_graph:
        _, client = backend()
        gid = unique_graph_id("faults")
        assert client.post("/api/graph", json={"graph_id": gid}).status_code == 201
        assert client.post(f"/api/graph/{gid}/facts", json={"facts": WATER_FACTS}).status_code == 201
        water_graph["id"] = gid
    return water_graph["id"]


def started(backend, **env):
    """The app on these settings with its graph runtime built, so /health shows reranker stats."""
    app, client = backend(**env)
    graphiti_adapter.GraphitiAdapter(app.config["APP_CONFIG"]).runtime
    return client


def search(client, gid, query=QUERY, limit=LIMIT):
    started = time.monotonic()
    response = client.post(f"/api/graph/{gid}/search", json={"query": query, "limit": limit})
    elapsed = time.monotonic() - started
    assert response.status_code == 200, response.get_data(as_text=True)
    body = response.get_json()
    assert body["error"] is None
    return body, elapsed


def stats(client) -> dict:
    return client.get("/health").get_json()["reranker"]["stats"]


def delta(after: dict, before: dict, name: str) -> int:
    return after[name] - before[name]


def warnings(caplog) -> list[logging.LogRecord]:
    """The app's own warnings (a library's, or what an earlier test left behind, are not the reranker's)."""
    return [record for record in caplog.records if record.levelno >= logging.WARNING and record.name.startswith(("app.", "graphiti_llm_rerank."))]


def assert_first_stage_order(body, limit=LIMIT):
    """Fallback: the first `limit` candidates in first-stage order, each once."""
    edges = body["edges"]
    assert [edge["first_stage_rank"] for edge in edges] == list(range(1, limit + 1))
    assert [edge["rank"] for edge in edges] == list(range(1, limit + 1))
    assert len({edge["uuid"] for edge in edges}) == limit


WHOLE_CALL_FAULTS = {
    "model_not_found": (always(model_not_found()), "NotFoundError"),
    "server_error": (always(server_error()), "InternalServerError"),
    "rate_limited": (always(rate_limited(retry_after=1)), "RateLimitError"),
    "hung_connection": (always(hang()), "TimeoutError"),
    "slow_reply": (always(delay(30, "Yes")), "TimeoutError"),
    "truncated_json": (always(truncated_json()), None),
    "empty_choices": (always(empty_choices()), "InvalidOutput"),
    "wrong_shape": (always(wrong_shape()), "InvalidOutput"),
    "garbage": (always(garbage()), "InvalidOutput"),
}


@pytest.mark.parametrize("fault", list(WHOLE_CALL_FAULTS))
def test_whole_call_fault_keeps_first_stage_order(backend, llm, water, caplog, fault):
    responder, error_class = WHOLE_CALL_FAULTS[fault]
    client = started(backend, RERANKER_BASE_URL=llm.base_url, **FAST)
    llm.wait_quiet()  # the previous case's cancelled requests may still be arriving (CI saw 9 counted for 8 sent)
    llm.responder, _ = responder, llm.reset()
    before = stats(client)
    with caplog.at_level(logging.WARNING):
        body, elapsed = search(client, water)
    after = stats(client)

    assert elapsed < DEADLINE_S + MARGIN_S
    assert_first_stage_order(body)
    [warning] = warnings(caplog)  # exactly one, from the reranker, naming the model
    assert warning.name == "graphiti_llm_rerank.ollama_reranker" and "'judge-model' failed" in warning.getMessage()
    assert (delta(after, before, "calls"), delta(after, before, "fallbacks")) == (1, 1)
    assert delta(after, before, "model_requests") >= 1
    # A failed call cancels the requests still in flight (a hang, a slow reply, an error that
    # stops the call); they may not have reached the server yet, depending on how busy the machine
    # is. Unusable answers fail passage by passage: every request is answered.
    assert 1 <= llm.count <= delta(after, before, "model_requests")
    if fault in ("truncated_json", "empty_choices", "wrong_shape", "garbage"):
        assert delta(after, before, "model_requests") == llm.count
    if error_class:
        assert after["errors"].get(error_class, 0) > before["errors"].get(error_class, 0), after["errors"]
    assert after["breaker"]["state"] == "closed"


def test_the_deadline_bounds_a_call_whose_requests_outlive_it(backend, water, caplog):
    with ScriptedLLMServer(always(hang())) as server:
        client = started(backend, RERANKER_BASE_URL=server.base_url,
                         **{**FAST, "RERANKER_TIMEOUT_S": 30, "RERANKER_DEADLINE_S": 1.5})
        with caplog.at_level(logging.WARNING):
            body, elapsed = search(client, water)
    assert 1.5 <= elapsed < 1.5 + MARGIN_S
    assert_first_stage_order(body)
    [warning] = warnings(caplog)
    assert "RankDeadlineExceeded" in warning.getMessage()
    assert stats(client)["errors"]["RankDeadlineExceeded"] == 1


def test_every_failed_call_logs_one_warning(backend, llm, water, caplog):
    client = started(backend, RERANKER_BASE_URL=llm.base_url, **FAST)
    llm.responder = always(server_error())
    before = stats(client)
    with caplog.at_level(logging.WARNING):
        for query in (QUERY, "who runs the bakery", "ferry to the island"):
            search(client, water, query)
    assert len(warnings(caplog)) == 3
    assert delta(stats(client), before, "fallbacks") == 3


@pytest.mark.parametrize("fault", ["server_error", "hang", "garbage"])
def test_one_failing_passage_alone_goes_last(backend, llm, water, caplog, fault):
    failing = "Harbor Bakery sells sourdough bread baked every morning"
    replies = {"server_error": server_error(), "hang": hang(), "garbage": garbage()}
    llm.responder = judge(lambda query, passage: replies[fault] if passage == failing else judge_score(query, passage))
    client = started(backend, RERANKER_BASE_URL=llm.base_url, **FAST)
    before = stats(client)
    with caplog.at_level(logging.WARNING):
        body, elapsed = search(client, water, limit=len(WATER_FACTS))
    after = stats(client)

    facts = [edge["fact"] for edge in body["edges"]]
    assert sorted(facts) == sorted(fact["fact"] for fact in WATER_FACTS)  # nothing lost, nothing twice
    assert facts == [fact for fact in JUDGE_ORDER if fact != failing] + [failing]
    assert elapsed < TIMEOUT_S * 2 + MARGIN_S
    assert warnings(caplog) == []  # a passage failure is not a failed call
    assert (delta(after, before, "passage_failures"), delta(after, before, "fallbacks")) == (1, 0)


def test_missing_logprobs_switch_to_json_scores(backend, water, caplog):
    with ScriptedLLMServer(judge(judge_score, logprobs=False)) as server:
        client = started(backend, RERANKER_BASE_URL=server.base_url, **{**FAST, "RERANKER_SCORE_MODE": "auto"})
        with caplog.at_level(logging.WARNING):
            body, _ = search(client, water, limit=len(WATER_FACTS))
        after = stats(client)
    assert [edge["fact"] for edge in body["edges"]] == JUDGE_ORDER
    assert after["score_mode_switches"] == 1 and after["score_mode_in_use"] == "json"
    assert after["fallbacks"] == 0 and warnings(caplog) == []


def test_a_logprobs_only_judge_without_logprobs_falls_back_to_the_word(backend, llm, water):
    llm.responder = always(no_logprobs("Yes"))
    client = started(backend, RERANKER_BASE_URL=llm.base_url, **FAST)
    before = stats(client)
    body, _ = search(client, water)
    after = stats(client)
    assert delta(after, before, "fallbacks") == 0  # "Yes" is an answer: every passage scores 1.0
    assert {edge["rerank_score"] for edge in body["edges"]} == {1.0}
    assert_first_stage_order(body)  # ties keep the incoming order


class _ScriptedServerOnPort(ScriptedLLMServer):
    """The scripted server on a chosen port, so a 'restarted' model server has the same URL."""

    def __init__(self, port: int, responder) -> None:
        super().__init__(responder)
        self._chosen_port = port

    def start(self):
        self._httpd = scripted_llm._HTTPServer(("127.0.0.1", self._chosen_port), scripted_llm._Handler, self)
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()
        return self


def test_model_server_down_then_back_resumes_without_restart(backend, water, caplog):
    base_url = unused_base_url()
    client = started(backend, RERANKER_BASE_URL=base_url, **FAST)
    runtime = graphiti_adapter._get_graphiti()
    with caplog.at_level(logging.WARNING):
        body, elapsed = search(client, water)
    assert_first_stage_order(body)
    assert elapsed < DEADLINE_S + MARGIN_S and len(warnings(caplog)) == 1
    assert stats(client)["errors"].get("APIConnectionError", 0) >= 1

    port = int(base_url.rsplit(":", 1)[1].split("/")[0])
    with _ScriptedServerOnPort(port, judge(judge_score)) as server:
        body, _ = search(client, water, limit=len(WATER_FACTS))
        assert server.count == len(WATER_FACTS)
    assert graphiti_adapter._get_graphiti() is runtime  # the same runtime: nothing was restarted
    assert [edge["fact"] for edge in body["edges"]] == JUDGE_ORDER
    assert stats(client)["fallbacks"] == 1


def test_breaker_opens_stops_paying_the_timeout_and_closes_on_recovery(backend, water, caplog):
    cooldown_s = 5.0  # still open when checked right after opening, on a busy machine too
    with ScriptedLLMServer(always(hang())) as server:
        settings = {**FAST, "RERANKER_BREAKER_THRESHOLD": 2, "RERANKER_BREAKER_COOLDOWN_S": cooldown_s}
        client = started(backend, RERANKER_BASE_URL=server.base_url, **settings)
        slow = [search(client, water, query)[1] for query in (QUERY, "bakery bread")]
        assert min(slow) >= TIMEOUT_S  # each paid the model's timeout
        health = stats(client)
        assert health["breaker"]["state"] == "open" and health["breaker"]["times_opened"] == 1
        assert health["fallbacks"] == 2

        requests_so_far = server.count
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            body, fast = search(client, water, "ferry island")
        assert fast < min(slow)  # the open breaker skips the model: no timeout paid
        assert server.count == requests_so_far
        assert_first_stage_order(body)
        [warning] = warnings(caplog)
        assert "circuit breaker is open" in warning.getMessage()
        assert stats(client)["breaker_skips"] == 1

        server.responder = judge(judge_score)
        deadline = time.monotonic() + 60
        while stats(client)["breaker"]["retry_in_s"] > 0:  # the cooldown is over: observed, not guessed
            assert time.monotonic() < deadline
            time.sleep(0.1)
        body, _ = search(client, water, limit=len(WATER_FACTS))
        assert [edge["fact"] for edge in body["edges"]] == JUDGE_ORDER
        assert stats(client)["breaker"]["state"] == "closed"


def _kill_graph_db_while(request, settle_s=0.3):
    """Freeze the embedded FalkorDB, start `request` in a thread, let it block on the database,
    then kill -9 the server under it: the database dies while the request is mid-way."""
    pid = graphiti_adapter._get_graphiti().embedded_db.process.pid
    os.kill(pid, signal.SIGSTOP)
    answer = {}
    worker = threading.Thread(target=lambda: answer.update(response=request()))
    worker.start()
    time.sleep(settle_s)
    assert worker.is_alive(), "the request finished without touching the frozen database"
    os.kill(pid, signal.SIGKILL)
    worker.join(timeout=10)
    assert not worker.is_alive(), "the request hangs after the database died"
    return answer["response"], pid


@pytest.mark.parametrize("operation", ["search", "stats", "import"])
def test_graph_db_dies_mid_request_then_the_app_restarts_it(backend, water, operation):
    app, client = backend()
    extra = {"source": "Harbor Island", "target": "Lighthouse", "relation": "has",
             "fact": "Harbor Island has a lighthouse built in 1871"}
    calls = {
        "search": lambda: client.post(f"/api/graph/{water}/search", json={"query": QUERY}),
        "stats": lambda: client.get(f"/api/graph/{water}/stats"),
        "import": lambda: client.post(f"/api/graph/{water}/facts", json={"facts": [extra]}),
    }
    before = client.get(f"/api/graph/{water}/stats").get_json()
    response, dead_pid = _kill_graph_db_while(calls[operation])

    body = response.get_json()
    assert body is not None, response.get_data(as_text=True)  # JSON, never an HTML stack trace
    # 503 with Retry-After naming the database, a search too: an empty result would read as "nothing found".
    assert response.status_code == 503 and response.headers["Retry-After"] == "5", body
    assert body["error"]["code"] == "graph_unavailable", body
    assert body["error"]["message"].startswith("the embedded FalkorDB does not answer"), body
    assert "Traceback" not in body["error"]["message"]

    # The next requests work: the app restarts the embedded database over the same data.
    after = client.get(f"/api/graph/{water}/stats")
    assert after.status_code == 200, after.get_json()
    assert graphiti_adapter._get_graphiti().embedded_db.process.pid != dead_pid
    assert after.get_json() == before  # nothing lost; the interrupted import stored nothing
    hits, _ = search(client, water, "drinking water")
    assert hits["edges"]
