"""Graph search with `answer_like`: a sketch of how the answer might read finds candidates the
question's own words miss, and the judge still scores every candidate against the question. On the
real FalkorDB, over real HTTP to the scripted judge."""

from __future__ import annotations

import pytest

from app.graph.runtime import GraphitiAdapter
from app.report.agent import start_report
from app.report.store import ReportStore
from app.report.tool_args import ToolArgumentError, parse_tool_arguments
from app.report.tools import ReportTools
from tests.conftest import unique_graph_id
from tests.support.report_scripts import as_json, chat_requests, judge_or_chat, purpose, wait_for
from tests.support.scripted_llm import judge
from tests.support.scripted_llm_replies import ChatRequest

QUESTION = "What closed the Harbor Authority ferry service"
SKETCH_SENTENCES = ["Strong gale winds and flooding stopped the boats.", "It happened overnight."]
SKETCH = " ".join(SKETCH_SENTENCES)
CAUSE = "Gale winds flooded the basements on Elm Street overnight"
# Six facts share the question's words and are not the answer; the cause shares none of them.
FACTS = [
    {"source": "Harbor Authority", "target": f"Ferry {n}", "relation": "runs",
     "fact": f"The Harbor Authority ferry service runs Ferry {n} from the old pier"} for n in range(1, 7)
] + [{"source": "Storm Ivo", "target": "Elm Street", "relation": "flooded", "fact": CAUSE}]


@pytest.fixture(scope="module")
def closure_graph():
    return {}


@pytest.fixture
def closure(client, closure_graph):
    if "id" not in closure_graph:
        graph_id = unique_graph_id("closure")
        graph = GraphitiAdapter().graph
        graph.create(graph_id)
        graph.import_facts(graph_id, FACTS)
        closure_graph["id"] = graph_id
    return closure_graph["id"]


def judge_by_gale(llm):
    llm.responder = judge(lambda query, passage: 0.95 if "Gale" in passage else 0.2)
    return dict(RERANKER_PROVIDER="ollama", RERANKER_BASE_URL=llm.base_url, RERANKER_MODEL="judge-model",
                RERANKER_SCORE_MODE="logprobs", RERANKER_TIMEOUT_S=5, RERANKER_CACHE_SIZE=0)


def judged(llm) -> list[tuple[str, str]]:
    requests = [ChatRequest(index=i, body=body, headers={}) for i, body in enumerate(llm.requests)]
    return [request.judge_fields for request in requests if request.judge_fields is not None]


def test_a_sketch_brings_the_answer_to_the_judge_which_scores_it_against_the_question(backend, scripted_llm,
                                                                                       closure):
    app, _ = backend(**judge_by_gale(scripted_llm))
    graph = GraphitiAdapter(app.config["APP_CONFIG"]).graph
    plain = graph.search(closure, QUESTION, limit=2)
    # The question's own 4 candidates (2 x limit) are its word matches: the cause is not judged.
    assert plain.candidates == 4 and CAUSE not in {passage for _, passage in judged(scripted_llm)}

    scripted_llm.reset()
    sketched = graph.search(closure, QUESTION, limit=2, answer_like=SKETCH)
    calls = judged(scripted_llm)
    assert CAUSE in {passage for _, passage in calls}
    assert {query for query, _ in calls} == {QUESTION}  # never the sketch: it only chose what is judged
    # The sketch's 4 candidates and the question's best 2, each once.
    own_best = set(plain.trace["edges"].passages[:2])
    assert own_best <= set(sketched.trace["edges"].passages)
    assert 4 <= sketched.candidates == len(set(sketched.trace["edges"].passages)) <= 6
    assert sketched.edges[0].fact == CAUSE and sketched.edges[0].rerank_score == pytest.approx(0.95, abs=1e-6)


def test_without_a_reranker_a_sketch_changes_nothing(backend, scripted_llm, closure):
    app, _ = backend(RERANKER_PROVIDER="none")
    graph = GraphitiAdapter(app.config["APP_CONFIG"]).graph
    plain, sketched = graph.search(closure, QUESTION, limit=2), graph.search(closure, QUESTION, limit=2,
                                                                              answer_like=SKETCH)
    # Nothing would hold the sketch's finds to the question, so the question's answer stands.
    assert [hit.fact for hit in sketched.edges] == [hit.fact for hit in plain.edges]
    assert CAUSE not in [hit.fact for hit in plain.edges] and scripted_llm.count == 0


def test_the_search_and_insight_tools_take_a_sketch_for_the_question(backend, scripted_llm, closure):
    app, _ = backend(**judge_by_gale(scripted_llm))  # non-judge prompts get a 400: InsightForge's split fails
    tools = ReportTools(app.config["APP_CONFIG"])
    found = tools.search_graph(closure, QUESTION, limit=2, scope="edges", answer_like=SKETCH)
    assert found.facts[0].fact == CAUSE
    insight = tools.insight_forge(closure, QUESTION, limit=2, answer_like=SKETCH)
    assert insight.sub_queries == [QUESTION] and insight.facts[0].fact == CAUSE
    tools.close()


def test_the_search_api_takes_a_sketch_and_refuses_a_bad_one(backend, scripted_llm, closure):
    _, client = backend(**judge_by_gale(scripted_llm))
    url = f"/api/graph/{closure}/search"
    body = client.post(url, json={"query": QUESTION, "limit": 2, "answer_like": SKETCH}).get_json()
    assert body["edges"][0]["fact"] == CAUSE and body["candidates"] >= 4
    answers = {}
    for bad in ("", "   ", 7, ["rain"], "x" * 2001, "a\x00b"):
        response = client.post(url, json={"query": QUESTION, "answer_like": bad})
        assert "answer_like" in response.get_json()["error"]["message"]
        answers[repr(bad)[:12]] = response.status_code
    assert answers == {"''": 400, "'   '": 400, "7": 400, "['rain']": 400, repr("x" * 2001)[:12]: 413,
                       "'a\\x00b'": 400}


def test_a_sketch_argument_is_checked_like_any_text():
    assert parse_tool_arguments("search_graph", {"query": "q", "answer_like": "  a b  "})["answer_like"] == "a b"
    for bad in ("", "x" * 1001, 3, "a\x00b"):
        with pytest.raises(ToolArgumentError, match="answer_like"):
            parse_tool_arguments("insight_forge", {"question": "q", "answer_like": bad})


def sketch_then_search_then_write(messages, body):
    kind = purpose(messages)
    if kind == "sketch":
        return as_json({"sentences": SKETCH_SENTENCES})
    if kind == "outline":
        return as_json({"title": "Ferries", "sections": [{"title": "The closure", "goal": QUESTION}]})
    return as_json({"action": "write", "content": "Written."})


@pytest.mark.parametrize("provider", ["ollama", "none"])
def test_the_agent_sketches_the_answer_for_a_sections_first_search(backend, scripted_llm, closure, provider):
    judge_settings = judge_by_gale(scripted_llm) if provider == "ollama" else {"RERANKER_PROVIDER": "none"}
    scripted_llm.responder = judge_or_chat(lambda query, passage: 0.95 if "Gale" in passage else 0.2,
                                           sketch_then_search_then_write)
    app, _ = backend(LLM_BASE_URL=scripted_llm.base_url, LLM_MODEL_NAME="writer", LLM_TIMEOUT_S=10, **judge_settings)
    config = app.config["APP_CONFIG"]
    report_id, task = start_report(config, closure, QUESTION, max_sections=1, planned_calls=1)
    assert wait_for(task.task_id)["state"] == "done"
    log = ReportStore(config.data_dir).read(report_id)["log"]
    sketches = [step for step in log if step["kind"] == "sketch"]
    first_search = next(step for step in log if step["kind"] == "tool")
    asked = [request for request in chat_requests(scripted_llm) if purpose(request.messages) == "sketch"]
    if provider == "none":  # nothing would judge what a sketch brings: no model call is spent on one
        assert sketches == [] and asked == [] and "answer_like" not in first_search["arguments"]
        return
    assert [step["sketch"] for step in sketches] == [SKETCH] and len(asked) == 1
    assert asked[0].messages[-1]["content"] == f"Question: {QUESTION}" and sketches[0]["step"] < first_search["step"]
    assert first_search["arguments"]["answer_like"] == SKETCH and first_search["planned"] is True
    assert first_search["search"]["facts"][0]["fact"] == CAUSE


def test_a_section_that_opens_with_interviews_asks_for_no_sketch(backend, scripted_llm, closure):
    # "Who ... how" opens with interview_entities, which picks people rather than searching facts.
    judge_settings = judge_by_gale(scripted_llm)
    scripted_llm.responder = judge_or_chat(lambda query, passage: 0.5, sketch_then_search_then_write)
    app, _ = backend(LLM_BASE_URL=scripted_llm.base_url, LLM_MODEL_NAME="writer", LLM_TIMEOUT_S=10, **judge_settings)
    config = app.config["APP_CONFIG"]
    report_id, task = start_report(config, closure, "Who responded how to the ferry closure?", max_sections=1,
                                   planned_calls=1)
    assert wait_for(task.task_id)["state"] == "done"
    log = ReportStore(config.data_dir).read(report_id)["log"]
    first_tool = next(step for step in log if step["kind"] == "tool")
    assert first_tool["tool"] == "interview_entities" and "answer_like" not in first_tool["arguments"]
    assert not [step for step in log if step["kind"] == "sketch"]
