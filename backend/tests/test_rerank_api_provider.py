"""RERANKER_PROVIDER=rerank_api: a dedicated reranker behind POST {base}/rerank, over real HTTP to a
scripted server speaking each dialect (the common {model, query, documents, top_n} one and TEI's
{query, texts}), and end to end through graph search on the real embedded FalkorDB and /api/rerank.

Every rank call answers with every passage exactly once, byte for byte, best first, scores > 0;
a failed call answers in the incoming order with one WARNING, its judgement saying it fell back."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import uuid

import pytest

from app.config import Config
from app.graph.runtime import GraphitiAdapter, _build_reranker
from graphiti_llm_rerank.providers import shared_rerank_api
from graphiti_llm_rerank.fusion import judged_order
from graphiti_llm_rerank.rerank_api import EMPTY_TEXT, NOT_IN_ANSWER, REQUEST_FAILED, RerankApiReranker
from graphiti_llm_rerank.rerank_api_client import RerankApiClient
from tests.support.scripted_llm import delay, error, hang, rate_limited, server_error, unused_base_url
from tests.support.scripted_rerank_api import ScriptedRerankApi, not_json, results

QUERY = "where does the harbor get its drinking water?"
PASSAGES = [
    "Harbor Bakery sells sourdough bread baked every morning",
    "Harbor Water Utility operates the North Reservoir, the town's main drinking water source",
    "An algae bloom closed the North Reservoir for three weeks in August 2024",
    "The Harbor Ferry connects the town to Harbor Island every hour",
    "Mara Lindqvist directs the Harbor Water Utility since 2019",
]
RELEVANCE = dict(zip(PASSAGES, [0.05, 0.95, 0.6, 0.2, 0.4]))
BEST_FIRST = sorted(PASSAGES, key=lambda passage: -RELEVANCE[passage])
API_KEY = "sk-rerank-SECRET-7c41d0"
LOGGER = "graphiti_llm_rerank.rerank_api"


def by_table(query: str, text: str) -> float:
    return RELEVANCE[text]


def make_reranker(url: str, **options) -> RerankApiReranker:
    client_options = {key: options.pop(key) for key in ("style", "timeout_s", "max_documents", "max_parallel",
                                                       "api_key") if key in options}
    client = RerankApiClient(base_url=url, model="bge-reranker-v2-m3",
                             **{"api_key": API_KEY, "timeout_s": 5, **client_options})
    return RerankApiReranker(client, **{"deadline_s": 10, **options})


def rank(reranker: RerankApiReranker, passages: list[str], query: str = QUERY) -> tuple[list[tuple[str, float]], bool]:
    """(ranked passages, whether the call fell back), in a fresh event loop like a request's; the
    ranked passages are what Graphiti's `rank` answers, made from the same judgement."""
    judgement = asyncio.run(reranker.judge_positions(query, passages))
    return [(passages[hit.position], hit.score) for hit in judged_order(judgement)], judgement.fell_back


def assert_complete(ranked: list[tuple[str, float]], passages: list[str]) -> None:
    """Every passage exactly once, byte for byte, best first, every score > 0."""
    assert sorted(passage for passage, _ in ranked) == sorted(passages)
    scores = [score for _, score in ranked]
    assert all(score > 0 for score in scores) and scores == sorted(scores, reverse=True)


def warnings_of(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records
            if record.levelno == logging.WARNING and record.name == LOGGER]


@pytest.fixture(params=["cohere", "tei"])
def server(request):
    with ScriptedRerankApi(request.param, scorer=by_table) as scripted:
        yield scripted


# -- the contract in each dialect ---------------------------------------------------------------


@pytest.mark.parametrize("fixed_style", [False, True])
def test_order_follows_the_scores_in_one_request(server, fixed_style):
    reranker = make_reranker(server.base_url, style=server.dialect if fixed_style else "auto")
    ranked, fell_back = rank(reranker, PASSAGES)

    assert [passage for passage, _ in ranked] == BEST_FIRST and not fell_back
    assert [score for _, score in ranked] == pytest.approx([RELEVANCE[p] for p in BEST_FIRST])
    assert_complete(ranked, PASSAGES)
    body = server.requests[-1]
    if server.dialect == "tei":
        assert body == {"query": QUERY, "texts": PASSAGES, "truncate": True}
    else:
        assert body == {"model": "bge-reranker-v2-m3", "query": QUERY, "documents": PASSAGES, "top_n": 5}
    assert server.request_headers[-1]["authorization"] == f"Bearer {API_KEY}"
    # auto starts with the common dialect: a TEI server costs one refused request, once.
    assert server.count == (2 if server.dialect == "tei" and not fixed_style else 1)
    assert reranker.client.dialect_in_use == server.dialect


def test_auto_remembers_tei_after_the_first_refusal():
    with ScriptedRerankApi("tei", scorer=by_table) as tei:
        reranker = make_reranker(tei.base_url)
        rank(reranker, PASSAGES[:3])
        rank(reranker, PASSAGES[3:])
        assert [sorted(body) for body in tei.requests] == [
            ["documents", "model", "query", "top_n"], ["query", "texts", "truncate"], ["query", "texts", "truncate"]]
        stats = reranker.stats()
        assert stats["dialect_in_use"] == "tei" and stats["dialect_switches"] == 1 and stats["fallbacks"] == 0


def test_auto_switches_to_tei_when_the_answer_is_a_bare_list():
    # A server that takes either body and answers TEI's way.
    bare_list = lambda request: [{"index": i, "score": RELEVANCE[t]} for i, t in enumerate(request.documents)]
    with ScriptedRerankApi("cohere", responder=bare_list) as lenient:
        reranker = make_reranker(lenient.base_url)
        first, _ = rank(reranker, PASSAGES)
        second, _ = rank(reranker, [passage + " (again)" for passage in PASSAGES])
        assert [passage for passage, _ in first] == BEST_FIRST
        assert "documents" in lenient.requests[0] and "texts" in lenient.requests[1]
        assert reranker.stats()["dialect_switches"] == 1 and lenient.count == 2


def test_auto_goes_back_when_the_server_says_documents_is_missing():
    # The first answer looks like TEI's; the server then refuses TEI's body naming `documents`.
    once_a_list = lambda request: [{"index": 0, "score": 0.5}] if request.index == 0 else None
    with ScriptedRerankApi("cohere", scorer=by_table, responder=once_a_list) as api:
        reranker = make_reranker(api.base_url)
        rank(reranker, PASSAGES[:1])
        ranked, fell_back = rank(reranker, PASSAGES[1:])
        rank(reranker, PASSAGES[:2], query="another query")
        assert ["texts" in body for body in api.requests] == [False, True, False, False]
    assert [passage for passage, _ in ranked] == [p for p in BEST_FIRST if p != PASSAGES[0]] and not fell_back
    assert reranker.client.dialect_in_use == "cohere" and reranker.stats()["dialect_switches"] == 2


def test_a_fixed_style_the_server_refuses_fails_the_call_without_splitting(caplog):
    with ScriptedRerankApi("tei", scorer=by_table) as tei, caplog.at_level(logging.WARNING):
        ranked, fell_back = rank(make_reranker(tei.base_url, style="cohere"), PASSAGES)
        assert ranked == [(passage, pytest.approx(1 - i / 6)) for i, passage in enumerate(PASSAGES)] and fell_back
        assert tei.count == 1  # a wrong dialect is not a batch to split
    [warning] = warnings_of(caplog)
    assert "WrongDialect" in warning and "RERANKER_API_STYLE=tei" in warning


def test_raw_logits_are_mapped_through_a_sigmoid_in_order():
    # llama.cpp's server answers bge-reranker logits as they are: negative ones would be dropped by Graphiti.
    logits = dict(zip(PASSAGES, [-11.0, 7.7, 3.8, -2.3, -10.9]))
    with ScriptedRerankApi("cohere", scorer=lambda query, text: logits.get(text, 0.5)) as llama:
        reranker = make_reranker(llama.base_url)
        ranked, _ = rank(reranker, PASSAGES)
        assert [passage for passage, _ in ranked] == sorted(PASSAGES, key=lambda p: -logits[p])
        assert_complete(ranked, PASSAGES)
        assert reranker.score_scale == "logit" and ranked[0][1] == pytest.approx(1 / (1 + 2.718281828 ** -7.7))
        # Cached raw scores and a fresh one in [0, 1] are mapped the same way: 0.5 -> sigmoid(0.5).
        mixed, _ = rank(reranker, PASSAGES + ["a new passage"])
        assert [passage for passage, _ in mixed][:3] == [PASSAGES[1], PASSAGES[2], "a new passage"]
        assert llama.count == 2 and llama.batch_sizes == [5, 1]


# -- answers that do not map one to one ---------------------------------------------------------


def test_out_of_range_missing_and_duplicate_indices_lose_and_double_nothing(server):
    entries = [(1, 0.9), (7, 0.99), (-1, 0.98), (2, 0.6), (2, 0.97), ("3", 0.96), (4, "high"), (True, 0.95),
               {"index": 0}]
    server.rerank_responder = lambda request: results(entries)
    reranker = make_reranker(server.base_url, style=server.dialect)
    ranked, fell_back = rank(reranker, PASSAGES)

    # 1 and 2 were scored (the first entry for index 2 counts); 0, 3, 4 follow in incoming order.
    assert [passage for passage, _ in ranked] == [PASSAGES[i] for i in (1, 2, 0, 3, 4)] and not fell_back
    assert [score for _, score in ranked][:2] == [0.9, 0.6]
    assert all(score < 0.6 for _, score in ranked[2:])
    assert_complete(ranked, PASSAGES)
    stats = reranker.stats()
    assert stats["ignored_results"] == 7 and stats["unscored"] == 3 and stats["fallbacks"] == 0


def test_fewer_results_than_documents_put_the_rest_below_in_incoming_order():
    with ScriptedRerankApi("tei", scorer=by_table, max_results=2) as short:
        reranker = make_reranker(short.base_url, style="tei")
        ranked, fell_back = rank(reranker, PASSAGES)
    assert [passage for passage, _ in ranked] == BEST_FIRST[:2] + [p for p in PASSAGES if p not in BEST_FIRST[:2]]
    assert_complete(ranked, PASSAGES) and not fell_back
    # Only what was scored is cached: a second call asks again for the three left out.
    assert reranker.stats()["cache_entries"] == 2


def test_a_server_capping_top_n_still_leaves_every_passage_in_place():
    with ScriptedRerankApi("cohere", scorer=by_table, max_results=3) as capped:
        reranker = make_reranker(capped.base_url)
        ranked, _ = rank(reranker, PASSAGES)
        assert capped.requests[0]["top_n"] == len(PASSAGES)  # every score is asked for
    assert [passage for passage, _ in ranked][:3] == BEST_FIRST[:3]
    assert_complete(ranked, PASSAGES)
    assert reranker.stats()["unscored"] == 2


@pytest.mark.parametrize("dialect, status", [("tei", 413), ("cohere", 422)])
def test_too_many_documents_split_the_batch_and_the_cap_is_remembered(dialect, status):
    passages = [f"passage {i} about water" for i in range(10)]
    scores = {passage: (i + 1) / 20 for i, passage in enumerate(passages)}
    with ScriptedRerankApi(dialect, scorer=lambda q, t: scores[t], max_documents=4, too_many_status=status) as api:
        reranker = make_reranker(api.base_url, style=dialect)
        ranked, fell_back = rank(reranker, passages)
        assert [passage for passage, _ in ranked] == passages[::-1] and not fell_back
        assert_complete(ranked, passages)
        # 10 refused, 5 + 5 refused, 3 + 2 + 3 + 2 scored: each passage scored exactly once.
        assert sorted(api.batch_sizes) == [2, 2, 3, 3, 5, 5, 10]
        scored_texts = [text for body in api.requests for text in (body.get("texts") or body["documents"])
                        if len(body.get("texts") or body["documents"]) <= 4]
        assert sorted(scored_texts) == sorted(passages)
        api.reset()
        rank(reranker, [passage + "!" for passage in passages])
        assert sorted(api.batch_sizes) == [1, 3, 3, 3]  # no refusal the second time
    assert reranker.stats()["max_documents_learned"] == 3 and reranker.stats()["batch_splits"] == 3


def test_max_documents_caps_every_request_within_the_concurrency_bound():
    passages = [f"fact {i} on the reservoir" for i in range(10)]
    slow = lambda request: delay(0.2, None)  # slow enough for batches to overlap
    with ScriptedRerankApi("cohere", responder=slow) as api:
        reranker = make_reranker(api.base_url, max_documents=3, max_parallel=2)
        ranked, _ = rank(reranker, passages)
        assert sorted(api.batch_sizes) == [1, 3, 3, 3] and api.peak_in_flight <= 2
    assert_complete(ranked, passages)
    assert reranker.client.estimate_requests(10) == 4


def test_identical_passages_are_sent_once_and_both_come_back(server):
    passages = [PASSAGES[0], PASSAGES[1], PASSAGES[0]]
    ranked, _ = rank(make_reranker(server.base_url, style=server.dialect), passages)
    assert [passage for passage, _ in ranked] == [PASSAGES[1], PASSAGES[0], PASSAGES[0]]
    assert len(server.requests[-1].get("texts") or server.requests[-1]["documents"]) == 2


def test_blank_passages_are_not_sent_and_go_last():
    with ScriptedRerankApi("cohere", scorer=by_table) as api:
        reranker = make_reranker(api.base_url)
        ranking = asyncio.run(reranker.rank_positions(QUERY, ["  ", PASSAGES[1], ""], strict=True))
        assert api.requests[0]["documents"] == [PASSAGES[1]]
    assert [(position, why) for position, _, why in ranking.order] == [(1, None), (0, EMPTY_TEXT), (2, EMPTY_TEXT)]


def test_long_passages_are_cut_for_the_server_but_come_back_whole():
    long_passage = PASSAGES[1] + " and more" * 50
    with ScriptedRerankApi("cohere", scorer=lambda q, t: 0.5) as api:
        ranked, _ = rank(make_reranker(api.base_url, max_document_chars=100), [long_passage, PASSAGES[0]])
        assert [len(text) for text in api.requests[0]["documents"]] == [100, len(PASSAGES[0])]
    assert long_passage in [passage for passage, _ in ranked]


# -- failures: incoming order, one WARNING, the breaker --------------------------------------------


FAULTS = {
    "401": None,  # the server wants another key
    "429": rate_limited(),
    "500": server_error(),
    "garbage": not_json(),
    "wrong_shape": {"foo": 1},
    "no_usable_result": results([(9, 0.5), (1, "x")]),
    "empty_results": results([]),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_failed_call_keeps_the_incoming_order_with_one_warning(server, fault, caplog):
    if fault == "401":
        server.api_key = "another-key"
    else:
        server.rerank_responder = lambda request: FAULTS[fault]
    reranker = make_reranker(server.base_url, style=server.dialect)
    with caplog.at_level(logging.INFO):
        ranked, fell_back = rank(reranker, PASSAGES)

    assert [passage for passage, _ in ranked] == PASSAGES and fell_back
    assert_complete(ranked, PASSAGES)
    [warning] = warnings_of(caplog)
    assert "bge-reranker-v2-m3" in warning and "5 passages keep their incoming order" in warning
    assert API_KEY not in caplog.text and API_KEY not in json.dumps(reranker.stats())
    stats = reranker.stats()
    assert stats["fallbacks"] == 1 and stats["model_requests"] == server.count == 1
    expected_error = {"401": "HTTP 401", "429": "HTTP 429", "500": "HTTP 500"}.get(fault, "InvalidOutput")
    assert stats["errors"] == {expected_error: 1} and stats["breaker"]["consecutive_failures"] == 1


def test_a_refused_key_stops_the_call_before_its_other_batches(caplog):
    with ScriptedRerankApi("cohere", scorer=by_table, api_key="another-key") as api, caplog.at_level(logging.WARNING):
        reranker = make_reranker(api.base_url, max_documents=2, max_parallel=1)
        ranked, fell_back = rank(reranker, PASSAGES)
        assert api.count == 1  # three batches, one request: the other two would be refused alike
    assert [passage for passage, _ in ranked] == PASSAGES and fell_back
    assert len(warnings_of(caplog)) == 1 and reranker.stats()["errors"] == {"HTTP 401": 1}


def test_an_unreachable_server_falls_back_once(caplog):
    reranker = make_reranker(unused_base_url())
    with caplog.at_level(logging.WARNING):
        ranked, fell_back = rank(reranker, PASSAGES)
    assert [passage for passage, _ in ranked] == PASSAGES and fell_back
    [warning] = warnings_of(caplog)
    assert "ConnectError" in warning


def test_a_hanging_server_times_out_per_request(caplog):
    with ScriptedRerankApi("cohere", responder=lambda request: hang()) as api, caplog.at_level(logging.WARNING):
        reranker = make_reranker(api.base_url, timeout_s=0.5, deadline_s=30)
        ranked, fell_back = rank(reranker, PASSAGES)
    assert [passage for passage, _ in ranked] == PASSAGES and fell_back
    [warning] = warnings_of(caplog)
    assert "Timeout: no answer within 0.5s" in warning
    assert reranker.stats()["errors"] == {"Timeout": 1}


def test_a_hanging_server_past_the_deadline_falls_back_once(caplog):
    with ScriptedRerankApi("tei", responder=lambda request: hang()) as api, caplog.at_level(logging.WARNING):
        reranker = make_reranker(api.base_url, style="tei", timeout_s=30, deadline_s=0.5)
        ranked, fell_back = rank(reranker, PASSAGES)
    assert [passage for passage, _ in ranked] == PASSAGES and fell_back
    [warning] = warnings_of(caplog)
    assert "RankDeadlineExceeded" in warning
    assert reranker.stats()["in_flight"] == 0  # the cancelled request gave its slot back


def test_a_partly_failed_call_keeps_the_scored_batches(caplog):
    failing = lambda request: server_error() if PASSAGES[1] in request.documents else None
    with ScriptedRerankApi("cohere", scorer=by_table, responder=failing) as api, caplog.at_level(logging.WARNING):
        reranker = make_reranker(api.base_url, max_documents=2)
        ranked, fell_back = rank(reranker, PASSAGES)
        ranking = asyncio.run(reranker.rank_positions("another query", PASSAGES, strict=False))
        judgement = asyncio.run(reranker.judge_positions("a third query", PASSAGES))
    # Batches [0, 1] failed, [2, 3] and [4] were scored: the failed two go last, in incoming order.
    assert [passage for passage, _ in ranked] == [PASSAGES[i] for i in (2, 4, 3, 0, 1)] and not fell_back
    assert_complete(ranked, PASSAGES)
    assert [why for _, _, why in ranking.order][-2:] == [REQUEST_FAILED, REQUEST_FAILED]
    assert warnings_of(caplog) == []  # not a failed call: the search is still reranked
    assert reranker.stats()["passage_failures"] == 6 and reranker.stats()["fallbacks"] == 0  # 2 in each of 3 calls
    # What graph search reads: only the three passages the server scored count as judged, by score.
    assert (judgement.judged, judgement.candidates, judgement.by_score) == (3, 5, True)
    assert set(judgement.judged_at_s) == {2, 3, 4} and not judgement.fell_back


def test_the_budget_keeps_the_batches_that_answered_in_time():
    # Two documents per request, one request at a time: the first batch answers, every later one hangs.
    first_batch = lambda request: None if PASSAGES[0] in request.documents else hang()
    with ScriptedRerankApi("cohere", scorer=by_table, responder=first_batch) as api:
        reranker = make_reranker(api.base_url, max_documents=2, max_parallel=1, budget_s=0.5)
        judgement = asyncio.run(reranker.judge_positions(QUERY, PASSAGES))
        ranked, fell_back = rank(reranker, PASSAGES)
    assert (judgement.judged, judgement.cut_short, judgement.fell_back) == (2, "budget", False)
    assert judgement.evidence == pytest.approx({0: RELEVANCE[PASSAGES[0]], 1: RELEVANCE[PASSAGES[1]]})
    # The judged two swap places; the three unjudged keep theirs. Not a fallback, no breaker failure.
    assert [passage for passage, _ in ranked] == [PASSAGES[i] for i in (1, 0, 2, 3, 4)] and not fell_back
    assert reranker.stats()["fallbacks"] == 0 and reranker.stats()["breaker"]["consecutive_failures"] == 0


def test_the_breaker_opens_and_cached_calls_are_still_served(caplog):
    with ScriptedRerankApi("cohere", scorer=by_table) as api:
        reranker = make_reranker(api.base_url, breaker_threshold=2, breaker_cooldown_s=600)
        rank(reranker, PASSAGES[:2])  # cached from now on
        api.rerank_responder = lambda request: server_error()
        with caplog.at_level(logging.WARNING):
            rank(reranker, PASSAGES[2:])
            rank(reranker, PASSAGES[2:])
            assert reranker.breaker.snapshot()["state"] == "open" and api.count == 3
            skipped, skipped_fell_back = rank(reranker, PASSAGES[2:])
            cached, cached_fell_back = rank(reranker, PASSAGES[:2])
        assert api.count == 3  # neither call reached the server
    assert skipped_fell_back and [passage for passage, _ in skipped] == PASSAGES[2:]
    assert not cached_fell_back and [passage for passage, _ in cached] == [PASSAGES[1], PASSAGES[0]]
    warnings = warnings_of(caplog)
    assert len(warnings) == 3 and "circuit breaker is open" in warnings[2] and "circuit breaker open" in warnings[1]
    assert reranker.stats()["breaker_skips"] == 1


def test_the_cache_prevents_a_second_request(server):
    reranker = make_reranker(server.base_url, style=server.dialect)
    first, _ = rank(reranker, PASSAGES)
    second, _ = rank(reranker, PASSAGES[::-1])
    assert server.count == 1 and [passage for passage, _ in second] == [passage for passage, _ in first]
    assert reranker.stats()["cache_hits"] == 5
    rank(reranker, PASSAGES, query="another query")  # the query is part of the key
    assert server.count == 2


def test_stats_redact_the_url_and_never_show_the_key():
    reranker = make_reranker("http://user:hunter2@reranker.internal:8080/v1", api_key=API_KEY)
    stats = reranker.stats()
    assert stats["provider"] == "rerank_api" and stats["base_url"] == "http://reranker.internal:8080/v1"
    assert "hunter2" not in json.dumps(stats) and API_KEY not in json.dumps(stats) and API_KEY not in repr(reranker)
    assert stats["breaker"]["state"] == "closed" and stats["model_requests"] == 0


# -- settings and factory --------------------------------------------------------------------------


def test_settings_build_the_shared_rerank_api_client(monkeypatch):
    monkeypatch.setenv("RERANKER_API_STYLE", "TEI")
    monkeypatch.setenv("RERANKER_API_MAX_DOCUMENTS", "16")
    monkeypatch.setenv("RERANKER_BASE_URL", "http://reranker:80")
    config = Config.from_env()
    reranker = _build_reranker("rerank_api", config)  # no network I/O
    assert isinstance(reranker, RerankApiReranker) and reranker is shared_rerank_api(
        dataclasses.replace(config, reranker_provider="rerank_api"))
    assert (reranker.client.style, reranker.client.max_documents, reranker.client.url) == ("tei", 16, "http://reranker:80/rerank")
    monkeypatch.setenv("RERANKER_API_STYLE", "jina")
    with pytest.raises(ValueError, match=r"RERANKER_API_STYLE='jina'; allowed: \('auto', 'cohere', 'tei'\)"):
        Config.from_env()
    monkeypatch.setenv("RERANKER_API_STYLE", "auto")
    monkeypatch.setenv("RERANKER_API_MAX_DOCUMENTS", "-1")
    with pytest.raises(ValueError, match="RERANKER_API_MAX_DOCUMENTS must be >= 0"):
        Config.from_env()


def test_a_rerank_api_server_never_gets_the_embedders_key(monkeypatch):
    monkeypatch.setenv("EMBEDDING_API_KEY", "sk-embedder-key")
    monkeypatch.delenv("RERANKER_API_KEY", raising=False)
    monkeypatch.setenv("RERANKER_PROVIDER", "ollama")
    assert Config.from_env().reranker_api_key == "sk-embedder-key"  # a judge on the embedder's Ollama
    monkeypatch.setenv("RERANKER_PROVIDER", "rerank_api")
    config = Config.from_env()
    assert config.reranker_api_key == ""
    with ScriptedRerankApi("cohere", scorer=by_table) as api:
        rank(make_reranker(api.base_url, api_key=config.reranker_api_key), PASSAGES)
        assert "authorization" not in api.request_headers[-1]
    monkeypatch.setenv("RERANKER_API_KEY", API_KEY)
    assert Config.from_env().reranker_api_key == API_KEY


# -- end to end: graph search and /api/rerank --------------------------------------------------------


SEARCH_QUERY = "harbor water utility reservoir town"


def api_backend(backend, server_url: str, **extra):
    # A model name of its own per test: the process-wide client (and its cache) is keyed by settings.
    settings = dict(RERANKER_PROVIDER="rerank_api", RERANKER_BASE_URL=server_url, RERANKER_API_KEY=API_KEY,
                    RERANKER_MODEL=f"bge-{uuid.uuid4().hex[:8]}", RERANKER_TIMEOUT_S=5)
    return backend(**{**settings, **extra})


def test_graph_search_is_ordered_by_the_rerank_api(backend, water_graph, caplog):
    rrf = [hit.fact for hit in GraphitiAdapter().graph.search(water_graph, SEARCH_QUERY, limit=8).edges]
    assert len(rrf) == 8
    # TEI with raw logits that reverse the first stage: the last RRF candidate is the most relevant. A dated
    # fact's passage opens with its validity (RERANKER_PASSAGE_TIME), so the fact is found at its end.
    def fact_of(passage):
        return next(fact for fact in rrf if passage.endswith(fact))

    with ScriptedRerankApi("tei", scorer=lambda query, text: rrf.index(fact_of(text)) - 4.0) as tei:
        # Linear fusion, the judge at 0.7 against the first stage alone (no cosine share): enough for its
        # scores to decide.
        _, client = api_backend(backend, tei.base_url, RERANKER_FUSION="linear", RERANKER_FUSION_WEIGHT=0.7,
                                RERANKER_COSINE_WEIGHT=0)
        body = client.post(f"/api/graph/{water_graph}/search", json={"query": SEARCH_QUERY, "limit": 4}).get_json()
        health = client.get("/health").get_json()["reranker"]

        assert [edge["fact"] for edge in body["edges"]] == rrf[::-1][:4] and body["reranked"] is True
        assert body["fusion"] == "linear"  # linear fusion reads the server's scores by value
        assert sorted(edge["first_stage_rank"] for edge in body["edges"]) == [5, 6, 7, 8]
        scores = [edge["rerank_score"] for edge in body["edges"]]
        assert scores == sorted(scores, reverse=True) and all(score > 0 for score in scores)
        # One refused common-dialect request, then TEI's with exactly the eight candidates, each once.
        sent = [fact_of(passage) for passage in tei.requests[1]["texts"]]
        assert tei.count == 2 and sorted(sent) == sorted(rrf)
        assert tei.requests[1]["query"] == SEARCH_QUERY
    assert health["provider"] == "rerank_api" and health["strategy"] is None
    stats = health["stats"]
    assert stats["provider"] == "rerank_api" and stats["dialect_in_use"] == "tei" and stats["score_scale"] == "logit"
    assert stats["calls"] == 1 and stats["model_requests"] == 2 and stats["fallbacks"] == 0
    assert API_KEY not in json.dumps(health)


def test_graph_search_with_a_dead_rerank_api_keeps_the_first_stage(backend, water_graph, caplog):
    _, client = api_backend(backend, unused_base_url())
    with caplog.at_level(logging.WARNING):
        body = client.post(f"/api/graph/{water_graph}/search", json={"query": SEARCH_QUERY, "limit": 4}).get_json()
    assert body["reranked"] is False and body["error"] is None
    assert [edge["first_stage_rank"] for edge in body["edges"]] == [1, 2, 3, 4]
    assert all(edge["rerank_score"] is None for edge in body["edges"])
    assert len(warnings_of(caplog)) == 1


DOCS = [{"id": f"d{i}", "text": text} for i, text in enumerate(PASSAGES)]


def test_api_rerank_uses_the_rerank_api_in_one_request(backend):
    with ScriptedRerankApi("cohere", scorer=by_table) as api:
        _, client = api_backend(backend, api.base_url)
        response = client.post("/api/rerank", json={"query": QUERY, "documents": DOCS, "top_n": 3,
                                                    "return_documents": True})
        again = client.post("/api/rerank", json={"query": QUERY, "documents": PASSAGES})
        assert api.count == 1  # the second answer came from the cache the graph reranker shares
    assert response.status_code == 200, response.get_json()
    body = response.get_json()
    assert [result["id"] for result in body["results"]] == ["d1", "d2", "d4"]
    assert [result["rank"] for result in body["results"]] == [1, 2, 3]
    assert body["results"][0]["document"] == {"text": PASSAGES[1]} and body["results"][0]["index"] == 1
    assert (body["strategy"], body["provider"], body["calls"], body["estimated_calls"]) == ("pointwise", "rerank_api", 1, 1)
    assert body["dropped"] == [] and body["stats"]["fallbacks"] == 0
    assert again.status_code == 200 and again.get_json()["calls"] == 0
    assert [result["index"] for result in again.get_json()["results"]] == [1, 2, 4, 3, 0]


def test_api_rerank_refuses_a_strategy_a_reranker_model_cannot_run(backend):
    with ScriptedRerankApi("cohere", scorer=by_table) as api:
        _, client = api_backend(backend, api.base_url, RERANKER_STRATEGY="listwise")
        refused = client.post("/api/rerank", json={"query": QUERY, "documents": PASSAGES, "strategy": "listwise"})
        default = client.post("/api/rerank", json={"query": QUERY, "documents": PASSAGES})
        assert api.count == 1
    assert refused.status_code == 422
    error = refused.get_json()["error"]
    assert error["code"] == "strategy_not_supported" and "'pointwise'" in error["message"]
    assert default.status_code == 200 and default.get_json()["strategy"] == "pointwise"


def test_api_rerank_strict_failures_are_clear_and_lenient_keeps_the_order(backend):
    with ScriptedRerankApi("cohere", responder=lambda request: rate_limited()) as api:
        _, client = api_backend(backend, api.base_url)
        strict = client.post("/api/rerank", json={"query": QUERY, "documents": PASSAGES})
        lenient = client.post("/api/rerank", json={"query": QUERY, "documents": PASSAGES, "strict": False})
        api.rerank_responder = lambda request: not_json()
        garbage = client.post("/api/rerank", json={"query": QUERY + "?", "documents": PASSAGES})
    assert strict.status_code == 502
    error = strict.get_json()["error"]
    assert error["code"] == "model_request_failed" and "HTTP 429" in error["message"]
    assert API_KEY not in json.dumps(error)
    assert garbage.status_code == 502 and garbage.get_json()["error"]["code"] == "unusable_model_answer"
    body = lenient.get_json()
    assert lenient.status_code == 200 and [result["index"] for result in body["results"]] == [0, 1, 2, 3, 4]
    assert {result["reason"] for result in body["results"]} == {REQUEST_FAILED} and body["stats"]["fallbacks"] == 5


def test_api_rerank_marks_documents_the_server_left_out(backend):
    with ScriptedRerankApi("tei", scorer=by_table, max_results=2) as api:
        _, client = api_backend(backend, api.base_url, RERANKER_API_STYLE="tei")
        body = client.post("/api/rerank", json={"query": QUERY, "documents": DOCS}).get_json()
    assert [result["id"] for result in body["results"]] == ["d1", "d2", "d0", "d3", "d4"]
    assert [result.get("reason") for result in body["results"]] == [None, None] + [NOT_IN_ANSWER] * 3


def test_a_server_that_echoes_the_key_never_puts_it_in_logs_error_bodies_or_health(backend, water_graph, caplog):
    echo = lambda request: error(401, f"Incorrect API key provided: {request.headers.get('authorization')}")
    with ScriptedRerankApi("cohere", responder=echo) as api, caplog.at_level(logging.DEBUG):
        _, client = api_backend(backend, api.base_url)
        refused = client.post("/api/rerank", json={"query": QUERY, "documents": PASSAGES})
        search = client.post(f"/api/graph/{water_graph}/search", json={"query": SEARCH_QUERY, "limit": 4})
        health = client.get("/health").get_json()
        assert API_KEY in api.request_headers[-1]["authorization"]  # it was sent, and echoed back
    assert refused.status_code == 502 and "HTTP 401" in refused.get_json()["error"]["message"]
    assert search.status_code == 200 and search.get_json()["reranked"] is False
    assert health["reranker"]["stats"]["errors"]["HTTP 401"] >= 1
    for text in (caplog.text, json.dumps(refused.get_json()), json.dumps(search.get_json()), json.dumps(health)):
        assert API_KEY not in text


def test_api_rerank_strict_refuses_a_document_longer_than_the_limit(backend):
    with ScriptedRerankApi("cohere", scorer=by_table) as api:
        _, client = api_backend(backend, api.base_url, RERANKER_MAX_DOCUMENT_CHARS=60)
        long_docs = [{"id": "short", "text": "tiny"}, {"id": "long", "text": "x" * 61}]
        strict = client.post("/api/rerank", json={"query": QUERY, "documents": long_docs})
        lenient = client.post("/api/rerank", json={"query": QUERY, "documents": long_docs, "strict": False})
        sent = api.requests
    assert strict.status_code == 413
    error_body = strict.get_json()["error"]
    assert error_body["code"] == "document_too_long" and error_body["document_id"] == "long"
    assert "61 characters" in error_body["message"]
    # Lenient cuts it for the server only: one request, the long text sent as its first 60 characters.
    assert lenient.status_code == 200 and len(sent) == 1 and sent[0]["documents"] == ["tiny", "x" * 60]


def test_api_rerank_past_the_deadline_is_a_504(backend):
    with ScriptedRerankApi("cohere", responder=lambda request: hang()) as api:
        _, client = api_backend(backend, api.base_url, RERANKER_DEADLINE_S=0.5, RERANKER_TIMEOUT_S=30)
        response = client.post("/api/rerank", json={"query": QUERY, "documents": PASSAGES})
    assert response.status_code == 504 and response.get_json()["error"]["code"] == "rerank_timeout"
