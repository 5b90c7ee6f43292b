"""The rerank path end to end: config -> factory -> OllamaReranker -> graph search, over real HTTP
to the scripted judge and a real FalkorDB. Proves the reranker decides what callers receive."""

from __future__ import annotations

import logging

import pytest

from app.graph.runtime import GraphitiAdapter, _build_reranker
from graphiti_llm_rerank.ollama_reranker import OllamaReranker
from graphiti_llm_rerank.passthrough import PassthroughReranker
from app.config import Config
from tests.conftest import unique_graph_id
from tests.support.facts import WATER_FACTS
from tests.support.scripted_llm import judge

QUERY = "harbor water utility reservoir town"


def _first_stage(gid: str, limit: int) -> list[str]:
    """The hybrid RRF order, read with the reranker off."""
    return [hit.fact for hit in GraphitiAdapter().graph.search(gid, QUERY, limit=limit).edges]


def _reranking_backend(backend, llm, **extra):
    return backend(RERANKER_PROVIDER="ollama", RERANKER_BASE_URL=llm.base_url, RERANKER_MODEL="judge-model",
                   RERANKER_SCORE_MODE="logprobs", RERANKER_TIMEOUT_S=5, **extra)


def test_search_order_is_the_judges_order_not_rrf(backend, scripted_llm, water_graph):
    rrf = _first_stage(water_graph, limit=8)  # RERANKER_CANDIDATES=2 x limit 4 candidates
    assert len(rrf) == 8
    # A judge that reverses the first stage: the last RRF candidate is the most relevant.
    scripted_llm.responder = judge(lambda query, passage: (rrf.index(passage) + 1) / 10)
    # The judge's order alone: the default fusion also weighs the first stage and the embedder's cosine,
    # which may keep a fact the judge demotes (test_fusion.py).
    # The scripted judge knows the facts by their text: the passages carry no validity (test_passage_time.py).
    _, client = _reranking_backend(backend, scripted_llm, RERANKER_FUSION="none", RERANKER_PASSAGE_TIME="off")
    body = client.post(f"/api/graph/{water_graph}/search", json={"query": QUERY, "limit": 4}).get_json()

    assert [edge["fact"] for edge in body["edges"]] == rrf[::-1][:4]
    # All four came from below the first stage's top 4 (RRF ties may swap between two searches).
    assert sorted(edge["first_stage_rank"] for edge in body["edges"]) == [5, 6, 7, 8]
    assert [edge["rank"] for edge in body["edges"]] == [1, 2, 3, 4]
    scores = [edge["rerank_score"] for edge in body["edges"]]
    assert scores == sorted(scores, reverse=True) and scores[0] == pytest.approx(0.8, abs=1e-6)
    assert body["reranked"] is True
    # The reranker was handed exactly the first-stage candidates, each once, with the query.
    assert sorted(request.passage for request in _judge_requests(scripted_llm)) == sorted(rrf)
    assert {request.query for request in _judge_requests(scripted_llm)} == {QUERY}


def _judge_requests(llm):
    from tests.support.scripted_llm_replies import ChatRequest

    return [ChatRequest(index=i, body=body, headers={}) for i, body in enumerate(llm.requests)]


def test_none_gives_exactly_the_rrf_results(backend, scripted_llm, water_graph):
    rrf = _first_stage(water_graph, limit=4)
    _, client = backend(RERANKER_PROVIDER="none", RERANKER_BASE_URL=scripted_llm.base_url)
    body = client.post(f"/api/graph/{water_graph}/search", json={"query": QUERY, "limit": 4}).get_json()
    # Equal RRF scores may come back in either order between two searches: compare as sets,
    # and check the order is the first stage's own (rank == first-stage rank, scores descending).
    assert sorted(edge["fact"] for edge in body["edges"]) == sorted(rrf)
    assert all(edge["rerank_score"] is None for edge in body["edges"])
    assert [edge["first_stage_rank"] for edge in body["edges"]] == [1, 2, 3, 4]
    scores = [edge["score"] for edge in body["edges"]]
    assert scores == sorted(scores, reverse=True)
    assert scripted_llm.count == 0


def test_candidate_multiplier_sets_how_many_reach_the_judge(backend, scripted_llm, water_graph):
    _reranking_backend(backend, scripted_llm, RERANKER_CANDIDATES=1)
    GraphitiAdapter().graph.search(water_graph, QUERY, limit=3)
    assert scripted_llm.count == 3
    scripted_llm.reset()
    _reranking_backend(backend, scripted_llm, RERANKER_CANDIDATES=2)
    GraphitiAdapter().graph.search(water_graph, QUERY + " council", limit=3)
    assert scripted_llm.count == 6


def test_duplicate_fact_texts_are_both_kept(backend, scripted_llm):
    _reranking_backend(backend, scripted_llm)
    gid = unique_graph_id()
    graph = GraphitiAdapter().graph
    graph.create(gid)
    # The same fact text between other entities: a second edge (an identical fact would be skipped as a
    # duplicate by the import), which Graphiti's own cross-encoder search would collapse into one.
    twin = {"source": "Harbor Town", "target": "Harbor Island", "relation": "connects",
            "fact": "The Harbor Ferry connects the town to Harbor Island every hour"}
    graph.import_facts(gid, WATER_FACTS + [twin])
    hits = graph.search(gid, "ferry to the island", limit=5).edges
    twins = [hit for hit in hits if hit.fact == twin["fact"]]
    assert len(twins) == 2 and twins[0].uuid != twins[1].uuid


def test_nodes_are_judged_on_name_and_summary(backend, scripted_llm, water_graph):
    _reranking_backend(backend, scripted_llm)
    outcome = GraphitiAdapter().graph.search(water_graph, "Mara Lindqvist engineer", limit=2, scope="nodes")
    passages = [request.passage for request in _judge_requests(scripted_llm)]
    assert "Mara Lindqvist: Engineer, director of the town's water utility" in passages
    assert outcome.nodes[0].name == "Mara Lindqvist"


def test_a_dead_judge_leaves_the_first_stage_order(backend, water_graph, caplog):
    from tests.support.scripted_llm import unused_base_url

    rrf = _first_stage(water_graph, limit=8)
    _, client = backend(RERANKER_PROVIDER="ollama", RERANKER_BASE_URL=unused_base_url(), RERANKER_TIMEOUT_S=2)
    with caplog.at_level(logging.WARNING):
        body = client.post(f"/api/graph/{water_graph}/search", json={"query": QUERY, "limit": 4}).get_json()
    assert [edge["first_stage_rank"] for edge in body["edges"]] == [1, 2, 3, 4]  # the first-stage order
    assert {edge["fact"] for edge in body["edges"]} <= set(rrf)
    assert body["error"] is None
    # Not called reranked: the model made no order, so no rerank score and the first stage's own scores.
    assert body["reranked"] is False
    assert all(edge["rerank_score"] is None and edge["score"] == edge["first_stage_score"] for edge in body["edges"])
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and r.name.endswith("ollama_reranker")]
    assert len(warnings) == 1 and "qwen2.5:3b" in warnings[0].getMessage()


def test_factory_picks_the_reranker_and_logs_it(caplog, monkeypatch):
    with caplog.at_level(logging.INFO):
        assert isinstance(_build_reranker("none", Config.from_env()), PassthroughReranker)
        monkeypatch.setenv("RERANKER_BASE_URL", "http://unreachable.invalid:1/v1")
        assert isinstance(_build_reranker("OLLAMA", Config.from_env()), OllamaReranker)  # no network I/O
    assert "Initializing Graphiti reranker (provider=none)" in caplog.text
    assert "Initializing Graphiti reranker (provider=ollama)" in caplog.text
    with pytest.raises(ValueError, match=r"Unknown RERANKER_PROVIDER=cohere; allowed: \('ollama', 'rerank_api', 'none'\)"):
        _build_reranker("cohere", Config.from_env())


def test_health_shows_the_reranker_counters(backend, scripted_llm, water_graph):
    _, client = _reranking_backend(backend, scripted_llm)
    client.post(f"/api/graph/{water_graph}/search", json={"query": QUERY, "limit": 2})
    client.post(f"/api/graph/{water_graph}/search", json={"query": QUERY, "limit": 2})  # all cached now
    health = client.get("/health").get_json()
    assert health["reranker"]["provider"] == "ollama"
    stats = health["reranker"]["stats"]
    assert stats["model"] == "judge-model" and stats["score_mode_in_use"] == "logprobs"
    assert stats["calls"] == 2 and stats["model_requests"] == 4 and stats["cache_hits"] == 4
    assert stats["fallbacks"] == 0 and stats["breaker"]["state"] == "closed"


def test_judge_passages_ranks_and_scores_passages_for_a_question_or_says_it_cannot(backend, scripted_llm):
    passages = ["The ferry sails hourly.", "The mill closed in 1920.", "Ferry tickets cost 4 euros."]
    backend()  # reranker off: no order, the caller keeps its own
    assert GraphitiAdapter().graph.judge_passages("ferry", passages) is None
    score = {passage: passage.lower().count("ferr") / (1 + len(passage) / 100) for passage in passages}
    scripted_llm.responder = judge(lambda query, passage: score[passage])
    _reranking_backend(backend, scripted_llm)
    judged = GraphitiAdapter().graph.judge_passages("ferry", passages)
    assert judged.order == [0, 2, 1]
    assert judged.scores == pytest.approx({position: score[passage] for position, passage in enumerate(passages)}, abs=1e-5)
    assert GraphitiAdapter().graph.judge_passages("ferry", []) is None


def test_judge_passages_with_a_dead_judge_is_none(backend, caplog):
    from tests.support.scripted_llm import unused_base_url

    backend(RERANKER_PROVIDER="ollama", RERANKER_BASE_URL=unused_base_url(), RERANKER_TIMEOUT_S=2)
    with caplog.at_level(logging.WARNING):
        assert GraphitiAdapter().graph.judge_passages("ferry", ["The ferry sails hourly.", "The mill closed."]) is None
    assert any(record.levelno == logging.WARNING for record in caplog.records)
