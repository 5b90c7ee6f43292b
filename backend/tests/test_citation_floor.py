"""A written section's citations held to its own question: what the judge scores under the floor goes."""

from __future__ import annotations

import pytest

from app.report.agent import start_report
from app.report.citation_floor import lower_of, without_citations, without_names
from app.report.store import report_store
from app.report.tools import FactJudgement
from app.report.views import FactView
from tests.support.report_scripts import as_json, chat_requests, judge_or_chat, judge_requests, purpose
from tests.test_report_agent import (  # noqa: F401 (fixtures)
    agent_backend, fact_shown, report_graph, seen_fact_ids, wait_for, writes_at_once,
)

A, B, C = (f"{n}{n}{n}{n}{n}{n}{n}{n}-0000-4000-8000-000000000000" for n in range(1, 4))
OFF_TOPIC = "Bakery"  # the judge's floor case: any fact about the bakery, for any question
QUESTION = "How often does the ferry sail?"


def test_a_sentence_citing_only_dropped_facts_goes_and_other_citations_stay():
    text = (f"The flood hit Well 4 [{A}] [{B}]. Feld won a prize [{B}]. Both [{A}, {B}] and [{B}, {C}] hold.\n\n"
            f"Nothing cited here. Last one [{C.upper()}].")
    content, removed = without_citations(text, {B})
    assert removed == [f"Feld won a prize [{B}]."]
    assert content == (f"The flood hit Well 4 [{A}]. Both [{A}] and [{C}] hold.\n\n"
                       f"Nothing cited here. Last one [{C.upper()}].")
    assert without_citations(text, set()) == (text, [])


def cites_the_bakery(messages, body):
    """Writes one sentence per fact for the first three facts it was shown and every bakery fact."""
    if purpose(messages) == "section":
        seen = seen_fact_ids(messages)
        labels = dict.fromkeys(seen[:3] + [label for label in seen if OFF_TOPIC in fact_shown(messages, label)])
        return as_json({"action": "write", "content": " ".join(
            f"{fact_shown(messages, label)} [{label}]." for label in labels)})
    return writes_at_once(messages, body)


def judge_score(query: str, passage: str) -> float:
    return 0.005 if OFF_TOPIC in passage else 0.5


def judged_report(agent_backend, scripted_llm, score_fn, writer, question: str, **env) -> tuple[dict, dict]:
    """A one-section report on `question` with `score_fn` as the judge; (the stored report, fact texts by uuid)."""
    config, gid = agent_backend(judge_or_chat(score_fn, writer), REPORT_AGENT_MAX_TOOL_CALLS=4,
                                RERANKER_PROVIDER="ollama", RERANKER_BASE_URL=scripted_llm.base_url,
                                RERANKER_MODEL="judge", RERANKER_SCORE_MODE="logprobs", **env)
    report_id, task = start_report(config, gid, question, max_sections=1)
    assert wait_for(task.task_id)["state"] == "done"
    report = report_store(config).read(report_id)
    return report, {fact["uuid"]: fact["fact"] for step in report["log"] if step["kind"] == "tool"
                    for fact in step["search"]["facts"]}


def report_with_floor(agent_backend, scripted_llm, **env):
    report, text = judged_report(agent_backend, scripted_llm, judge_score, cites_the_bakery, QUESTION, **env)
    (write,) = [step for step in report["log"] if step["kind"] == "write"]
    off_topic = [uuid for uuid in write["cited"] if OFF_TOPIC in text[uuid]]
    assert off_topic and len(write["cited"]) > len(off_topic)  # the writer did cite both kinds
    return report, off_topic, text


def test_citations_the_sections_question_scores_under_the_floor_are_taken_out(agent_backend, scripted_llm):
    report, off_topic, text = report_with_floor(agent_backend, scripted_llm)
    (section,) = report["sections"]
    assert section["off_question"] == off_topic
    assert not set(off_topic) & set(section["cited"]) and section["cited"]
    assert OFF_TOPIC not in report["markdown"]  # neither the sentences nor the sources list
    assert [text[uuid] for uuid in off_topic] == [claim.rsplit(" [", 1)[0] for claim in section["removed_claims"]]
    labels = {label: uuid for step in report["log"] for label, uuid in (step.get("new_labels") or {}).items()}
    (held,) = [step for step in report["log"] if step["kind"] == "off_question"]
    assert [labels[label] for label in held["dropped"]] == off_topic and set(held["scores"]) == {0.005}
    (complete,) = [step for step in report["log"] if step["kind"] == "complete"]
    assert complete["judged"] is True and complete["offered"]
    assert not any(OFF_TOPIC in text[labels[label]] for label in complete["offered"])  # never offered either
    (asked,) = [r for r in chat_requests(scripted_llm) if purpose(r.messages) == "completion"]
    assert OFF_TOPIC not in asked.messages[-1]["content"]


def test_a_floor_of_zero_keeps_every_citation(agent_backend, scripted_llm):
    report, off_topic, _ = report_with_floor(agent_backend, scripted_llm, REPORT_CITATION_FLOOR=0)
    (section,) = report["sections"]
    assert set(off_topic) <= set(section["cited"]) and section["off_question"] == []
    assert OFF_TOPIC in report["markdown"]
    assert not [step for step in report["log"] if step["kind"] == "off_question"]


@pytest.mark.parametrize("question, plain", [
    ("What part did the Lindgren Dairy Farm play in the outbreak", "What part did it play in the outbreak"),
    ("How did St. Brigid's Hospital respond to the outbreak of illness",
     "How did it respond to the outbreak of illness"),
    ("Where does the PFAS in Port Alder's drinking water come from",
     "Where does the PFAS in its drinking water come from"),
    ("What happened in March 2025 at Well 4", "What happened in March 2025 at it"),
    ("How often does the Harbor Ferry sail?", "How often does it sail?"),
    ("how did those businesses respond", None),  # no name: the question as asked is all there is
    ("Who is Sofia Marques", None),  # "Who is it" leaves nothing to judge on
])
def test_without_names_replaces_each_name_by_a_pronoun(question, plain):
    assert without_names(question) == plain


def test_lower_of_keeps_the_order_as_asked_and_the_lower_score():
    facts = [FactView(uuid=uuid, fact=uuid, relation="", source="", target="", source_uuid="", target_uuid="")
             for uuid in (A, B, C)]
    as_asked = FactJudgement(facts, {A: 0.6, B: 0.059, C: 0.3})
    without = FactJudgement(list(reversed(facts)), {A: 0.7, B: 0.013})  # C: not judged without names
    lower = lower_of(as_asked, without)
    assert [fact.uuid for fact in lower.best_first] == [A, B, C]
    assert lower.scores == {A: 0.6, B: 0.013, C: 0.3}
    assert lower.below(B, 0.02) and not lower.below(C, 0.02)
    assert lower_of(as_asked, None) is as_asked


FERRY = "How often does the Harbor Ferry sail?"
PLAIN = "How often does it sail"  # the section's question (the requirement's part) without its name


def judge_names(query: str, passage: str) -> float:
    """A judge fooled by names: any Harbor fact is related to a Harbor question; without the name only
    the ferry's timetable answers it."""
    if "Harbor" in query:
        return 0.5 if "Harbor" in passage else 0.3
    return 0.5 if "every hour" in passage else 0.005


def cites_everything(messages, body):
    if purpose(messages) == "section":
        return as_json({"action": "write", "content": " ".join(
            f"{fact_shown(messages, label)} [{label}]." for label in dict.fromkeys(seen_fact_ids(messages)))})
    return writes_at_once(messages, body)


def report_on_the_ferry(agent_backend, scripted_llm, **env):
    report, text = judged_report(agent_backend, scripted_llm, judge_names, cites_everything, FERRY, **env)
    (section,) = report["sections"]
    (write,) = [step for step in report["log"] if step["kind"] == "write"]
    named = [uuid for uuid in write["cited"] if "Harbor" in text[uuid] and "every hour" not in text[uuid]]
    assert named and any("every hour" in text[uuid] for uuid in write["cited"])  # the writer cited both
    return report, section, named, text


def test_facts_that_share_only_a_name_with_the_question_are_not_cited_or_listed(agent_backend, scripted_llm):
    report, section, named, text = report_on_the_ferry(agent_backend, scripted_llm)
    assert section["judged_without_names"] == PLAIN
    assert set(named) <= set(section["off_question"])
    assert [text[uuid] for uuid in section["cited"]] == [
        "The Harbor Ferry connects the town to Harbor Island every hour"]
    assert not set(named) & set(section["listed"])
    asked = {request.judge_fields[0] for request in judge_requests(scripted_llm)}
    assert {FERRY.rstrip("?"), PLAIN} <= asked
    assert "Bakery" not in report["markdown"]


def test_the_floor_without_names_can_be_turned_off(agent_backend, scripted_llm):
    report, section, named, text = report_on_the_ferry(agent_backend, scripted_llm, REPORT_FLOOR_WITHOUT_NAMES="off")
    assert section["judged_without_names"] is None and section["off_question"] == []
    assert set(named) <= set(section["cited"])
    assert PLAIN not in {request.judge_fields[0] for request in judge_requests(scripted_llm)}


def cites_two(messages, body):
    """Cites the first two facts it was shown and nothing else."""
    if purpose(messages) == "section":
        return as_json({"action": "write", "content": " ".join(
            f"{fact_shown(messages, label)} [{label}]." for label in seen_fact_ids(messages)[:2])})
    return writes_at_once(messages, body)


def judge_leaning_off(query: str, passage: str) -> float:
    """Above the citation floor for bakery facts, but under the floor for facts the agent adds."""
    return 0.03 if OFF_TOPIC in passage else 0.5


@pytest.mark.parametrize("added_floor, bakery_added", [("0.05", False), ("0.02", True)])
def test_the_agent_adds_only_facts_the_judge_leans_towards(agent_backend, scripted_llm, added_floor, bakery_added):
    report, text = judged_report(agent_backend, scripted_llm, judge_leaning_off, cites_two, QUESTION,
                                 REPORT_ADDED_FACTS_FLOOR=added_floor, REPORT_LISTED_FACTS=20)
    assert any(OFF_TOPIC in fact for fact in text.values())  # the searches did show bakery facts
    (section,) = report["sections"]
    added = section["completed"] + section["listed"]
    assert added  # facts at 0.5 are added either way
    assert any(OFF_TOPIC in text[uuid] for uuid in added) is bakery_added
    assert section["off_question"] == []  # nothing the writer cited was under REPORT_CITATION_FLOOR
