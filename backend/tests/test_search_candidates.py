"""Graph search with `candidates`: a deeper first-stage pool for the judge, so an answer the first
stage ranks far down (a report section's own question shares few words with its answers) can still
be judged and win. On the real FalkorDB, over real HTTP to the scripted judge."""

from __future__ import annotations

import pytest
from graphiti_core.search.search_config_recipes import EDGE_HYBRID_SEARCH_RRF, NODE_HYBRID_SEARCH_RRF

from app.graph.runtime import GraphitiAdapter
from app.report.tools import ReportTools
from tests.support.scripted_llm import judge
# The harbor graph (and its fixture) of the neighbourhood tests: many facts share the query's words.
from tests.test_search_neighbourhood import FACTS, QUERY, harbor, harbor_graph, judge_by_basements  # noqa: F401

ALL = len(FACTS)


def judge_favouring(llm, favoured: str = "") -> dict:
    settings = judge_by_basements(llm)
    llm.responder = judge(lambda query, passage: 0.95 if passage == favoured else 0.2)
    # The judge's order alone: the pool decides what can be judged; under the default fusion the cheap
    # signals' half can keep a fact they both rank last below one they both rank first (test_fusion.py).
    return {**settings, "RERANKER_FUSION": "none"}


def search(app, graph_id: str, candidates: int | None = None):
    return GraphitiAdapter(app.config["APP_CONFIG"]).graph.search(graph_id, QUERY, limit=2, candidates=candidates)


def judged_passages(llm) -> set[str]:
    return {body["messages"][-1]["content"] for body in llm.requests}


def test_a_deep_pool_lets_a_fact_far_down_the_first_stage_win(backend, scripted_llm, harbor):
    app, _ = backend(**judge_favouring(scripted_llm))
    usual = search(app, harbor)
    usual_pool = set(usual.trace["edges"].passages)
    assert usual.candidates == usual.judged == 4 == scripted_llm.count  # limit 2 x RERANKER_CANDIDATES 2

    scripted_llm.reset()
    deep = search(app, harbor, candidates=ALL)
    deep_order = deep.trace["edges"].passages
    assert deep.candidates == deep.judged == ALL == scripted_llm.count and len(deep.edges) == 2
    # A fact the usual pool never reaches: the deepest one the first stage gave.
    favoured = [text for text in deep_order if text not in usual_pool][-1]
    assert deep_order.index(favoured) >= 4

    judge_favouring(scripted_llm, favoured)
    scripted_llm.reset()
    usual = search(app, harbor)
    assert favoured not in judged_passages(scripted_llm) and favoured not in [hit.fact for hit in usual.edges]
    deep = search(app, harbor, candidates=ALL)
    top = deep.edges[0]
    assert (top.fact, top.rerank_score) == (favoured, pytest.approx(0.95, abs=1e-6))
    assert top.first_stage_rank == deep_order.index(favoured) + 1 > 4
    # The report tools pass the depth through the same path.
    facts = ReportTools(app.config["APP_CONFIG"]).search_graph(harbor, QUERY, limit=2, scope="edges",
                                                               candidates=ALL).facts
    assert facts[0].fact == favoured


def test_a_pool_is_never_smaller_than_the_answer(backend, scripted_llm, harbor):
    app, _ = backend(**judge_favouring(scripted_llm))
    outcome = GraphitiAdapter(app.config["APP_CONFIG"]).graph.search(harbor, QUERY, limit=3, candidates=1)
    assert outcome.candidates == 3 == scripted_llm.count and len(outcome.edges) == 3


def test_without_a_reranker_the_depth_changes_nothing(backend, scripted_llm, harbor):
    app, _ = backend(RERANKER_PROVIDER="none")
    plain, deep = search(app, harbor), search(app, harbor, candidates=ALL)
    # Nothing would judge the deeper candidates: the first stage's own top answers stand.
    assert deep.candidates == plain.candidates == 2 and scripted_llm.count == 0
    assert [hit.fact for hit in deep.edges] == [hit.fact for hit in plain.edges]


def test_the_search_api_takes_candidates_and_refuses_bad_ones(backend, scripted_llm, harbor):
    _, client = backend(**judge_favouring(scripted_llm))
    url = f"/api/graph/{harbor}/search"
    body = client.post(url, json={"query": QUERY, "limit": 2, "candidates": ALL}).get_json()
    assert body["candidates"] == body["judged"] == ALL and len(body["edges"]) == 2
    usual = client.post(url, json={"query": QUERY, "limit": 2, "candidates": 0}).get_json()
    assert usual["candidates"] == 4  # 0 is the usual pool
    statuses = {}
    for bad in (-1, 201, "many", 2.5):
        response = client.post(url, json={"query": QUERY, "candidates": bad})
        assert "candidates" in response.get_json()["error"]["message"]
        statuses[bad] = response.status_code
    assert statuses == {-1: 422, 201: 422, "many": 400, 2.5: 400}


def test_a_search_leaves_graphitis_shared_recipes_as_they_were(backend, scripted_llm, harbor):
    # The first stage copies Graphiti's module-level recipes and sets its own limit on the copy: a search
    # that wrote into the shared objects would change every later search in the process (R5.7).
    before = [recipe.model_dump() for recipe in (EDGE_HYBRID_SEARCH_RRF, NODE_HYBRID_SEARCH_RRF)]
    app, _ = backend(**judge_favouring(scripted_llm))
    graph = GraphitiAdapter(app.config["APP_CONFIG"]).graph
    for scope in ("edges", "nodes", "both"):
        assert not graph.search(harbor, QUERY, limit=3, scope=scope, candidates=ALL, neighbourhood=2).error
    assert [recipe.model_dump() for recipe in (EDGE_HYBRID_SEARCH_RRF, NODE_HYBRID_SEARCH_RRF)] == before
    assert before[0]["limit"] != ALL  # the search did ask for ALL candidates: a leaked limit would show


def test_facts_the_caller_holds_leave_room_for_others(backend, harbor):
    # The reranker off: the pool is only `limit` deep, so the held facts must not take all of it.
    app, _ = backend()
    graph = GraphitiAdapter(app.config["APP_CONFIG"]).graph
    held = frozenset(hit.uuid for hit in graph.search(harbor, QUERY, limit=2).edges)
    assert len(held) == 2
    again = graph.search(harbor, QUERY, limit=2, exclude=held)
    assert len(again.edges) == 2 and not held & {hit.uuid for hit in again.edges}
    # The deeper first stage may rank a held fact below the answer's places: then it is not counted.
    assert again.excluded and set(again.excluded) <= held
