"""A model server that accepts requests and never answers costs a rank call one request timeout, not
one per wave of requests: once every request in flight timed out with nothing answered, the rest of
the call is not sent (graphiti_llm_rerank/request_waves.py). Over real HTTP to the scripted servers, whose
hanging requests hold their connection open until the client gives up.

Ten passages with four requests in flight are three waves: three timeouts (>= 3 s at 1 s each) without
the rule, one with it. The time bounds leave a busy 2-core machine 1.5 s of slack under that."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from graphiti_llm_rerank.fusion import judged_order
from graphiti_llm_rerank.judge import LLMJudge
from graphiti_llm_rerank.ollama_reranker import OllamaReranker
from graphiti_llm_rerank.rerank_api import RerankApiReranker
from graphiti_llm_rerank.rerank_api_client import RerankApiClient
from graphiti_llm_rerank.strategies.pointwise import UNSCORED
from graphiti_llm_rerank.strategy_run import rerank
from graphiti_llm_rerank.types import Document
from tests.support.scripted_llm import ScriptedLLMServer, always, hang, judge, server_error
from tests.support.scripted_rerank_api import ScriptedRerankApi

TIMEOUT_S = 1.0
MAX_PARALLEL = 4
ONE_TIMEOUT_BOUND_S = 2.5  # one timeout and slack; three waves take >= 3 s
QUERY = "which passage answers?"
PASSAGES = [f"passage number {index}" for index in range(10)]
SCORES = {passage: 0.05 + 0.09 * index for index, passage in enumerate(PASSAGES)}  # rising down the list


def ollama_reranker(base_url: str) -> OllamaReranker:
    judge_ = LLMJudge(model="judge-model", base_url=base_url, api_key="k", score_mode="logprobs",
                      timeout_s=TIMEOUT_S, max_parallel=MAX_PARALLEL)
    return OllamaReranker(judge=judge_, deadline_s=30.0, breaker_threshold=1000)


def timed_rank(reranker, passages=PASSAGES):
    """(ranked passages, whether the call fell back, seconds), in a fresh event loop like a request's;
    the order is the one Graphiti's `rank` answers, from the same judgement."""

    async def go():
        try:
            return await reranker.judge_positions(QUERY, passages)
        finally:
            await reranker.aclose()

    started = time.monotonic()
    judgement = asyncio.run(go())
    order = [passages[hit.position] for hit in judged_order(judgement)]
    return order, judgement.fell_back, time.monotonic() - started


def warnings_in(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records
            if record.levelno >= logging.WARNING and record.name.startswith(("app.", "graphiti_llm_rerank."))]


def test_a_hung_server_costs_the_pointwise_call_one_timeout(caplog):
    with ScriptedLLMServer(always(hang())) as server, caplog.at_level(logging.WARNING):
        reranker = ollama_reranker(server.base_url)
        order, fell_back, elapsed = timed_rank(reranker)
        received, peak = server.count, server.peak_in_flight

    assert order == PASSAGES and fell_back  # the existing fallback: incoming order, flagged
    assert elapsed < ONE_TIMEOUT_BOUND_S
    stats = reranker.stats()
    # One wave: the four requests that were in flight; the other six passages were never sent.
    assert stats["model_requests"] == MAX_PARALLEL and received <= MAX_PARALLEL and peak <= MAX_PARALLEL
    assert stats["errors"] == {"TimeoutError": MAX_PARALLEL}
    [warning] = warnings_in(caplog)
    assert "all 4 requests in flight timed out (1s) and nothing was answered" in warning
    assert "10 passages keep their incoming order" in warning
    assert stats["fallbacks"] == 1


@pytest.mark.parametrize("third", ["answers", "fails"])
def test_a_wave_where_the_server_answers_something_sends_every_passage(caplog, third):
    # In flight first: passages 0-3. Passage 3 comes back at once (a score, or an HTTP 500: either
    # way the server is there), passage 4 takes its slot and hangs too, so passages 0, 1, 2 and 4 are
    # four timeouts with nothing else in flight. The rest must still be sent and judged.
    hanging = {PASSAGES[index] for index in (0, 1, 2, 4)}

    def script(query, passage):
        if passage in hanging:
            return hang()
        if passage == PASSAGES[3] and third == "fails":
            return server_error()
        return SCORES[passage]

    with ScriptedLLMServer(judge(script)) as server, caplog.at_level(logging.WARNING):
        reranker = ollama_reranker(server.base_url)
        order, fell_back, _ = timed_rank(reranker)
        received = server.count

    assert received == len(PASSAGES) and not fell_back and warnings_in(caplog) == []
    answered = [p for p in PASSAGES if p not in hanging and not (p == PASSAGES[3] and third == "fails")]
    failed = [p for p in PASSAGES if p not in answered]
    # The judged ones best first; the failed ones below them, in incoming order.
    assert order == sorted(answered, key=lambda passage: -SCORES[passage]) + failed
    assert reranker.stats()["passage_failures"] == len(failed)


def test_scores_a_call_already_has_survive_a_hung_wave(caplog):
    # The first call judges passages 0-2 (cached); the server then hangs. The second call's seven new
    # passages are one wave of four timeouts and three not sent: a partial failure, not a fallback.
    with ScriptedLLMServer(judge(lambda query, passage: SCORES[passage])) as server:
        reranker = ollama_reranker(server.base_url)
        timed_rank(reranker, PASSAGES[:3])
        server.responder = always(hang())
        server.reset()
        with caplog.at_level(logging.WARNING):
            order, fell_back, elapsed = timed_rank(reranker)
        received = server.count

    assert not fell_back and warnings_in(caplog) == []
    assert order == [PASSAGES[2], PASSAGES[1], PASSAGES[0]] + PASSAGES[3:]
    assert received <= MAX_PARALLEL and elapsed < ONE_TIMEOUT_BOUND_S  # without the rule: 7 sent, 2 waves
    assert reranker.stats()["passage_failures"] == 7


def test_passages_not_sent_are_failed_but_not_counted_as_calls():
    # The strategy runner's own count (what /api/rerank answers as `calls`): requests made, not passages.
    documents = [Document(id=str(index), text=passage) for index, passage in enumerate(PASSAGES)]
    with ScriptedLLMServer(judge(lambda query, passage: SCORES[passage])) as server:
        judge_ = LLMJudge(model="judge-model", base_url=server.base_url, api_key="k", score_mode="logprobs",
                          timeout_s=TIMEOUT_S, max_parallel=MAX_PARALLEL)

        async def go(documents_):
            try:
                return await rerank(QUERY, documents_, provider=judge_, strategy="pointwise", strict=False)
            finally:
                await judge_.aclose()

        asyncio.run(go(documents[:3]))  # cached from now on
        server.responder = always(hang())
        outcome = asyncio.run(go(documents))

    assert outcome.calls == MAX_PARALLEL  # four sent and timed out; three not sent; three cached
    assert [result.document.id for result in outcome.results] == ["2", "1", "0", *map(str, range(3, 10))]
    assert [bool(result.metadata.get(UNSCORED)) for result in outcome.results] == [False] * 3 + [True] * 7


def test_a_hung_rerank_api_costs_the_call_one_timeout(caplog):
    # One passage per request (RERANKER_API_MAX_DOCUMENTS=1): ten batches, four in flight.
    with ScriptedRerankApi("cohere", responder=lambda request: hang()) as api, caplog.at_level(logging.WARNING):
        client = RerankApiClient(base_url=api.base_url, model="bge-reranker-v2-m3", api_key=None,
                                 timeout_s=TIMEOUT_S, max_parallel=MAX_PARALLEL, max_documents=1)
        reranker = RerankApiReranker(client, deadline_s=30.0, breaker_threshold=1000)
        order, fell_back, elapsed = timed_rank(reranker)
        received = api.count

    assert order == PASSAGES and fell_back
    assert elapsed < ONE_TIMEOUT_BOUND_S
    stats = reranker.stats()
    assert stats["model_requests"] == MAX_PARALLEL and received <= MAX_PARALLEL
    assert stats["errors"] == {"Timeout": MAX_PARALLEL} and stats["fallbacks"] == 1
    [warning] = warnings_in(caplog)
    assert "Timeout: no answer within 1s" in warning and "10 passages keep their incoming order" in warning
