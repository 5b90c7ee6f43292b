"""The report's plan tied to the requirement: its parts, the outline check, tool hints and the query
memory, on worked examples (no model, no graph)."""

from __future__ import annotations

import pytest

from app.report.planning import (
    check_outline, requirement_parts, subject_phrase, tool_hint, unexplored_names, words_match,
)
from app.report.query_memory import QueryMemory, query_key

CRISIS = "What caused the drinking-water crisis in Port Alder and who responded how?"


@pytest.mark.parametrize("requirement, parts", [
    (CRISIS, ["What caused the drinking-water crisis in Port Alder", "who responded how"]),
    ("What caused the E. coli contamination of the drinking water, and what was done about it?",
     ["What caused the E. coli contamination of the drinking water", "what was done about it"]),
    # "and lifted" joins no new question; "and by whom" has no word of its own, so it stays.
    ("When was the boil-water advisory issued and lifted, and by whom?",
     ["When was the boil-water advisory issued and lifted, by whom"]),
    ("How did St. Brigid's Hospital respond to the outbreak of illness?",
     ["How did St. Brigid's Hospital respond to the outbreak of illness"]),
    ("Where does the PFAS come from? Who paid for the clean-up; what did it cost",
     ["Where does the PFAS come from", "Who paid for the clean-up", "what did it cost"]),
    ("ferries", ["ferries"]),
])
def test_requirement_parts(requirement, parts):
    assert requirement_parts(requirement) == parts


def test_subject_of_a_question():
    assert subject_phrase("What caused the drinking-water crisis in Port Alder") == \
        "the drinking-water crisis in Port Alder"
    assert subject_phrase("When was the boil-water advisory issued") == "the boil-water advisory issued"


@pytest.mark.parametrize("part, subject", [
    # With "did"/"does" the verb comes after the subject; left in, it garbles every query made from it.
    ("What part did the Lindgren Dairy Farm play in the outbreak", "the Lindgren Dairy Farm in the outbreak"),
    ("Where does the PFAS in Port Alder's drinking water come from", "the PFAS in Port Alder's drinking water"),
    ("How did St. Brigid's Hospital respond to the outbreak of illness", "St. Brigid's Hospital the outbreak of illness"),
    ("How did the water crisis affect Port Alder's local businesses", "the water crisis Port Alder's local businesses"),
    ("How did Port Alder's residents organise after the outbreak", "Port Alder's residents after the outbreak"),
    ("Where did the contamination in the wells come from", "the contamination in the wells"),  # a noun before "in"
    ("How did the outbreak of illness spread", "the outbreak of illness"),  # "of" does not end the subject
    # A pronoun subject says nothing; what "it" stands for follows "that", or nothing does.
    ("How did it come out that Port Alder's residents were warned late", "Port Alder's residents were warned late"),
    ("what did it agree to do", ""),
])
def test_subject_of_a_question_with_did_leaves_its_verb_out(part, subject):
    assert subject_phrase(part) == subject


def test_tool_hints():
    assert tool_hint("What caused the drinking-water crisis") == "insight_forge"
    assert tool_hint("Why was the warning late") == "insight_forge"
    assert tool_hint("When was the advisory issued and lifted, by whom") == "insight_forge"  # several things
    assert tool_hint("who responded how") == "interview_entities"
    assert tool_hint("How did the hospital respond to the outbreak") == "interview_entities"
    assert tool_hint("Who directs the utility") is None
    assert words_match("responded", "responses") and words_match("ferry", "ferries")
    assert words_match("caused", "causes") and not words_match("well", "water")


def test_the_issue_outline_keeps_causes_and_responses_and_drops_generic_steps():
    proposed = [("Identify the Key Entities Involved", "Find the entities in the graph"),
                ("Analyze the Historical Facts", "Look at the historical facts"),
                ("How the town responded", "Who reacted to the crisis and how"),
                ("Causes of the contamination", "What led to the contamination")]
    check = check_outline(proposed, CRISIS, max_sections=3)
    assert check.parts == ["What caused the drinking-water crisis in Port Alder",
                           "who responded how (the drinking-water crisis in Port Alder)"]
    assert check.dropped == ["Identify the Key Entities Involved", "Analyze the Historical Facts"]
    assert check.added == []
    # A generic title goes even when its goal names the subject (the 1.5B model's favourite outline).
    generic = check_outline([("Identify the Key Entities", "Identify the key entities of the drinking-water crisis"),
                             ("Analyze the Facts", "Analyze what caused the crisis")], CRISIS, max_sections=3)
    assert generic.dropped == ["Identify the Key Entities", "Analyze the Facts"] and len(generic.added) == 2
    # The requirement's order, whatever the model's: causes first, then responses.
    assert [(s.title, s.part_index, s.tool_hint) for s in check.sections] == [
        ("Causes of the contamination", 0, "insight_forge"),
        ("How the town responded", 1, "interview_entities")]


def test_a_part_no_section_covers_gets_a_section_of_its_own():
    check = check_outline([("Identify the Key Entities Involved", "List them"),
                           ("Why the water was contaminated", "The causes")], CRISIS, max_sections=3)
    assert [s.title for s in check.sections] == [
        "Why the water was contaminated", "Who responded how (the drinking-water crisis in Port Alder)"]
    assert check.added == ["Who responded how (the drinking-water crisis in Port Alder)"]
    assert [s.proposed for s in check.sections] == [True, False]
    assert check.sections[1].goal == "Answer from the graph: who responded how (the drinking-water crisis in " \
                                     "Port Alder)?"
    # No usable proposal at all: one section per part.
    assert [s.part_index for s in check_outline([], CRISIS, 3).sections] == [0, 1]


def test_more_parts_than_sections_are_folded_not_lost():
    requirement = "Where does the PFAS come from? Who paid for the clean-up; what did it cost"
    check = check_outline([], requirement, max_sections=2)
    assert len(check.sections) == 2 and check.merged_parts == 1
    assert "what did it cost" in check.sections[1].part and "Who paid" in check.sections[1].part
    # More sections than room: each part keeps its first section before any part gets a second.
    many = [("PFAS origin", "where PFAS comes from"), ("PFAS sources in detail", "PFAS origin again"),
            ("Who paid for the clean-up", "payers"), ("The clean-up cost", "what it cost")]
    assert [s.title for s in check_outline(many, requirement, 3).sections] == [
        "PFAS origin", "Who paid for the clean-up", "The clean-up cost"]


def test_query_memory_knows_a_query_asked_in_other_words():
    assert query_key("search_graph", {"query": "Causes of the crisis"}) == \
        query_key("search_graph", {"query": "the crisis: causes!"})
    assert query_key("search_graph", {"query": "causes of the crisis"}) != \
        query_key("insight_forge", {"question": "causes of the crisis"})  # another tool answers otherwise
    assert query_key("search_graph", {"query": "who responded"}) != query_key("search_graph", {"query": "who paid"})
    memory = QueryMemory()
    memory.remember("search_graph", {"query": "Storm Edda flood"}, section=1, call=1, text="facts...")
    earlier = memory.recall("search_graph", {"query": "storm  edda FLOOD", "limit": 3})
    assert earlier is not None and (earlier.section, earlier.text) == (1, "facts...")
    assert memory.recall("search_graph", {"query": "the flood of Storm Edda"}) is earlier
    memory.note_repeat("search_graph", {"query": "storm  edda FLOOD"}, earlier, section=2)
    memory.note_repeat("search_graph", {"query": "the flood of Storm Edda"}, earlier, section=2)
    assert [repeat["identical"] for repeat in memory.repeats] == [True, False]
    assert memory.queries() == ["search_graph: Storm Edda flood"]


def test_names_in_results_not_asked_about_become_suggestions():
    names = ["Port Alder Water Authority", "Well 4", "Storm Edda", "Well 4", "Kessler Wellfield", "Port Alder",
             "Lindgren Dairy Farm", "Boil-water advisory"]
    asked = ["What caused the drinking-water crisis in Port Alder", "Storm Edda flood"]
    # "Port Alder" and "Storm Edda" were asked about; the water authority's name has a word no query used.
    assert unexplored_names(names, asked) == ["Port Alder Water Authority", "Well 4", "Kessler Wellfield",
                                              "Lindgren Dairy Farm"]
    assert unexplored_names(names, asked + ["Well 4 seal", "water authority"], limit=2) == [
        "Kessler Wellfield", "Lindgren Dairy Farm"]
    assert unexplored_names(names, asked, limit=0) == []


def test_a_name_most_results_mention_is_suggested_last():
    # The first stage's top facts for a why-question: the authority is one end of three of them
    # (a hub whose search returns them again), the wellfield of one (the edge of what was seen).
    names = ["Port Alder Water Authority", "Port Alder", "Port Alder Water Authority", "Kessler Wellfield",
             "Boil-water advisory", "Port Alder", "Port Alder Water Authority", "Port Alder Town Council"]
    asked = ["What caused the drinking-water crisis in Port Alder"]
    assert unexplored_names(names, asked) == ["Kessler Wellfield", "Boil-water advisory", "Port Alder Town Council",
                                              "Port Alder Water Authority"]
    assert unexplored_names(names, asked, limit=1) == ["Kessler Wellfield"]


def test_a_followed_name_is_searched_with_its_subject():
    from app.report.planning import name_in_context

    subject = "the drinking-water crisis in Port Alder"
    assert name_in_context("Kessler Wellfield", subject) == "Kessler Wellfield drinking-water crisis in Port Alder"
    assert name_in_context("Mara Lindqvist", "the Harbor Water Utility?") == "Mara Lindqvist Harbor Water Utility"
    # Nothing to add when the name already holds the subject's words, or there is no subject.
    assert name_in_context("Port Alder", "Port Alder") == "Port Alder"
    assert name_in_context("Well 4", "") == "Well 4"
