"""OllamaReranker running any strategy as Graphiti's cross encoder, its factory wiring, and graph search
with RERANKER_STRATEGY=listwise end to end (scripted model over HTTP, real FalkorDB)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging

import pytest

from app.config import Config
from graphiti_llm_rerank.strategies import get_strategy
from graphiti_llm_rerank.strategies import strategy_from_config
from app.graph.runtime import GraphitiAdapter, _build_reranker
from graphiti_llm_rerank.ollama_reranker import OllamaReranker
from graphiti_llm_rerank.providers import shared_judge
from tests.conftest import unique_graph_id
from tests.support.facts import WATER_FACTS
from tests.support.scripted_llm import always, garbage, hang, unused_base_url
from tests.support.scripted_rankers import prompts_of, ranking_llm

QUERY = "harbor water utility reservoir town"


def config_for(base_url: str, **settings) -> Config:
    return dataclasses.replace(
        Config.from_env(), reranker_provider="ollama", reranker_base_url=base_url, reranker_model="ranker",
        reranker_timeout_s=5.0, **settings,
    )


def rank(reranker, passages, query="q"):
    async def go():
        try:
            return await reranker.rank(query, passages)
        finally:
            await reranker.aclose()  # a client left to the garbage collector logs asyncio errors later

    return asyncio.run(go())


def warnings_in(caplog):
    """The app's own warnings (asyncio's complaints about other tests' leftovers are not ours)."""
    return [record for record in caplog.records if record.levelno >= logging.WARNING and record.name.startswith(("app.", "graphiti_llm_rerank."))]


def by_length(query, passage):
    return len(passage) / 100


def test_factory_builds_a_strategy_reranker_on_the_shared_judge(scripted_llm):
    config = config_for(scripted_llm.base_url, reranker_strategy="sliding_window", reranker_window_size=4,
                        reranker_window_stride=1, reranker_max_document_chars=50)
    reranker = _build_reranker("ollama", config)
    assert isinstance(reranker, OllamaReranker) and reranker.judge is shared_judge(config)
    assert (reranker.strategy.window_size, reranker.strategy.stride, reranker.strategy.max_document_chars) == (4, 1, 50)
    pointwise = _build_reranker("ollama", dataclasses.replace(config, reranker_strategy="pointwise"))
    assert isinstance(pointwise, OllamaReranker)
    assert shared_judge(dataclasses.replace(config, reranker_strategy="pointwise")) is pointwise.judge
    with pytest.raises(ValueError, match="RERANKER_STRATEGY=sliding_window: stride"):
        _build_reranker("ollama", dataclasses.replace(config, reranker_window_stride=4))
    with pytest.raises(ValueError, match="needs an embedder"):
        _build_reranker("ollama", dataclasses.replace(config, reranker_strategy="mmr"))


@pytest.mark.parametrize("rounds, calls", [(2, 8), (10, 40)])
def test_settings_build_a_single_group_halving_tournament(rounds, calls):
    """Graph search, /api/rerank and the benchmark build from settings: their candidate counts vary, so
    they pass the halving plan explicitly instead of the paper's 100-candidate default."""
    config = dataclasses.replace(Config(), reranker_strategy="tournament", reranker_tournament_rounds=rounds)
    strategy = strategy_from_config(config)
    assert strategy.plan == "halving" and strategy.estimate_calls(20) == calls
    assert [(stage.groups, stage.select) for stage in strategy.plan_for(20)] == [(1, 10), (1, 5), (1, 2), (1, 1)]


def test_new_settings_are_validated(monkeypatch):
    monkeypatch.setenv("RERANKER_MMR_LAMBDA", "1.5")
    with pytest.raises(ValueError, match="RERANKER_MMR_LAMBDA must be <= 1"):
        Config.from_env()
    monkeypatch.setenv("RERANKER_MMR_LAMBDA", "0.5")
    monkeypatch.setenv("RERANKER_MMR_BASE", "mmr")
    with pytest.raises(ValueError, match="Unknown RERANKER_MMR_BASE='mmr'"):
        Config.from_env()
    monkeypatch.setenv("RERANKER_MMR_BASE", "pairwise")
    monkeypatch.setenv("RERANKER_PAIRWISE_PASSES", "3")
    from app.graph.local_embedder import LocalE5Embedder

    mmr = strategy_from_config(dataclasses.replace(Config.from_env(), reranker_strategy="mmr"),
                               embedder=LocalE5Embedder())
    assert mmr.base.name == "pairwise" and mmr.base.passes == 3 and mmr.lambda_ == 0.5


@pytest.mark.parametrize("strategy", ["listwise", "pairwise", "tournament", "sliding_window"])
def test_every_passage_comes_back_once_with_descending_positive_scores(scripted_llm, strategy):
    scripted_llm.responder = ranking_llm(by_length)
    passages = ["mid sized text", "", "a", "the longest passage of them all", "a", "twenty-char passage."]
    knobs = {"sliding_window": {"window_size": 3, "stride": 1}, "tournament": {"plan": "halving"}}.get(strategy, {})
    reranker = OllamaReranker(judge=shared_judge(config_for(scripted_llm.base_url)), strategy=get_strategy(strategy, **knobs))
    result = rank(reranker, passages)
    assert sorted(passage for passage, _ in result) == sorted(passages)
    assert [passage for passage, _ in result][:3] == [
        "the longest passage of them all", "twenty-char passage.", "mid sized text"]
    assert result[-1][0] == ""  # empty passages cannot be judged: last
    scores = [score for _, score in result]
    assert scores == sorted(scores, reverse=True) and len(set(scores)) == len(scores) and min(scores) > 0


def test_graph_search_with_mmr_gets_every_passage_back(scripted_llm):
    """mmr answers 5 by default; graph search applies its own limit, so its reranker asks for all."""
    from app.graph.local_embedder import LocalE5Embedder

    scripted_llm.responder = ranking_llm(by_length)
    passages = [f"fact {i}: " + "word " * (i + 1) + f"about topic {i * 13}" for i in range(8)]
    reranker = OllamaReranker(judge=shared_judge(config_for(scripted_llm.base_url)),
                              strategy=get_strategy("mmr", embedder=LocalE5Embedder()))
    result = rank(reranker, passages)
    assert sorted(passage for passage, _ in result) == sorted(passages)
    scores = [score for _, score in result]
    assert scores == sorted(scores, reverse=True) and min(scores) > 0


def test_a_dead_server_gives_the_first_stage_order_with_one_warning(caplog):
    reranker = OllamaReranker(judge=shared_judge(config_for(unused_base_url())), strategy=get_strategy("listwise"))
    passages = [f"passage {i}" for i in range(6)]
    result = rank(reranker, passages)
    assert [passage for passage, _ in result] == passages and min(score for _, score in result) > 0
    (warning,) = warnings_in(caplog)
    assert "listwise" in warning.getMessage() and "APIConnectionError" in warning.getMessage()
    assert reranker.stats()["fallbacks"] == 1


def test_a_hanging_server_is_cut_by_the_deadline(scripted_llm, caplog):
    scripted_llm.responder = always(hang())
    reranker = OllamaReranker(judge=shared_judge(config_for(scripted_llm.base_url)), strategy=get_strategy("pairwise"),
                              deadline_s=0.4)
    passages = ["x", "y", "z"]
    assert [passage for passage, _ in rank(reranker, passages)] == passages
    (warning,) = warnings_in(caplog)
    assert "RankDeadlineExceeded" in warning.getMessage()


def test_unit_fallbacks_are_counted_without_a_warning(scripted_llm, caplog):
    scripted_llm.responder = ranking_llm(by_length, listwise=lambda p: garbage() if "zz" in p.passages else None)
    reranker = OllamaReranker(judge=shared_judge(config_for(scripted_llm.base_url)),
                              strategy=get_strategy("sliding_window", window_size=3, stride=2))
    result = rank(reranker, ["aaaa", "bbbbbb", "c", "dd", "zz"])
    assert len(result) == 5 and not warnings_in(caplog)
    stats = reranker.stats()
    assert stats["strategy_counters"]["unit_fallbacks"] == 1
    # The judge-wide counters (/health) see the unusable answer and the window that kept its order.
    assert stats["invalid_outputs"] == 1 and stats["unit_fallbacks"] == 1 and stats["fallbacks"] == 0
    assert stats["strategy"] == "sliding_window"


@pytest.mark.parametrize("strategy, knobs, units", [
    ("sliding_window", {"window_size": 3, "stride": 2}, 2),
    ("listwise", {}, 1),
    ("tournament", {"rounds": 1, "plan": [(1, 2), (1, 1)]}, 2),
    ("pairwise", {"passes": 1}, 4),
])
def test_every_garbage_answer_is_an_invalid_output(scripted_llm, strategy, knobs, units):
    """A run where every answer is garbage falls back once, and says why: each unusable answer is an
    invalid output and each unit that kept its order a unit fallback (not 0 invalid, as a count of pointwise failures alone would read)."""
    scripted_llm.responder = always(garbage("no idea"))
    reranker = OllamaReranker(judge=shared_judge(config_for(scripted_llm.base_url)), strategy=get_strategy(strategy, **knobs))
    passages = ["aaaa", "bbbbbb", "c", "dd", "zz"][: 4 if strategy == "tournament" else 5]
    assert [passage for passage, _ in rank(reranker, passages)] == passages
    stats = reranker.stats()
    assert stats["fallbacks"] == 1
    assert stats["invalid_outputs"] == stats["model_requests"] == scripted_llm.count > 0
    assert stats["unit_fallbacks"] == units


def test_graph_search_order_follows_the_listwise_model(backend, scripted_llm):
    _, client = backend()
    gid = unique_graph_id()
    graph = GraphitiAdapter().graph
    graph.create(gid)
    graph.import_facts(gid, WATER_FACTS)
    rrf = [hit.fact for hit in graph.search(gid, QUERY, limit=6).edges]  # reranker off: first stage
    assert len(rrf) == 6
    # The scripted model ranks the first stage upside down.
    scripted_llm.responder = ranking_llm(lambda query, passage: rrf.index(passage) if passage in rrf else -1)
    # The model's order alone (RERANKER_FUSION=none): the default also weighs the cosine and the first stage.
    _, client = backend(RERANKER_PROVIDER="ollama", RERANKER_STRATEGY="listwise", RERANKER_MODEL="ranker",
                        RERANKER_BASE_URL=scripted_llm.base_url, RERANKER_TIMEOUT_S=5, RERANKER_FUSION="none")
    body = client.post(f"/api/graph/{gid}/search", json={"query": QUERY, "limit": 3}).get_json()
    (prompt,) = prompts_of(scripted_llm, "listwise")  # one listwise call saw the candidates
    # RRF ties may let two searches' candidate lists differ at their edge: expect the model's order
    # over the candidates this search gave it (the model ranks the first stage upside down).
    position = {passage: (rrf.index(passage) if passage in rrf else -1) for passage in prompt.passages}
    assert [edge["fact"] for edge in body["edges"]] == sorted(prompt.passages, key=lambda p: -position[p])[:3]
    assert len(set(prompt.passages) & set(rrf)) >= 5 and prompt.query == QUERY
    assert max(edge["first_stage_rank"] for edge in body["edges"]) > 3
    scores = [edge["rerank_score"] for edge in body["edges"]]
    assert scores == sorted(scores, reverse=True) and min(scores) > 0
    stats = client.get("/health").get_json()["reranker"]["stats"]
    assert stats["strategy"] == "listwise" and stats["calls"] >= 1 and stats["fallbacks"] == 0
    assert stats["unit_fallbacks"] == 0 and stats["invalid_outputs"] == 0  # /health shows both counters
