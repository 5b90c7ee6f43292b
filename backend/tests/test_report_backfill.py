"""A search page that filled up from beyond its first page (the section had its best facts) loses the
backfill its section's question judges worst (app/report/backfill.py): unit rules, and agent runs over
a real FalkorDB with the scripted server as writer and judge, reranker on and off."""

from __future__ import annotations

import math

from app.graph.runtime import GraphitiAdapter
from app.report.agent import ReportAgent, SectionDraft
from app.report.backfill import OFF_QUESTION_SHARE, backfilled, off_question
from app.report.store import ReportStore, new_report_id, now_iso
from app.report.results import SearchResult
from app.report.views import FactView
from app.tasks import PROCESS_OWNER
from tests.conftest import unique_graph_id
from tests.support.report_scripts import REPORT_FACTS, chat_requests, judge_or_chat, purpose
from tests.test_report_agent import writes_at_once

PAGE = 4  # a small page, so the 11 facts of the test graph fill follow-up pages from beyond it


def fact(number: int, rank: int | None = None) -> FactView:
    return FactView(uuid=f"u{number}", fact=f"fact {number}", relation="r", source="a", target="b",
                    source_uuid="a", target_uuid="b", rank=rank)


def test_backfill_is_what_the_search_ranked_beyond_its_first_page():
    page = [fact(1, rank=2), fact(2, rank=4), fact(3, rank=11), fact(4)]
    assert [f.uuid for f in backfilled(page, 3)] == ["u2", "u3"]
    assert backfilled(page, 11) == []


def test_only_backfill_in_the_last_tenth_of_the_sections_judged_facts_is_off_question():
    judged = [fact(number) for number in range(1, 21)]  # best first; the last tenth is u19, u20
    assert off_question([fact(20), fact(18), fact(3)], judged) == ["u20"]
    assert off_question([fact(19), fact(20)], judged) == ["u19", "u20"]
    assert off_question([fact(1)], judged[:1]) == []  # a section of one fact keeps it
    assert off_question([fact(5)], judged[:5], share=0.2) == ["u5"]


QUESTION = "How does the town keep its drinking water safe?"
# Planted off-question facts around the water story's own entities, as the sample graph has them.
HOBBY_FACTS = [
    {"source": "Mara Lindqvist", "target": "Harbor Choir", "relation": "sings in",
     "fact": "Mara Lindqvist sings alto in the Harbor Choir every Thursday evening"},
    {"source": "Mara Lindqvist", "target": "Autumn Regatta", "relation": "won",
     "fact": "Mara Lindqvist won the Autumn Regatta's dinghy race in 2018"},
    {"source": "Harbor Water Utility", "target": "Harbor Rowing Club", "relation": "sponsors",
     "fact": "Harbor Water Utility sponsors the jerseys of the Harbor Rowing Club"},
    {"source": "Ines Okafor", "target": "Harbor Choir", "relation": "founded",
     "fact": "Ines Okafor founded the Harbor Choir in 2009"},
    {"source": "North Reservoir", "target": "Harbor Rowing Club", "relation": "hosts",
     "fact": "The North Reservoir hosts the Harbor Rowing Club's summer training camp"},
]


def judge_for_the_part(query: str, passage: str) -> float:
    """The planted facts are the worst for the section's question; every other query finds all facts alike."""
    if not query.startswith("How does the town keep its drinking water safe"):
        return 0.5
    return 0.01 if any(passage == planted["fact"] for planted in HOBBY_FACTS) else 1.0 / len(passage)


def run_report(backend, scripted_llm, **env) -> list[dict]:
    scripted_llm.responder = judge_or_chat(judge_for_the_part, writes_at_once)
    app, _ = backend(LLM_BASE_URL=scripted_llm.base_url, LLM_MODEL_NAME="writer", LLM_TIMEOUT_S=10,
                     REPORT_AGENT_MAX_TOOL_CALLS=4, **env)
    config = app.config["APP_CONFIG"]
    gid = unique_graph_id("backfill")
    graph = GraphitiAdapter(config).graph
    graph.create(gid)
    graph.import_facts(gid, REPORT_FACTS + HOBBY_FACTS)
    store = ReportStore(config.data_dir)
    report_id = new_report_id()
    store.create(report_id, {"graph_id": gid, "requirement": QUESTION, "status": "queued",
                             "created_at": now_iso(), "owner": PROCESS_OWNER})
    agent = ReportAgent(config, store=store, max_sections=1, max_search_limit=PAGE)
    try:
        agent.run(report_id, gid, QUESTION)
    finally:
        agent.close()
    return store.read(report_id)["log"]


def test_backfill_the_sections_question_judges_worst_never_reaches_the_writer(backend, scripted_llm):
    steps = run_report(backend, scripted_llm, RERANKER_PROVIDER="ollama", RERANKER_BASE_URL=scripted_llm.base_url,
                       RERANKER_MODEL="judge", RERANKER_SCORE_MODE="logprobs")
    tools = [step for step in steps if step["kind"] == "tool"]
    set_aside = [entry for step in tools for entry in step.get("set_aside", [])]
    assert set_aside, "the third page fills from beyond the first page and holds a planted fact"
    shown_text = {fact["fact"] for step in tools for fact in step["search"]["facts"] if fact.get("shown")}
    for index, step in enumerate(tools):
        for entry in step.get("set_aside", []):
            assert entry["rank"] > PAGE
            assert entry["fact"] in {planted["fact"] for planted in HOBBY_FACTS} and entry["fact"] not in shown_text
            section = {fact["fact"] for earlier in tools[:index + 1] for fact in earlier["search"]["facts"]
                       if fact.get("shown")} | {aside["fact"] for aside in step["set_aside"]}
            part_score = [judge_for_the_part(QUESTION, text) for text in section]
            assert len(section) >= 10 and judge_for_the_part(QUESTION, entry["fact"]) == min(part_score)
            assert len(step["set_aside"]) <= len(section) - math.ceil(len(section) * (1 - OFF_QUESTION_SHARE))
    writer_saw = " ".join(str(message.get("content")) for request in chat_requests(scripted_llm)
                          if purpose(request.messages) == "section" for message in request.messages)
    assert all(entry["fact"] not in writer_saw for entry in set_aside)
    assert "Harbor Water Utility operates the North" in writer_saw  # the writer did read the pages


def test_with_reranking_off_a_backfilled_page_comes_back_whole(backend):
    app, _ = backend(RERANKER_PROVIDER="none")
    agent = ReportAgent(app.config["APP_CONFIG"], max_search_limit=PAGE)
    try:
        page = [fact(1, rank=5), fact(2, rank=6)]
        result = SearchResult(graph_id="g", query="q", scope="both", facts=page, entities=[], reranked=False,
                              already_shown=["u9"])
        draft = SectionDraft(index=1, title="t", goal="g", part="How does the town keep its water safe?")
        assert agent._without_off_question_backfill(draft, result, PAGE) == (result, [])
    finally:
        agent.close()
