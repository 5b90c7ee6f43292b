"""The report tools on a real FalkorDB graph, with the scripted OpenAI-compatible server playing the
chat LLM (sub-queries, interviews) and, where reranking is on, the judge."""

from __future__ import annotations

import pytest

from app.report import tools as report_tools
from app.graph.store import UnknownGraphError
from app.graph.runtime import GraphitiAdapter
from app.report.llm import ReportLLM
from app.report.results import DONT_KNOW
from app.report.tool_args import ToolArgumentError, UnknownToolError
from app.report.tools import ReportTools
from tests.conftest import unique_graph_id
from tests.support.report_scripts import (
    REPORT_FACTS, as_json, chat_requests, interview_facts, interviewee, judge_or_chat, judge_requests, purpose,
)
from tests.support.scripted_llm import server_error

DIRECTS = "Mara Lindqvist directs the Harbor Water Utility since 2019"
ALGAE = "An algae bloom closed the North Reservoir for three weeks in August 2024"


@pytest.fixture
def report_graph(client):
    gid = unique_graph_id("rep")
    graph = GraphitiAdapter().graph
    graph.create(gid)
    graph.import_facts(gid, REPORT_FACTS)
    return gid


@pytest.fixture
def tools(client, scripted_llm):
    """Tools on the running (RERANKER_PROVIDER=none) runtime, their chat LLM the scripted server."""
    config = client.application.config["APP_CONFIG"]
    llm = ReportLLM(base_url=scripted_llm.base_url, api_key="k", model="chat", timeout_s=5)
    yield ReportTools(config, llm=llm)
    llm.close()


def test_search_graph_lists_facts_entities_and_relations(tools, report_graph, scripted_llm):
    result = tools.search_graph(report_graph, "who directs the water utility", limit=5)
    facts = result.to_dict()["facts"]
    assert DIRECTS in [fact["fact"] for fact in facts]
    assert [fact["rank"] for fact in facts] == list(range(1, len(facts) + 1))
    for fact in facts:
        assert fact["uuid"] and fact["score"] is not None and fact["first_stage_rank"] >= 1
        assert {"valid_at", "invalid_at", "expired_at", "time_label"} <= set(fact)
    directs = next(fact for fact in facts if fact["fact"] == DIRECTS)
    assert directs["source"] == "Mara Lindqvist" and directs["target"] == "Harbor Water Utility"
    assert "Mara Lindqvist -[DIRECTS]-> Harbor Water Utility" in result.to_dict()["relations"]
    assert result.entities and all(entity.score is not None for entity in result.entities)
    text = result.to_text()
    assert f"- [{directs['uuid']}] {DIRECTS} ({directs['time_label']})" in text.split("\n")
    assert "first-stage #" not in text  # ranks are for the API (to_dict), not the model's budget
    assert result.to_dict()["text_truncated"] is False
    assert scripted_llm.count == 0  # no reranking, no LLM: a search is only a search


def test_search_text_budget_says_what_it_left_out(tools, report_graph):
    result = tools.search_graph(report_graph, "Harbor water utility town reservoir", limit=10, max_chars=600)
    text = result.to_text()
    assert len(text) <= 600
    shown = sum(1 for fact in result.facts if fact.uuid in text)
    assert shown < len(result.facts)
    assert f"left out: {len(result.facts) - shown} facts" in text
    assert result.to_dict()["text_left_out"]["facts"] == len(result.facts) - shown


def test_insight_forge_merges_sub_queries_and_adds_summaries_and_chains(tools, report_graph, scripted_llm):
    question = "How safe is the town's drinking water?"
    sub_queries = ["algae bloom at the North Reservoir", "who directs the Harbor Water Utility",
                   "How safe is the town's drinking water?", "lead pipes renewal", "one too many"]
    scripted_llm.responder = judge_or_chat(chat_fn=lambda messages, body: (
        as_json({"sub_queries": sub_queries}) if purpose(messages) == "sub_queries" else "unexpected"))
    result = tools.insight_forge(report_graph, question, max_sub_queries=4, limit=5)

    # The question first, the duplicate dropped, bounded at four.
    assert result.sub_queries == [question, sub_queries[0], sub_queries[1], sub_queries[3]]
    uuids = [fact.uuid for fact in result.facts]
    assert len(uuids) == len(set(uuids))
    for sub_query in result.sub_queries:  # every fact a sub-query found is in, with its best score
        for hit in GraphitiAdapter().graph.search(report_graph, sub_query, limit=5).edges:
            merged = next(fact for fact in result.facts if fact.uuid == hit.uuid)
            assert sub_query in merged.found_by and merged.score >= hit.score
    scores = [fact.score for fact in result.facts]
    assert scores == sorted(scores, reverse=True)
    assert {ALGAE, DIRECTS} <= {fact.fact for fact in result.facts}
    mara = next(entity for entity in result.entities if entity.name == "Mara Lindqvist")
    assert mara.summary == "Engineer, director of the town's water utility"
    assert "Mara Lindqvist -[DIRECTS]-> Harbor Water Utility" in result.chains
    assert "Mara Lindqvist -[DIRECTS]-> Harbor Water Utility -[OPERATES]-> North Reservoir" in result.chains
    assert result.errors == []
    prompt = chat_requests(scripted_llm)[0].messages
    assert question in prompt[-1]["content"] and "at most 3 queries" in prompt[0]["content"]


def test_insight_forge_drops_rewordings_and_follows_names_from_the_results(tools, report_graph, scripted_llm):
    question = "Who directs the Harbor Water Utility?"
    rewordings = ["the Harbor Water Utility", "who directs Harbor Water Utility"]  # nothing of their own
    scripted_llm.responder = judge_or_chat(chat_fn=lambda messages, body: (
        as_json({"sub_queries": rewordings}) if purpose(messages) == "sub_queries" else "unexpected"))
    result = tools.insight_forge(report_graph, question, max_sub_queries=3, limit=4)
    hits = GraphitiAdapter().graph.search(report_graph, question, limit=4).edges
    named = [name for hit in hits for name in (hit.source, hit.target)]
    assert result.sub_queries[0] == question and len(result.sub_queries) == 3
    added = result.sub_queries[1:]
    assert not set(added) & set(rewordings) and "Harbor Water Utility" not in added
    # Each name is searched with the question's subject, so its search stays on the question.
    followed = [name for name in dict.fromkeys(named) if name != "Harbor Water Utility"][:2]
    assert added == [f"{name} Harbor Water Utility" for name in followed]
    for query in added:  # each name was searched and its facts merged
        assert any(query in fact.found_by for fact in result.facts)
    assert result.errors == []


@pytest.mark.parametrize("failure", [server_error(), "Sure! Here are some queries: water, algae"])
def test_insight_forge_goes_on_with_the_question_alone(tools, report_graph, scripted_llm, failure):
    scripted_llm.responder = judge_or_chat(chat_fn=lambda messages, body: failure)
    result = tools.insight_forge(report_graph, "what closed the North Reservoir?")
    assert result.sub_queries == ["what closed the North Reservoir?"]
    assert "searched the question alone" in result.errors[0]
    assert ALGAE in [fact.fact for fact in result.facts]
    assert "searched the question alone" in result.to_text()


def test_panorama_reads_everything_and_keeps_history_apart(tools, report_graph, monkeypatch):
    monkeypatch.setattr(report_tools, "PAGE_SIZE", 4)  # several pages for 11 facts and 13 entities
    result = tools.panorama_search(report_graph, "drinking water supply")
    stats = GraphitiAdapter().graph.stats(report_graph)
    assert (result.total_nodes, result.total_edges) == (stats["nodes"], stats["edges"])
    assert len(result.entities) == stats["nodes"]
    assert len(result.current) + len(result.historical) == stats["edges"]
    assert len(result.historical) == stats["historical_edges"] == 3
    assert all(fact.invalid_at or fact.expired_at for fact in result.historical)
    assert not any(fact.invalid_at or fact.expired_at for fact in result.current)
    assert result.not_read == {"entities": 0, "facts": 0}

    hits = GraphitiAdapter().graph.search(report_graph, "drinking water supply", limit=30, scope="both")
    hit_uuids = [hit.uuid for hit in hits.edges]
    current_hits = [uuid for uuid in hit_uuids if uuid in {fact.uuid for fact in result.current}]
    assert [fact.uuid for fact in result.current[: len(current_hits)]] == current_hits  # relevant first
    text = result.to_text()
    assert text.index("Current facts") < text.index("Historical facts") < text.index(ALGAE)
    assert f"{ALGAE} (valid 1 to 22 August 2024; no longer true)" in text
    assert "valid 1 March 2015 to 1 January 2019; no longer true" in text and "[truncated" not in text
    # The import stamped created_at (and expired_at) today: that date is bookkeeping, never shown as an event.
    imported = {fact.created_at[:10] for fact in result.all_facts()} | {
        fact.expired_at[:10] for fact in result.historical if fact.expired_at}
    assert imported and not any(day in text for day in imported) and "expired" not in text


def test_panorama_says_what_it_did_not_read_or_show(tools, report_graph, monkeypatch):
    monkeypatch.setattr(report_tools, "PAGE_SIZE", 3)
    monkeypatch.setattr(report_tools, "MAX_READ_EDGES", 5)
    result = tools.panorama_search(report_graph, "ferry to the island", limit=2, max_chars=900)
    assert result.total_edges == len(REPORT_FACTS)
    read = len(result.current) + len(result.historical)  # 5 read, plus search hits beyond them
    assert 5 <= read < len(REPORT_FACTS) and result.not_read["facts"] == len(REPORT_FACTS) - read
    text = result.to_text()
    assert len(text) <= 900
    assert f"Not read (over the read limit): 0 entities, {len(REPORT_FACTS) - read} facts." in text
    left_out = result.render().left_out
    shown = sum(1 for fact in result.all_facts() if fact.uuid in text)
    assert sum(count for kind, count in left_out.items() if kind.endswith("facts")) == read - shown > 0


def scripted_interviews(messages, body):
    """Answers Q1 from the first fact, Q2 with an invented fact id, Q3 'I don't know'."""
    if purpose(messages) != "interview":
        return "unexpected"
    first_uuid, _ = interview_facts(messages)[0]
    return as_json({"answers": [
        {"question_index": 1, "answer": "That is what my first fact says.", "fact_uuids": [first_uuid]},
        {"question_index": 2, "answer": "Our budget is 12 million.",
         "fact_uuids": ["00000000-1111-4222-8333-444444444444"]},
        {"question_index": 3, "answer": "I don't know.", "fact_uuids": []},
    ]})


def test_interview_answers_only_from_cited_facts(tools, report_graph, scripted_llm):
    scripted_llm.responder = judge_or_chat(chat_fn=scripted_interviews)
    questions = ["What do you do?", "What is your budget?", "What is your favourite colour?"]
    result = tools.interview_entities(report_graph, "who runs the drinking water supply", questions,
                                      max_entities=2)
    assert len(result.interviews) == 2
    names = [interview.entity.name for interview in result.interviews]
    assert "Harbor Water Utility" in names or "Mara Lindqvist" in names
    for interview in result.interviews:
        own = {fact.uuid for fact in interview.facts}
        node = GraphitiAdapter().graph.node(report_graph, interview.entity.uuid)
        assert own <= {edge["uuid"] for edge in node["edges"]}  # only the entity's own facts
        first, invented, unknown = interview.answers
        assert first.knows and first.cited_fact_uuids == [interview.facts[0].uuid]
        assert not invented.knows and invented.answer == DONT_KNOW
        assert invented.invalid_citations == ["00000000-1111-4222-8333-444444444444"]
        assert invented.withheld_answer == "Our budget is 12 million."
        assert unknown.answer == DONT_KNOW and not unknown.knows
        prompt = next(r for r in chat_requests(scripted_llm) if interviewee(r.messages) == interview.entity.name)
        assert [uuid for uuid, _ in interview_facts(prompt.messages)] == [fact.uuid for fact in interview.facts]
    assert "Q1: answered from facts by" in result.summary and "Q3: answered from facts by no one" in result.summary
    assert "2 uncited answer(s) withheld, 2 invented citation(s) dropped" in result.summary
    assert "00000000-1111-4222-8333-444444444444" not in result.to_text()


def test_interview_named_entities_and_unknown_names(tools, report_graph, scripted_llm):
    scripted_llm.responder = judge_or_chat(chat_fn=scripted_interviews)
    result = tools.interview_entities(report_graph, "bread", ["What do you sell?", "b?", "c?"],
                                      entities=["harbor bakery", "Nobody Atall"])
    assert [i.entity.name for i in result.interviews] == ["Harbor Bakery"]
    assert result.not_found == ["Nobody Atall"]
    assert "Harbor Bakery sells sourdough bread baked every morning" in [f.fact for f in result.interviews[0].facts]


def test_interview_without_a_model_says_it_does_not_know(tools, report_graph, scripted_llm):
    scripted_llm.responder = judge_or_chat(chat_fn=lambda messages, body: server_error())
    result = tools.interview_entities(report_graph, "ferry", ["When does it run?"], max_entities=1)
    interview = result.interviews[0]
    assert interview.error.startswith("the model could not answer")
    assert [answer.answer for answer in interview.answers] == [DONT_KNOW]


def test_arguments_are_checked_before_anything_runs(tools, report_graph, scripted_llm):
    with pytest.raises(UnknownToolError, match="unknown tool 'oracle'"):
        tools.run(report_graph, "oracle", {})
    with pytest.raises(ToolArgumentError, match="'query' is required"):
        tools.run(report_graph, "search_graph", {"limit": 3})
    with pytest.raises(ToolArgumentError, match="'questions' must be a list of 1 to 5 strings"):
        tools.run(report_graph, "interview_entities", {"topic": "x", "questions": ["q"] * 6})
    with pytest.raises(ToolArgumentError, match=r"unknown argument\(s\) \['graph'\]"):
        tools.run(report_graph, "panorama_search", {"query": "x", "graph": "other"})
    with pytest.raises(UnknownGraphError):
        tools.run(unique_graph_id(), "insight_forge", {"question": "anything"})
    assert scripted_llm.count == 0  # the unknown graph was caught before the sub-query split
    result = tools.run(report_graph, "search_graph", {"query": "ferry", "limit": 2})
    assert len(result.facts) <= 2 and "Harbor Ferry" in result.to_text()


# -- RERANKER_PROVIDER decides the order; the tools' code is the same ----------------------------

SWITCH_QUERY = "harbor water utility reservoir town"
SUB_QUERIES = ["algae bloom at the North Reservoir", "who directs the Harbor Water Utility"]
LIMIT = 5


def switch_chat(messages, body):
    if purpose(messages) == "sub_queries":
        return as_json({"sub_queries": SUB_QUERIES})
    return scripted_interviews(messages, body)


def run_every_ordered_tool(config, graph_id, judge_server):
    """The three tools' answers, and the passages the judge was asked about during the search tool's own
    search: its candidates (the interview's search of the same query judges more of them)."""
    tools = ReportTools(config)  # the chat LLM comes from the same configuration
    try:
        asked_before = len(judge_requests(judge_server))
        search = tools.search_graph(graph_id, SWITCH_QUERY, limit=LIMIT, scope="edges")
        judged = {request.passage for request in judge_requests(judge_server)[asked_before:]}
        insight = tools.insight_forge(graph_id, SWITCH_QUERY, max_sub_queries=3, limit=LIMIT)
        interview = tools.interview_entities(graph_id, SWITCH_QUERY, ["What do you do?"],
                                             entities=["Harbor Water Utility"])
    finally:
        tools.close()
    return search, insight, interview.interviews[0], judged


def ranked_part(interview):
    """The interviewee's facts that the topic search ranked (they come first, in search order)."""
    return [fact.fact for fact in interview.facts if fact.score is not None]


def test_reranker_switch_changes_the_tools_order_and_nothing_else(backend, scripted_llm):
    scripted_llm.responder = judge_or_chat(chat_fn=switch_chat)
    llm_settings = {"LLM_BASE_URL": scripted_llm.base_url, "LLM_MODEL_NAME": "chat", "LLM_TIMEOUT_S": 10}
    app, _ = backend(RERANKER_PROVIDER="none", **llm_settings)
    config = app.config["APP_CONFIG"]
    gid = unique_graph_id("switch")
    graph = GraphitiAdapter(config).graph
    graph.create(gid)
    graph.import_facts(gid, REPORT_FACTS)

    # With none the tools keep exactly what graph search gives: the RRF order.
    search, insight, interview, _ = run_every_ordered_tool(config, gid, scripted_llm)
    assert [f.fact for f in search.facts] == [h.fact for h in graph.search(gid, SWITCH_QUERY, LIMIT).edges]
    assert [f.first_stage_rank for f in search.facts] == list(range(1, LIMIT + 1))
    topic_hits = graph.search(gid, SWITCH_QUERY, limit=report_tools.INTERVIEW_SEARCH_LIMIT, scope="both").edges
    utility = interview.entity.uuid
    assert ranked_part(interview) == [h.fact for h in topic_hits if utility in (h.source_uuid, h.target_uuid)]
    best_rrf = {}
    for query in insight.sub_queries:
        for hit in graph.search(gid, query, limit=LIMIT).edges:
            best_rrf[hit.fact] = max(best_rrf.get(hit.fact, 0.0), hit.score)
    assert {f.fact: f.score for f in insight.facts} == best_rrf
    assert not (search.reranked or insight.reranked) and not judge_requests(scripted_llm)

    plain_insight, plain_interview = [f.fact for f in insight.facts], ranked_part(interview)
    plain_search = [f.fact for f in search.facts]

    # The judge reverses the first stage: it scores each of search_graph's RERANKER_CANDIDATES x LIMIT
    # candidates by its RRF position (last = best); facts only the sub-queries find score low.
    rrf = [h.fact for h in graph.search(gid, SWITCH_QUERY, limit=2 * LIMIT).edges]
    assert len(rrf) == 2 * LIMIT
    judge_score = {fact: (position + 1) / (len(rrf) + 1) for position, fact in enumerate(rrf)}
    judge_score.update({f["fact"]: 0.02 for f in REPORT_FACTS if f["fact"] not in judge_score})
    scripted_llm.responder = judge_or_chat(lambda query, passage: judge_score.get(passage, 0.5), switch_chat)
    app, _ = backend(RERANKER_PROVIDER="ollama", RERANKER_BASE_URL=scripted_llm.base_url,
                     RERANKER_MODEL="judge", RERANKER_SCORE_MODE="logprobs", RERANKER_FUSION="none",
                     RERANKER_PASSAGE_TIME="off",  # the scripted judge knows the facts by their text
                     **llm_settings)
    search, insight, interview, candidates = run_every_ordered_tool(app.config["APP_CONFIG"], gid, scripted_llm)

    def by_judge(facts):
        return sorted(facts, key=lambda fact: -judge_score[fact])

    assert search.reranked and insight.reranked and judge_requests(scripted_llm)
    searched = [f.fact for f in search.facts]
    # What the judge saw in this search (RRF ties may let the candidate lists of two searches differ
    # at their edge, so the expectation is built from this search's own candidates).
    assert candidates and candidates <= set(judge_score)
    assert searched == by_judge(sorted(candidates))[:LIMIT]
    assert [f.score for f in search.facts] == [pytest.approx(judge_score[f]) for f in searched]
    assert searched != plain_search[:LIMIT] and max(f.first_stage_rank for f in search.facts) > LIMIT
    merged = [f.fact for f in insight.facts]
    assert merged == by_judge(merged) and merged != plain_insight and len(merged) > LIMIT
    ranked = ranked_part(interview)
    assert ranked == by_judge(ranked) and ranked != plain_interview and len(ranked) >= 4


def test_the_tools_never_touch_the_reranker():
    """Reranking reaches the tools only through graph search: no reranker import anywhere in them."""
    import ast
    import inspect

    from app.report import interview as report_interview

    from app.report import results as report_results

    from app.report import views as report_views
    for module in (report_tools, report_results, report_views, report_interview):
        tree = ast.parse(inspect.getsource(module))
        imported = [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
        imported += [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
        assert not [name for name in imported if "rerank" in (name or "")], module.__name__
    assert "GraphitiAdapter(self.config).graph" in inspect.getsource(ReportTools)


# -- the chat client the tools share ------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ('{"sub_queries": ["a"]}', {"sub_queries": ["a"]}),
    ('```json\n{"sub_queries": ["a"]}\n```', {"sub_queries": ["a"]}),
    ('<think>maybe {"x": 1}?</think>Here: {"sub_queries": ["b"]} done', {"sub_queries": ["b"]}),
    ('Sure! {"broken": } then {"ok": true}', {"ok": True}),
    ("[1, 2]", None),
    ("no json at all", None),
    ("[" * 40 + "]" * 40, None),
])
def test_json_answers_are_read_defensively(text, expected):
    from app.report.llm import parse_json_object

    assert parse_json_object(text) == expected


def test_llm_errors_never_show_the_key(scripted_llm, caplog):
    from app.report.llm import ReportLLMError
    from tests.support.scripted_llm import error

    secret = "sk-report-SECRET-77"
    scripted_llm.responder = judge_or_chat(chat_fn=lambda messages, body: error(401, f"bad key {secret}"))
    llm = ReportLLM(base_url=scripted_llm.base_url, api_key=secret, model="chat", timeout_s=5)
    with pytest.raises(ReportLLMError) as raised:
        llm.chat([{"role": "user", "content": "hi"}])
    llm.close()
    assert raised.value.error_class == "AuthenticationError" and "HTTP 401" in str(raised.value)
    assert secret not in str(raised.value) and secret not in caplog.text
    assert {k.lower(): v for k, v in scripted_llm.request_headers[0].items()}["authorization"] == f"Bearer {secret}"
    assert llm.stats()["errors"] == 1 and scripted_llm.requests[0]["temperature"] == 0
