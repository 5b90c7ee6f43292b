"""Completing a written section: which facts are offered, and which offered sentences are kept."""

from __future__ import annotations

import re
from collections import defaultdict

import pytest

from app.report.completion import (
    COMPLETION_FACTS, JUDGED_COMPLETION_FACTS, facts_to_list, facts_to_offer, new_sentences, ranked_evidence,
    within_a_page,
)
from app.report.agent import start_report
from app.report.store import report_store
from app.report.views import FactView
from tests.support.report_scripts import as_json, chat_requests, judge_or_chat, purpose
from tests.support.scripted_llm import server_error
from tests.test_report_agent import agent_backend, report_graph, wait_for, writes_at_once  # noqa: F401 (fixtures)

A, B, C, D, E = (f"{n}{n}{n}{n}{n}{n}{n}{n}-0000-4000-8000-000000000000" for n in range(1, 6))
MANY = [[f"{n:08d}-0000-4000-8000-000000000000" for n in range(20)]]  # one result, more than an offer holds


def test_evidence_takes_each_results_first_fact_before_any_second():
    # a search ranked A over B, an InsightForge C over A over D, an interview showed E
    assert ranked_evidence([[A, B], [C, A, D], [E]]) == [A, C, E, B, D]
    assert ranked_evidence([]) == []


def test_facts_a_search_ranked_beyond_its_first_page_are_not_offered():
    def fact(uuid, rank):
        return FactView(uuid=uuid, fact="f", relation="r", source="s", target="t", source_uuid="1", target_uuid="2",
                        rank=rank)

    # shown best first after the section's earlier facts were left out: ranks 7, 10, 11, 24; an interview's: none
    assert within_a_page([fact(A, 7), fact(B, 10), fact(C, 11), fact(D, 24), fact(E, None)], page=10) == [A, B, E]


def test_only_facts_the_report_does_not_cite_yet_are_offered_best_first():
    results = [[A, B, C], [D, E]]
    assert facts_to_offer(results, cited={A, E}) == [D, B, C]
    assert facts_to_offer(results, cited={A, E}, best_first=lambda uuids: None) == [D, B, C]  # could not judge
    assert facts_to_offer(MANY, cited=set()) == MANY[0][:COMPLETION_FACTS]
    assert facts_to_offer(results, cited={A, B, C, D, E}) == []


def test_a_judge_of_the_sections_question_orders_the_offer():
    judged = []

    def reversed_by_the_judge(uuids):
        judged.append(uuids)
        return uuids[::-1]

    results = [[A, B, C], [D, E]]
    assert facts_to_offer(results, cited={A}, best_first=reversed_by_the_judge) == [C, E, B, D]
    assert judged == [[D, B, E, C]]
    # every uncited fact is judged; fewer are offered than without a judge: its first ones are the section's
    offered = facts_to_offer(MANY, cited=set(), best_first=reversed_by_the_judge)
    assert offered == MANY[0][::-1][:JUDGED_COMPLETION_FACTS]
    assert judged[-1] == MANY[0] and JUDGED_COMPLETION_FACTS < COMPLETION_FACTS
    assert facts_to_offer(results, cited={A, B, C, D, E}, best_first=reversed_by_the_judge) == []
    assert len(judged) == 2  # nothing left to judge: no call


def test_what_is_listed_is_the_judges_best_of_what_nothing_cites_and_nothing_without_a_judge():
    results = [[A, B, C], [D, E]]

    def by_the_judge(uuids):
        return [uuid for uuid in (E, C, A, B) if uuid in uuids]  # D: under the floor

    assert facts_to_list(results, cited={C}, best_first=by_the_judge, most=6) == [E, A, B]
    assert facts_to_list(results, cited={C}, best_first=by_the_judge, most=2) == [E, A]
    assert facts_to_list(results, cited={C}, best_first=by_the_judge, most=0) == []
    assert facts_to_list(results, cited=set(), best_first=lambda uuids: None, most=6) == []  # could not judge
    assert facts_to_list(results, cited={A, B, C, D, E}, best_first=by_the_judge, most=6) == []


FACTS = {C: "Inspector Brandt found that the wellhead seal of Well 4 was cracked.",
         D: "Samples from Well 4 tested positive for E. coli on 11 March."}


def test_kept_sentences_cite_an_offered_fact_and_are_new_to_the_section():
    section = f"The storm flooded the wellfield [{A}]. Well 4 was closed [{B}]."
    addition = (f"The storm flooded the wellfield [{A}]. "  # the section again
                f"The wellhead seal of Well 4 was cracked [{C}]. "  # offered: kept
                f"Well 4 was closed [{B}]. "  # cites only a fact the section has
                "Many people were worried. "  # cites nothing
                f"Samples from Well 4 tested positive for E. coli [{D}, {B}].")  # one offered fact is enough
    assert new_sentences(addition, section, FACTS) == (
        f"The wellhead seal of Well 4 was cracked [{C}]. Samples from Well 4 tested positive for E. coli [{D}, {B}].")


def test_a_sentence_that_does_not_say_what_its_fact_says_is_not_added():
    # a small model copied an example, and put one fact's id on another fact's sentence
    addition = (f"The wellfield flooded on 9 March and was closed on 12 March [{C}]. "
                f"Samples from Well 4 tested positive for E. coli [{C}].")
    assert new_sentences(addition, "", FACTS) == ""
    assert new_sentences(f"Inspector Brandt found the seal of Well 4 cracked, a grave failure [{C}].", "", FACTS)


def test_an_id_written_after_the_full_stop_belongs_to_the_sentence_before():
    addition = f"The wellhead seal of Well 4 was cracked. [{C}]. Samples tested positive. [{D}]"
    assert new_sentences(addition, "", FACTS) == (
        f"The wellhead seal of Well 4 was cracked [{C}]. Samples tested positive [{D}].")


def test_a_copy_of_the_section_with_other_citations_adds_nothing():
    section = "The wellhead seal of Well 4 was cracked [" + A + "]."
    assert new_sentences(f"The wellhead seal of Well 4 was cracked [{C}].", section, FACTS) == ""


# -- in the agent: the scripted server writes, the graph is a real FalkorDB --------------------------------

OFFERED_LINE = re.compile(r"^- \[(F\d+)\] (.*) \((?:valid|no date)[^()]*\)$", re.MULTILINE)


def offered_facts(messages) -> list[tuple[str, str]]:
    """(label, fact text) of the facts a completion request offers."""
    return OFFERED_LINE.findall(messages[-1]["content"])


def offered_labels(messages) -> list[str]:
    return [label for label, _ in offered_facts(messages)]


def writer_then_completer(messages, body):
    """Writes citing the first fact it was shown; asked to complete, answers with the section again, a
    sentence on the first offered fact, one on an invented label and one citing nothing."""
    if purpose(messages) == "completion":
        first, text = offered_facts(messages)[0]
        return as_json({"content": f"The graph says so [F1]. {text} [{first}]. A rumour says more [F99]. "
                                   "People worried."})
    return writes_at_once(messages, body)


def offerable_labels(step: dict, labels: dict[str, str]) -> list[str]:
    """The labels a tool step showed whose own search ranked them within a page (10), as shown."""
    rank = {fact["uuid"]: fact["rank"] for fact in step["search"]["facts"]}
    return [label for label in step["shown"] if rank.get(labels[label]) is None or rank[labels[label]] <= 10]


def test_a_written_section_gains_a_sentence_for_its_best_uncited_fact(agent_backend, scripted_llm):
    config, gid = agent_backend(judge_or_chat(chat_fn=writer_then_completer), REPORT_AGENT_MAX_TOOL_CALLS=4)
    report_id, task = start_report(config, gid, "How often does the ferry sail?", max_sections=1)
    assert wait_for(task.task_id)["state"] == "done"
    report = report_store(config).read(report_id)
    steps = report["log"]
    labels = {label: uuid for step in steps for label, uuid in (step.get("new_labels") or {}).items()}
    shown = [offerable_labels(step, labels) for step in steps if step["kind"] == "tool"]
    (section,) = report["sections"]
    first_cited = section["cited"][0]
    (asked,) = [r for r in chat_requests(scripted_llm) if purpose(r.messages) == "completion"]
    # Offered: the best-ranked facts of the section's results, each result's first before any second,
    # without the one the section cites.
    expected = [label for label in ranked_evidence(shown) if labels[label] != first_cited][:COMPLETION_FACTS]
    assert offered_labels(asked.messages) == expected and len(expected) >= 2
    assert asked.messages[-1]["content"].startswith("Goal of the section: ")
    added = labels[expected[0]]
    assert section["cited"] == [first_cited, added] and section["completed"] == [added]
    assert f"{offered_facts(asked.messages)[0][1].rstrip('.')} [{added}]." in report["markdown"]
    assert report["markdown"].count("The graph says so") == 1  # the repeated section is not added again
    assert "rumour" not in report["markdown"] and "People worried" not in report["markdown"]
    (complete,) = [step for step in steps if step["kind"] == "complete"]
    assert complete["offered"] == expected and complete["cited"] == [expected[0]] and complete["error"] is None
    assert complete["judged"] is False  # no reranker: the offer kept the results' own order
    assert section["listed"] == [] and "Also found for this question" not in report["markdown"]  # nothing judged
    assert not [step for step in steps if step["kind"] == "list"]


def test_a_failed_completion_leaves_the_section_as_written(agent_backend, scripted_llm):
    def failing_completion(messages, body):
        return server_error() if purpose(messages) == "completion" else writes_at_once(messages, body)

    config, gid = agent_backend(judge_or_chat(chat_fn=failing_completion), REPORT_AGENT_MAX_TOOL_CALLS=4)
    report_id, task = start_report(config, gid, "How often does the ferry sail?", max_sections=1)
    assert wait_for(task.task_id)["state"] == "done"
    report = report_store(config).read(report_id)
    (section,) = report["sections"]
    assert len(section["cited"]) == 1 and section["completed"] == []
    (complete,) = [step for step in report["log"] if step["kind"] == "complete"]
    assert complete["cited"] == [] and complete["chars"] == 0 and "500" in complete["error"]


@pytest.mark.parametrize("listed_facts", [6, 0])
def test_with_a_reranker_the_sections_question_orders_what_is_offered_and_listed(agent_backend, scripted_llm,
                                                                                 listed_facts):
    question = "How often does the ferry sail?"
    # The judge likes short facts for the section's own question (its part of the requirement), and
    # says nothing useful for any other query.
    asked = defaultdict(dict)

    def judge_score(query, passage):
        asked[query][passage] = 10.0 / len(passage) if query.startswith("How often does the ferry sail") else 0.5
        return asked[query][passage]

    config, gid = agent_backend(judge_or_chat(judge_score, writer_then_completer), REPORT_AGENT_MAX_TOOL_CALLS=4,
                                RERANKER_PROVIDER="ollama", RERANKER_BASE_URL=scripted_llm.base_url,
                                RERANKER_MODEL="judge", RERANKER_SCORE_MODE="logprobs",
                                REPORT_LISTED_FACTS=str(listed_facts))
    report_id, task = start_report(config, gid, question, max_sections=1)
    assert wait_for(task.task_id)["state"] == "done"
    report = report_store(config).read(report_id)
    steps = report["log"]
    labels = {label: uuid for step in steps for label, uuid in (step.get("new_labels") or {}).items()}
    text = {fact["uuid"]: fact["fact"] for step in steps if step["kind"] == "tool" for fact in step["search"]["facts"]}
    shown = [offerable_labels(step, labels) for step in steps if step["kind"] == "tool"]
    (section,) = report["sections"]
    uncited = [label for label in ranked_evidence(shown) if labels[label] not in section["cited"][:1]]
    (part,) = next(step for step in steps if step["kind"] == "plan")["parts"]
    score = asked[part]
    assert {text[labels[label]] for label in uncited} <= set(score)  # every one was judged for the part
    by_the_judge = sorted(uncited, key=lambda label: -score[text[labels[label]]])
    (complete,) = [step for step in steps if step["kind"] == "complete"]
    assert len(uncited) >= 3
    assert complete["offered"] == by_the_judge[:JUDGED_COMPLETION_FACTS] != uncited[:JUDGED_COMPLETION_FACTS]
    assert complete["judged"] is True
    (asked,) = [r for r in chat_requests(scripted_llm) if purpose(r.messages) == "completion"]
    assert offered_labels(asked.messages) == complete["offered"]
    # What the completion did not write, the judge's best first, is listed beneath the section and cited.
    expected = [label for label in by_the_judge if label not in complete["cited"]][:listed_facts]
    listing = [step for step in steps if step["kind"] == "list"]
    assert [step["listed"] for step in listing] == ([expected] if listed_facts else [])
    assert section["listed"] == [labels[label] for label in expected]
    assert section["cited"] == section["cited"][:-len(expected) or None] + section["listed"]
    if not listed_facts:
        assert "Also found for this question" not in report["markdown"]
        return
    assert len(expected) >= 2 and complete["cited"]
    block = report["markdown"].split("Also found for this question:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert [line.split(" (")[0] for line in block] == [f"- {text[labels[label]]}" for label in expected]
    assert all(line.endswith(f") [{labels[label]}]") for line, label in zip(block, expected))
    sources = report["markdown"].split("Sources:\n", 1)[1]
    assert not any(labels[label] in sources for label in expected)  # each fact shown once, in the list
