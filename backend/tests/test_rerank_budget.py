"""Anytime reranking: when RERANKER_BUDGET_S or the deadline ends a rank call, the scores it finished
are kept and the unjudged passages keep their first-stage place; only a call that judged nothing
falls back. Over real HTTP to the scripted judge, whose requests answer at once or hang, so what
finishes inside the time does not depend on how busy the machine is."""

from __future__ import annotations

import asyncio
import json
import logging
import time

import pytest

from app.graph.runtime import GraphitiAdapter
from graphiti_llm_rerank.judge import LLMJudge
from graphiti_llm_rerank.ollama_reranker import OllamaReranker
from graphiti_llm_rerank.strategies.registry import get_strategy
from tests.conftest import unique_graph_id
from tests.support.facts import WATER_FACTS
from tests.support.scripted_llm import ScriptedLLMServer, always, hang, judge, server_error

QUERY = "which passage answers?"
PASSAGES = [f"passage number {index}" for index in range(6)]
# The judge's scores: rising down the list, so the judge reverses whatever it finishes.
SCORES = {passage: 0.1 + 0.1 * index for index, passage in enumerate(PASSAGES)}
MARGIN_S = 3.0  # scheduling and HTTP on a busy 2-core machine


def first_three_then_hang(score_fn=lambda query, passage: SCORES[passage]):
    """Requests 0-2 are answered at once; every later one hangs."""
    answer = judge(score_fn)
    return lambda request: answer(request) if request.index < 3 else hang()


def passages_0_to_2_then_hang():
    """Passages 0-2 are answered at once, every other one hangs. Keyed by passage, not arrival:
    with two requests in flight, passages 2 and 3 reach the server in either order."""
    return judge(lambda query, passage: SCORES[passage] if passage in PASSAGES[:3] else hang())


def reranker(base_url: str, *, budget_s: float = 0.0, deadline_s: float = 30.0, max_parallel: int = 1,
             cache_size: int = 100, strategy=None) -> OllamaReranker:
    judge_ = LLMJudge(model="judge-model", base_url=base_url, api_key="k", score_mode="logprobs",
                      max_parallel=max_parallel, timeout_s=30.0, cache_size=cache_size)
    return OllamaReranker(judge=judge_, strategy=strategy, deadline_s=deadline_s, budget_s=budget_s,
                          breaker_threshold=1000)


def judged(reranker_: OllamaReranker, passages=PASSAGES):
    """(judgement, seconds) of one judge_positions call."""
    async def go():
        try:
            return await reranker_.judge_positions(QUERY, passages)
        finally:
            await reranker_.aclose()

    started = time.monotonic()
    judgement = asyncio.run(go())
    return judgement, time.monotonic() - started


def warnings_in(caplog):
    return [r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith(("app.", "graphiti_llm_rerank."))]


def test_the_budget_keeps_the_finished_scores_and_the_rest_keeps_its_place(caplog):
    with ScriptedLLMServer(first_three_then_hang()) as server:
        ranker = reranker(server.base_url, budget_s=1.0)
        with caplog.at_level(logging.INFO):
            judgement, elapsed = judged(ranker)
        requests = [body["messages"][-1]["content"] for body in server.requests]

    assert 1.0 <= elapsed < 1.0 + MARGIN_S
    assert (judgement.judged, judgement.candidates, judgement.cut_short) == (3, 6, "budget")
    assert not judgement.fell_back and judgement.reranked
    assert judgement.evidence == pytest.approx({0: 0.1, 1: 0.2, 2: 0.3})
    # Best first: the first stage's order, one request at a time (RERANKER_MAX_PARALLEL=1), and the
    # fourth request was the one the budget cut; passages 4 and 5 were never sent.
    assert [next(p for p in PASSAGES if p in text) for text in requests] == PASSAGES[:4]
    assert warnings_in(caplog) == []  # a budget is a choice, not a fault
    assert "budget ended after 3 of 6 passages were judged" in caplog.text
    stats = ranker.stats()
    assert (stats["fallbacks"], stats["breaker"]["state"]) == (0, "closed")


def test_rank_answers_the_judged_reordered_in_their_places_and_the_rest_in_first_stage_order():
    with ScriptedLLMServer(first_three_then_hang()) as server:
        ranker = reranker(server.base_url, budget_s=1.0)

        async def go():
            try:
                return await ranker.rank(QUERY, PASSAGES)
            finally:
                await ranker.aclose()

        ranked = asyncio.run(go())
    # Judged 0, 1, 2 take places 0-2 in the judge's order (2, 1, 0); 3, 4, 5 stay where they were.
    assert [passage for passage, _ in ranked] == [PASSAGES[i] for i in (2, 1, 0, 3, 4, 5)]
    scores = [score for _, score in ranked]
    assert scores == sorted(scores, reverse=True) and min(scores) > 0


def test_a_passed_deadline_keeps_the_finished_scores_with_one_warning(caplog):
    with ScriptedLLMServer(passages_0_to_2_then_hang()) as server:
        ranker = reranker(server.base_url, deadline_s=1.0, max_parallel=2)
        with caplog.at_level(logging.WARNING):
            judgement, elapsed = judged(ranker)
        peak = server.peak_in_flight

    assert 1.0 <= elapsed < 1.0 + MARGIN_S
    assert (judgement.judged, judgement.cut_short, judgement.fell_back) == (3, "deadline", False)
    assert set(judgement.evidence) == {0, 1, 2} and peak <= 2  # within the concurrency bound
    [warning] = warnings_in(caplog)
    assert "passed its 1s deadline after judging 3 of 6 passages" in warning.getMessage()
    stats = ranker.stats()
    assert stats["errors"]["RankDeadlineExceeded"] == 1 and stats["fallbacks"] == 0


@pytest.mark.parametrize("limit, error_class", [("budget_s", "RankBudgetExhausted"),
                                                ("deadline_s", "RankDeadlineExceeded")])
def test_time_up_with_nothing_judged_is_a_failed_call(caplog, limit, error_class):
    with ScriptedLLMServer(always(hang())) as server:
        ranker = reranker(server.base_url, **{limit: 0.5})
        with caplog.at_level(logging.WARNING):
            judgement, _ = judged(ranker)
    assert judgement.fell_back and judgement.judged == 0 and judgement.evidence == {}
    [warning] = warnings_in(caplog)
    assert error_class in warning.getMessage()
    assert ranker.stats()["fallbacks"] == 1 and ranker.stats()["errors"][error_class] == 1


def test_only_a_failure_of_every_request_falls_back_entirely(caplog):
    failing = {PASSAGES[1], PASSAGES[4]}
    script = judge(lambda query, passage: server_error() if passage in failing else SCORES[passage])
    with ScriptedLLMServer(script) as server:
        judgement, _ = judged(reranker(server.base_url))
    # Two passages failed on their own: the call stands; they are placed below every judged one
    # but are not counted as judged.
    assert (judgement.judged, judgement.candidates, judgement.fell_back) == (4, 6, False)
    assert set(judgement.judged_at_s) == {0, 2, 3, 5}
    assert max(judgement.evidence[1], judgement.evidence[4]) < min(judgement.evidence[p] for p in (0, 2, 3, 5))

    with ScriptedLLMServer(always(server_error())) as server:
        with caplog.at_level(logging.WARNING):
            judgement, _ = judged(reranker(server.base_url))
    assert judgement.fell_back and judgement.judged == 0 and len(warnings_in(caplog)) == 1


def test_cached_scores_count_as_judged_for_free():
    with ScriptedLLMServer(first_three_then_hang()) as server:
        ranker = reranker(server.base_url, budget_s=1.0)
        first, _ = judged(ranker)
        server.responder = always(hang())  # from now on the model answers nothing
        server.reset()
        again, _ = judged(ranker)
        new_requests = server.count
    assert first.judged == 3
    # The three cached scores are judged at once, without a request; passage 3 is sent and cut.
    assert (again.judged, again.cut_short) == (3, "budget") and new_requests == 1
    assert again.evidence == first.evidence and max(again.judged_at_s.values()) < 1.0


def test_a_complete_call_judges_every_candidate():
    with ScriptedLLMServer(judge(lambda query, passage: SCORES[passage])) as server:
        judgement, _ = judged(reranker(server.base_url, budget_s=20.0))
    assert (judgement.judged, judgement.candidates, judgement.cut_short) == (6, 6, None)
    assert judgement.by_score is True


def test_a_strategy_that_answers_all_at_once_is_all_or_nothing(caplog):
    # Listwise cannot report part of an answer: its call is judged whole, or not at all.
    listwise = get_strategy("listwise")
    with ScriptedLLMServer(always(json.dumps({"reranked_indices": [5, 4, 3, 2, 1, 0], "is_rejected": False}))) as server:
        whole, _ = judged(reranker(server.base_url, budget_s=20.0, strategy=listwise))
    assert (whole.judged, whole.by_score, whole.fell_back) == (6, False, False)
    with ScriptedLLMServer(always(hang())) as server:
        with caplog.at_level(logging.WARNING):
            cut, _ = judged(reranker(server.base_url, budget_s=0.5, strategy=get_strategy("listwise")))
    assert cut.fell_back and cut.judged == 0


# -- through graph search ------------------------------------------------------------------------

SEARCH_QUERY = "harbor water utility reservoir town"
ALPHABETICAL = sorted(fact["fact"] for fact in WATER_FACTS)


def alphabetical_score(query: str, passage: str) -> float:
    return 0.9 - 0.1 * ALPHABETICAL.index(passage)


@pytest.fixture(scope="module")
def water_graph():
    return {}


@pytest.fixture
def water(backend, water_graph):
    if "id" not in water_graph:
        _, client = backend()
        gid = unique_graph_id("budget")
        assert client.post("/api/graph", json={"graph_id": gid}).status_code == 201
        assert client.post(f"/api/graph/{gid}/facts", json={"facts": WATER_FACTS}).status_code == 201
        water_graph["id"] = gid
    return water_graph["id"]


@pytest.mark.parametrize("limit", ["RERANKER_BUDGET_S", "RERANKER_DEADLINE_S"])
def test_search_says_how_many_were_judged_and_keeps_the_rest_in_place(backend, water, limit):
    # The judge answers its first three requests (the first stage's top three: one request at a
    # time, best first) and hangs on the rest, until the budget or the deadline ends the call.
    with ScriptedLLMServer(first_three_then_hang(alphabetical_score)) as server:
        app, client = backend(
            RERANKER_PROVIDER="ollama", RERANKER_BASE_URL=server.base_url, RERANKER_MODEL="judge-model",
            RERANKER_FUSION="none",  # the judge's own order; fusion has test_fusion.py
            RERANKER_PASSAGE_TIME="off",  # the scripted judge knows the facts by their text
            RERANKER_SCORE_MODE="logprobs", RERANKER_TIMEOUT_S=30, RERANKER_MAX_PARALLEL=1,
            RERANKER_BREAKER_THRESHOLD=1000, RERANKER_CACHE_SIZE=0, **{"RERANKER_DEADLINE_S": 30, limit: 1.0})
        body = client.post(f"/api/graph/{water}/search", json={"query": SEARCH_QUERY, "limit": 8}).get_json()

    assert (body["judged"], body["candidates"], body["reranked"], body["fusion"]) == (3, 8, True, "none")
    edges = body["edges"]
    judged_hits = [edge for edge in edges if edge["rerank_score"] is not None]
    assert sorted(edge["first_stage_rank"] for edge in judged_hits) == [1, 2, 3]
    # The three judged take places 1-3 in the judge's order; the five unjudged keep theirs.
    assert [edge["fact"] for edge in edges[:3]] == sorted((e["fact"] for e in judged_hits), key=ALPHABETICAL.index)
    assert [edge["first_stage_rank"] for edge in edges[3:]] == [4, 5, 6, 7, 8]
    assert all(edge["rerank_score"] is None for edge in edges[3:])
    scores = [edge["score"] for edge in edges]
    assert scores == sorted(scores, reverse=True)


def test_search_with_a_failing_passage_counts_it_as_not_judged(backend, water):
    failing = ALPHABETICAL[0]
    script = judge(lambda query, passage: server_error() if passage == failing else alphabetical_score(query, passage))
    with ScriptedLLMServer(script) as server:
        _, client = backend(
            RERANKER_PROVIDER="ollama", RERANKER_BASE_URL=server.base_url, RERANKER_MODEL="judge-model",
            RERANKER_FUSION="none",  # the judge's own order; fusion has test_fusion.py
            RERANKER_PASSAGE_TIME="off",  # the scripted judge knows the facts by their text
            RERANKER_SCORE_MODE="logprobs", RERANKER_TIMEOUT_S=5, RERANKER_BREAKER_THRESHOLD=1000,
            RERANKER_CACHE_SIZE=0)
        body = client.post(f"/api/graph/{water}/search", json={"query": SEARCH_QUERY, "limit": 8}).get_json()
    assert (body["judged"], body["candidates"], body["reranked"]) == (7, 8, True)
    assert body["edges"][-1]["fact"] == failing and body["edges"][-1]["rerank_score"] is None
    assert [edge["fact"] for edge in body["edges"][:-1]] == ALPHABETICAL[1:]


def test_the_partial_judgement_is_in_the_search_trace(backend, water):
    with ScriptedLLMServer(first_three_then_hang(alphabetical_score)) as server:
        app, _ = backend(
            RERANKER_PROVIDER="ollama", RERANKER_BASE_URL=server.base_url, RERANKER_MODEL="judge-model",
            RERANKER_FUSION="none",  # the judge's own order; fusion has test_fusion.py
            RERANKER_PASSAGE_TIME="off",  # the scripted judge knows the facts by their text
            RERANKER_SCORE_MODE="logprobs", RERANKER_TIMEOUT_S=30, RERANKER_MAX_PARALLEL=1,
            RERANKER_BREAKER_THRESHOLD=1000, RERANKER_CACHE_SIZE=0, RERANKER_BUDGET_S=1.0)
        outcome = GraphitiAdapter(app.config["APP_CONFIG"]).graph.search(water, SEARCH_QUERY, limit=8)
    judgement = outcome.trace["edges"].judgement
    assert (judgement.judged, judgement.cut_short) == (3, "budget") and set(judgement.judged_at_s) == {0, 1, 2}
    assert all(0 <= seconds < 1.0 for seconds in judgement.judged_at_s.values())
