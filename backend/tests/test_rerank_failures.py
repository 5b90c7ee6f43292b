"""Failure semantics of the strategies and the front door: strict mode fails fast with typed errors,
lenient mode keeps a failed unit's incoming order (counted), input guards refuse bad documents."""

from __future__ import annotations

import asyncio

import pytest

from graphiti_llm_rerank.strategy_run import rerank
from graphiti_llm_rerank.judge import LLMJudge
from graphiti_llm_rerank.strategies import get_strategy
from graphiti_llm_rerank.strategies import register_strategy
from graphiti_llm_rerank.types import (
    Document, DocumentTooLongError, InvalidRerankInputError, RerankParseError, RerankProviderError, RerankResult,
    RerankStrategyError, TooManyDocumentsError, rank_score,
)
from tests.support.scripted_llm import always, garbage, hang, model_not_found, server_error, unused_base_url
from tests.support.scripted_rankers import listwise_reply, ranking_llm, table_relevance

QUERY = "which passage ranks highest?"
STRATEGIES = ("pointwise", "listwise", "sliding_window", "pairwise", "tournament")


def corpus(n: int) -> tuple[list[str], dict[str, float]]:
    passages = [f"passage {i:02d} on subject {i * 5 % 11}" for i in range(n)]
    return passages, {passage: (i + 1) / (n + 1) for i, passage in enumerate(passages)}


def run(server, documents, strategy="listwise", *, timeout_s=5.0, judge=None, **options):
    judge = judge or LLMJudge(model="ranker", base_url=server.base_url, api_key="k", timeout_s=timeout_s)
    if strategy == "tournament":
        options.setdefault("plan", "halving")  # the paper's default stages need exactly 100 candidates

    async def go():
        try:
            return await rerank(QUERY, documents, provider=judge, strategy=strategy, **options)
        finally:
            await judge.aclose()

    return asyncio.run(go())


def order_of(outcome) -> list[int]:
    return [result.original_index for result in outcome.results]


# -- strict: typed errors, fast -----------------------------------------------------------------


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_strict_unusable_answer_is_a_parse_error(scripted_llm, strategy):
    scripted_llm.responder = always(garbage("I would rather not say."))
    with pytest.raises(RerankParseError, match="unusable|not JSON|names neither"):
        run(scripted_llm, corpus(6)[0], strategy)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_strict_server_error_is_a_provider_error(scripted_llm, strategy):
    scripted_llm.responder = always(server_error())
    with pytest.raises(RerankProviderError, match="InternalServerError") as caught:
        run(scripted_llm, corpus(6)[0], strategy)
    assert not caught.value.call_level


def test_strict_fails_on_the_first_bad_unit(scripted_llm):
    passages, relevance = corpus(12)
    scripted_llm.responder = ranking_llm(table_relevance(relevance), listwise=lambda prompt: garbage())
    with pytest.raises(RerankParseError):
        run(scripted_llm, passages, "sliding_window", window_size=4, stride=2)
    assert scripted_llm.count == 1  # not one call per window


def test_a_hanging_model_is_a_provider_error_within_the_request_timeout(scripted_llm):
    scripted_llm.responder = always(hang())
    with pytest.raises(RerankProviderError, match="no answer within 0.3s"):
        run(scripted_llm, corpus(3)[0], "listwise", timeout_s=0.3)


def test_a_prompt_larger_than_the_context_is_refused_before_any_call(scripted_llm):
    documents = [Document(id=f"d{i}", text="word " * (40 + i)) for i in range(10)]
    with pytest.raises(DocumentTooLongError, match="more than the model's context of 300") as caught:
        run(scripted_llm, documents, "listwise", context_tokens=300)
    assert caught.value.document_id == "d9" and scripted_llm.count == 0


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_strict_refuses_a_document_longer_than_max_document_chars_before_any_call(scripted_llm, strategy):
    documents = [{"id": "short", "text": "a short passage"}, {"id": "long", "text": "word " * 61}]  # 305 chars
    with pytest.raises(DocumentTooLongError, match="'long' has 305 characters, more than max_document_chars=300") \
            as caught:
        run(scripted_llm, documents, strategy, max_document_chars=300)
    assert caught.value.document_id == "long" and scripted_llm.count == 0


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_lenient_cuts_a_long_document_instead(scripted_llm, strategy):
    passages, relevance = corpus(3)
    long_text = passages[0] + " filler" * 60
    scripted_llm.responder = ranking_llm(lambda query, passage: 0.01 if passage.startswith(passages[0]) else
                                         relevance[passage])
    outcome = run(scripted_llm, [long_text, *passages[1:]], strategy, max_document_chars=100, strict=False)
    texts = [result.document.text for result in outcome.results]
    assert outcome.stats["fallbacks"] == 0 and long_text in texts and texts[0] != long_text  # full text kept


@pytest.mark.parametrize("answer, fragment", [
    (listwise_reply([2, 2, 0, 1]), "duplicates \\[2\\]"),
    (listwise_reply([2, 0]), "missing \\[1\\]"),
    (listwise_reply([2, 0, 1, 7]), "out of range \\[7\\]"),
])
def test_strict_does_not_repair_a_ranking(scripted_llm, answer, fragment):
    passages, relevance = corpus(3)
    scripted_llm.responder = ranking_llm(table_relevance(relevance), listwise=lambda prompt: answer)
    judge = LLMJudge(model="ranker", base_url=scripted_llm.base_url, api_key="k", timeout_s=5)
    with pytest.raises(RerankParseError, match=fragment) as caught:
        run(scripted_llm, passages, "listwise", judge=judge)
    assert "strict mode does not repair" in str(caught.value)
    assert judge.stats()["invalid_outputs"] == 1  # a ranking that needs a repair is unusable when strict
    lenient = run(scripted_llm, passages, "listwise", strict=False)
    assert sorted(order_of(lenient)) == [0, 1, 2] and lenient.stats["repairs"] > 0


def test_strict_does_not_repair_a_selection(scripted_llm):
    passages, relevance = corpus(4)
    scripted_llm.responder = ranking_llm(table_relevance(relevance), select=lambda prompt: '{"selected_indices": [3]}')
    with pytest.raises(RerankParseError, match="names 1 valid distinct indices where 2 were asked"):
        run(scripted_llm, passages, "tournament", rounds=1, plan=[(1, 2), (1, 1)])
    lenient = run(scripted_llm, passages, "tournament", rounds=1, plan=[(1, 2), (1, 1)], strict=False)
    assert order_of(lenient)[0] == 3 and lenient.stats["repairs"] == 1


# -- lenient: per-unit fallbacks ----------------------------------------------------------------


def test_lenient_windows_fall_back_to_their_order_and_are_counted(scripted_llm):
    passages, relevance = corpus(12)
    failing_window = passages[-1]  # only the first window (back of the list) holds the last passage
    scripted_llm.responder = ranking_llm(
        table_relevance(relevance), listwise=lambda p: garbage() if failing_window in p.passages else None
    )
    outcome = run(scripted_llm, passages, "sliding_window", window_size=6, stride=3, strict=False)
    assert outcome.stats["fallbacks"] == 1 and outcome.calls == outcome.estimated_calls
    assert order_of(outcome)[-1] == 11  # its window kept the incoming order, so it stayed last


def test_lenient_pair_failure_keeps_that_pair(scripted_llm):
    passages, relevance = corpus(4)
    broken = {passages[2], passages[3]}
    scripted_llm.responder = ranking_llm(
        table_relevance(relevance), pairwise=lambda p: server_error() if set(p.passages) == broken else None
    )
    outcome = run(scripted_llm, passages, "pairwise", passes=1, strict=False)
    # The (2, 3) comparison failed, so 2 bubbled up instead of 3.
    assert order_of(outcome)[0] == 2 and outcome.stats["fallbacks"] == 1


def test_lenient_group_failure_advances_its_first_members(scripted_llm):
    passages, relevance = corpus(10)
    scripted_llm.responder = ranking_llm(
        table_relevance(relevance), select=lambda p: garbage() if p.select == 5 else None
    )
    outcome = run(scripted_llm, passages, "tournament", rounds=1, strict=False)
    # Stage 1 (select 5 of 10) failed: 0..4 advanced in incoming order, and 4 is the best of them.
    assert order_of(outcome)[0] == 4 and outcome.stats["fallbacks"] == 1


def test_a_call_level_error_fails_even_a_lenient_call(scripted_llm):
    scripted_llm.responder = always(model_not_found())
    with pytest.raises(RerankProviderError) as caught:
        run(scripted_llm, corpus(6)[0], "tournament", strict=False)
    assert caught.value.call_level and scripted_llm.count <= 4


def test_an_unreachable_server_fails_a_lenient_call_fast():
    judge = LLMJudge(model="ranker", base_url=unused_base_url(), api_key="k", timeout_s=5)

    async def go():
        try:
            return await rerank(QUERY, corpus(8)[0], provider=judge, strategy="pairwise", strict=False)
        finally:
            await judge.aclose()

    with pytest.raises(RerankProviderError, match="APIConnectionError"):
        asyncio.run(go())
    assert judge.stats()["model_requests"] <= 2 * 3  # three failed comparisons, not 2 * 28


def test_a_lenient_call_whose_every_unit_failed_raises_the_last_error(scripted_llm):
    scripted_llm.responder = always(server_error())
    with pytest.raises(RerankProviderError, match="InternalServerError"):
        run(scripted_llm, corpus(4)[0], "pairwise", passes=1, strict=False)
    assert scripted_llm.count == 2 * 3  # 500s may be about one pair's passages: every pair was tried


# -- input guards -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "documents, item, fragment",
    [
        ([{"id": "a", "text": "x"}, {"id": "b", "text": "y"}, {"id": "a", "text": "z"}], "a", "also used by document 0"),
        ([{"id": "a", "text": "x"}, {"id": "b", "text": "   "}], "b", "'text' is empty"),
        ([{"id": "a", "text": "x"}, {"id": "b", "text": 42}], "b", "'text' must be a string"),
        (["fine", 7], 1, "expected a string"),
    ],
    ids=["duplicate_id", "empty_text", "non_string_text", "not_a_document"],
)
def test_bad_documents_are_refused_naming_the_item(scripted_llm, documents, item, fragment):
    with pytest.raises(InvalidRerankInputError, match=fragment) as caught:
        run(scripted_llm, documents, "listwise")
    assert caught.value.item == item and scripted_llm.count == 0


def test_more_candidates_than_a_strategy_takes_are_refused(scripted_llm):
    with pytest.raises(TooManyDocumentsError, match="more than the listwise strategy accepts \\(5\\)"):
        run(scripted_llm, corpus(6)[0], "listwise", max_documents=5)
    with pytest.raises(InvalidRerankInputError, match="query"):
        asyncio.run(rerank("  ", ["a"], provider=None))
    with pytest.raises(InvalidRerankInputError, match="top_k"):
        asyncio.run(rerank("q", ["a"], provider=None, top_k=0))
    assert scripted_llm.count == 0


def test_no_documents_no_calls(scripted_llm):
    outcome = run(scripted_llm, [], "pairwise")
    assert outcome.results == [] and outcome.calls == 0 and scripted_llm.count == 0


# -- custom strategies --------------------------------------------------------------------------


class ShortestFirst:
    """The example in docs/STRATEGIES.md: no model call at all, shortest text first."""

    name = "shortest_first"

    def estimate_calls(self, n_documents, top_k=None):
        return 0

    async def rerank(self, query, documents, provider, top_k=None):
        order = sorted(range(len(documents)), key=lambda i: len(documents[i].text))[:top_k]
        return [RerankResult(documents[i], rank, i, rank_score(rank, len(order))) for rank, i in enumerate(order, 1)]


def test_a_registered_custom_strategy_runs_by_name(scripted_llm):
    register_strategy("shortest_first", ShortestFirst)
    outcome = run(scripted_llm, ["long text here", "mid text", "tiny"], "shortest_first", top_k=2)
    assert order_of(outcome) == [2, 1] and outcome.strategy == "shortest_first" and outcome.calls == 0
    assert isinstance(get_strategy("shortest_first"), ShortestFirst)


class Broken(ShortestFirst):
    def __init__(self, mode):
        self.mode = mode

    def estimate_calls(self, n_documents, top_k=None):
        return 1 / 0 if self.mode == "estimate" else 0

    async def rerank(self, query, documents, provider, top_k=None):
        if self.mode == "raises":
            return {}["missing key"]
        results = await super().rerank(query, documents, provider, top_k)
        return results + results[:1] if self.mode == "duplicates" else results[:1]


@pytest.mark.parametrize(
    "mode, fragment",
    [("raises", "KeyError"), ("estimate", "ZeroDivisionError"), ("duplicates", "twice or out of range"),
     ("partial", "ranked 1 documents, expected 3")],
)
def test_a_custom_strategy_failure_is_wrapped(scripted_llm, mode, fragment):
    with pytest.raises(RerankStrategyError, match=fragment) as caught:
        run(scripted_llm, ["a", "bb", "ccc"], Broken(mode))
    if mode == "raises":
        assert isinstance(caught.value.__cause__, KeyError)


class SyncLongestFirst:
    """A synchronous strategy with positional arguments (the protocol allows sync)."""

    def estimate_calls(self, n_documents, top_k=None):
        return 0

    def rerank(self, query, documents, provider, top_k=None):
        order = sorted(range(len(documents)), key=lambda i: -len(documents[i].text))
        return [RerankResult(documents[i], rank, i, rank_score(rank, len(order))) for rank, i in enumerate(order, 1)]


class KeywordOnlyLength:
    """The specification's own example: keyword-only rerank(), no estimate_calls, results without a score."""

    def rerank(self, *, query, documents, provider, top_k=None):
        order = sorted(range(len(documents)), key=lambda index: len(documents[index].text), reverse=True)
        results = [RerankResult(document=documents[index], rank=rank, original_index=index,
                                metadata={"strategy": "length"}) for rank, index in enumerate(order, start=1)]
        return results if top_k is None else results[:top_k]


class AsyncKeywordOnlyLength(KeywordOnlyLength):
    async def rerank(self, *, query, documents, provider, top_k=None):
        return super().rerank(query=query, documents=documents, provider=provider, top_k=top_k)


@pytest.mark.parametrize("strategy", [SyncLongestFirst(), KeywordOnlyLength(), AsyncKeywordOnlyLength()],
                         ids=["sync_positional", "sync_keyword_only", "async_keyword_only"])
def test_sync_async_and_keyword_only_custom_strategies_run(scripted_llm, strategy):
    outcome = run(scripted_llm, ["mid text", "the longest text", "s"], strategy, top_k=2)
    assert order_of(outcome) == [1, 0] and [result.rank for result in outcome.results] == [1, 2]
    scores = [result.score for result in outcome.results]
    assert all(isinstance(score, float) and score > 0 for score in scores) and scores == sorted(scores, reverse=True)
    has_estimate = isinstance(strategy, SyncLongestFirst)
    assert outcome.estimated_calls == (0 if has_estimate else None)  # no estimate_calls: the estimate is unknown
    assert scripted_llm.count == 0


class SyncBroken:
    def __init__(self, mode):
        self.mode = mode

    def rerank(self, *, query, documents, provider, top_k=None):
        if self.mode == "raises":
            raise TypeError("a bug in the strategy")
        if self.mode == "not_a_list":
            return "first, second"
        return [RerankResult(documents[0], 1, 0, score="high")]


@pytest.mark.parametrize("strategy, fragment", [
    (SyncBroken("raises"), "TypeError: a bug in the strategy"),
    (SyncBroken("not_a_list"), "did not return a list of RerankResult"),
    (SyncBroken("bad_score"), "score"),
    (object(), "is not a rerank strategy"),
])
def test_every_custom_strategy_failure_is_a_strategy_error(scripted_llm, strategy, fragment):
    with pytest.raises(RerankStrategyError, match=fragment):
        run(scripted_llm, ["a", "bb"], strategy)
