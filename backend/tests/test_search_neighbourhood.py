"""Graph search with `neighbourhood`: the facts of the first stage's top entities join the judged
candidates, so a fact that shares no word with the question (a cause, a consequence) can still reach
the judge. On the real FalkorDB, over real HTTP to the scripted judge."""

from __future__ import annotations

import pytest

from app.graph.runtime import GraphitiAdapter
from app.report.llm import ReportLLM
from app.report.results import SearchResult
from app.report.search_log import search_movement
from app.report.views import FactView
from app.report.tools import ReportTools
from tests.support.scripted_llm_replies import ChatRequest
from tests.conftest import unique_graph_id
from tests.support.scripted_llm import judge

QUERY = "Harbor Authority"
HIDDEN = "Gale winds flooded the basements on Elm Street overnight"
# Eight facts name the Harbor Authority without being its own; two ferries and the hidden fact are
# its own, and the hidden one shares no word with the query.
FACTS = [
    {"source": f"Pilot {n}", "target": "Town Hall", "relation": "meets",
     "fact": f"Pilot {n} meets the Harbor Authority board at the Town Hall every month"}
    for n in range(1, 9)
] + [
    {"source": "Harbor Authority", "target": f"Ferry {n}", "relation": "runs",
     "fact": f"The Harbor Authority runs Ferry {n}"} for n in (1, 2)
] + [{"source": "Harbor Authority", "target": "Elm Street", "relation": "reported", "fact": HIDDEN}]


@pytest.fixture(scope="module")
def harbor_graph():
    return {}


@pytest.fixture
def harbor(client, harbor_graph):
    if "id" not in harbor_graph:
        graph_id = unique_graph_id("harbor")
        graph = GraphitiAdapter().graph
        graph.create(graph_id)
        graph.import_facts(graph_id, FACTS)
        harbor_graph["id"] = graph_id
    return harbor_graph["id"]


def search(app, graph_id: str, neighbourhood: int):
    return GraphitiAdapter(app.config["APP_CONFIG"]).graph.search(graph_id, QUERY, limit=2, neighbourhood=neighbourhood)


def judge_by_basements(llm):
    llm.responder = judge(lambda query, passage: 0.95 if "basements" in passage else 0.2)
    return dict(RERANKER_PROVIDER="ollama", RERANKER_BASE_URL=llm.base_url, RERANKER_MODEL="judge-model",
                RERANKER_SCORE_MODE="logprobs", RERANKER_TIMEOUT_S=5, RERANKER_CACHE_SIZE=0)


def test_the_facts_of_the_top_entity_reach_the_judge_and_can_win(backend, scripted_llm, harbor):
    app, _ = backend(**judge_by_basements(scripted_llm))
    plain = search(app, harbor, neighbourhood=0)
    judged_plain = {body["messages"][-1]["content"] for body in scripted_llm.requests}
    # The first stage alone (4 candidates for limit 2) never shows the judge the hidden fact...
    assert plain.candidates == 4 and not any(HIDDEN in text for text in judged_plain)
    assert HIDDEN not in [hit.fact for hit in plain.edges]

    scripted_llm.reset()
    expanded = search(app, harbor, neighbourhood=1)
    # ...the neighbourhood of "Harbor Authority" does (its own facts the first stage left out), and
    # the judge puts it first.
    own = {fact["fact"] for fact in FACTS if fact["source"] == "Harbor Authority"}
    left_out = own - set(plain.trace["edges"].passages)
    assert HIDDEN in left_out and expanded.candidates == 4 + len(left_out) == scripted_llm.count
    top = expanded.edges[0]
    assert (top.fact, top.from_neighbourhood, top.rerank_score) == (HIDDEN, True, pytest.approx(0.95, abs=1e-6))
    assert top.first_stage_rank > 4  # placed after the first stage's own candidates
    assert not expanded.edges[1].from_neighbourhood or expanded.edges[1].first_stage_rank > 4
    assert expanded.nodes == []  # scope "edges": the entities were only a way to the facts
    # The report's step log says where it came from, not that it "moved up" from a first-stage place.
    result = SearchResult(graph_id=harbor, query=QUERY, scope="edges", reranked=True, entities=[],
                          facts=[FactView.from_hit(hit, QUERY) for hit in expanded.edges])
    logged = search_movement(result, shown="")["facts"]
    assert logged[0]["from_neighbourhood"] is True
    assert [entry.get("from_neighbourhood", False) for entry in logged] == [hit.from_neighbourhood for hit in expanded.edges]
    assert len({hit.uuid for hit in expanded.edges}) == len(expanded.edges)


def test_without_a_reranker_the_neighbourhood_changes_nothing(backend, scripted_llm, harbor):
    app, _ = backend(RERANKER_PROVIDER="none")
    plain, expanded = search(app, harbor, neighbourhood=0), search(app, harbor, neighbourhood=3)
    # Nothing could place the extra facts: the first stage's answer stands as it is.
    assert expanded.candidates == plain.candidates == 2
    assert sorted(hit.fact for hit in expanded.edges) == sorted(hit.fact for hit in plain.edges)
    assert not any(hit.from_neighbourhood for hit in expanded.edges) and scripted_llm.count == 0


def test_the_search_api_takes_a_neighbourhood_and_refuses_a_bad_one(backend, scripted_llm, harbor):
    _, client = backend(**judge_by_basements(scripted_llm))
    body = client.post(f"/api/graph/{harbor}/search", json={"query": QUERY, "limit": 2, "neighbourhood": 1}).get_json()
    assert body["edges"][0]["fact"] == HIDDEN and body["edges"][0]["from_neighbourhood"] is True
    statuses = {}
    for bad in (-1, 11, "two", 1.5):
        response = client.post(f"/api/graph/{harbor}/search", json={"query": QUERY, "neighbourhood": bad})
        assert "neighbourhood" in response.get_json()["error"]["message"]
        statuses[bad] = response.status_code
    assert statuses == {-1: 422, 11: 422, "two": 400, 1.5: 400}  # as for `limit`: out of range, wrong type


def test_insight_forge_searches_the_question_with_its_neighbourhood(backend, scripted_llm, harbor):
    app, _ = backend(**judge_by_basements(scripted_llm))  # non-judge prompts get a 400: the split fails
    first_stage = set(search(app, harbor, neighbourhood=0).trace["edges"].passages)
    scripted_llm.reset()
    llm = ReportLLM(base_url=scripted_llm.base_url, api_key="k", model="chat", timeout_s=5)
    try:
        result = ReportTools(app.config["APP_CONFIG"], llm=llm).insight_forge(harbor, QUERY, limit=2)
    finally:
        llm.close()
    judged = [request.judge_fields[1] for request in _judge_requests(scripted_llm)]
    assert result.sub_queries == [QUERY] and result.reranked
    # The question's search handed the judge the first stage's 4 candidates and facts around its entities.
    assert len(judged) > 4 and first_stage < set(judged)


def test_the_search_tool_takes_a_neighbourhood(backend, scripted_llm, harbor):
    # The report agent's searches pass one (a name followed up from results finds its entity's own
    # facts); the tool's default stays the plain search.
    app, _ = backend(**judge_by_basements(scripted_llm))
    tools = ReportTools(app.config["APP_CONFIG"])
    plain = tools.search_graph(harbor, QUERY, limit=2, scope="edges")
    expanded = tools.search_graph(harbor, QUERY, limit=2, scope="edges", neighbourhood=1)
    assert HIDDEN not in [fact.fact for fact in plain.facts]
    assert expanded.facts[0].fact == HIDDEN and expanded.facts[0].from_neighbourhood


def test_a_search_leaves_out_the_facts_the_caller_holds(backend, scripted_llm, harbor):
    app, _ = backend(**judge_by_basements(scripted_llm))
    graph = GraphitiAdapter(app.config["APP_CONFIG"]).graph
    whole = graph.search(harbor, QUERY, limit=4)
    held = frozenset({whole.edges[0].uuid, whole.edges[2].uuid})
    rest = graph.search(harbor, QUERY, limit=4, exclude=held)
    # Same pool, same order; the held facts give their places to the next ones, which keep their ranks.
    assert rest.candidates == whole.candidates and len(rest.edges) == 4
    assert rest.excluded == [whole.edges[0].uuid, whole.edges[2].uuid]
    assert [hit.uuid for hit in rest.edges[:2]] == [whole.edges[1].uuid, whole.edges[3].uuid]
    assert [hit.rank for hit in rest.edges] == [2, 4, 5, 6] and not held & {hit.uuid for hit in rest.edges}
    text = ReportTools(app.config["APP_CONFIG"]).search_graph(harbor, QUERY, limit=4, already_shown=held).to_text()
    assert "2 facts you were shown before are left out" in text


def _judge_requests(llm):
    requests = [ChatRequest(index=i, body=body, headers={}) for i, body in enumerate(llm.requests)]
    return [request for request in requests if request.judge_fields is not None]


FERRY_FIRE = "The engine room of Ferry 1 caught fire near the breakwater"


def test_a_fact_one_entity_further_out_reaches_the_judge(backend, scripted_llm):
    # Ferry 1 is the entity the Harbor Authority's own facts name most often (twice); the fire is a
    # fact of Ferry 1 alone, two steps from the query, sharing no word with it.
    graph_id = unique_graph_id("harbor2")
    graph = GraphitiAdapter().graph
    graph.create(graph_id)
    graph.import_facts(graph_id, FACTS + [
        {"source": "Harbor Authority", "target": "Ferry 1", "relation": "inspects",
         "fact": "The Harbor Authority inspects Ferry 1 every spring"},
        {"source": "Ferry 1", "target": "Breakwater", "relation": "caught fire near", "fact": FERRY_FIRE},
    ])
    settings = judge_by_basements(scripted_llm)
    scripted_llm.responder = judge(lambda query, passage: 0.95 if "engine" in passage else 0.2)
    app, _ = backend(**settings)
    outcome = search(app, graph_id, neighbourhood=1)
    top = outcome.edges[0]
    assert (top.fact, top.from_neighbourhood) == (FERRY_FIRE, True)
    # The neighbourhood adds at most as many facts as the first stage gave (4 for limit 2).
    assert outcome.candidates <= 4 + 4 and outcome.judged == outcome.candidates
