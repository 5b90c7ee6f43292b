"""The shipped sample graph and demo questions: valid, importable through the API, and built so that
reranking has something to fix (keyword-similar distractors high in the first stage, relevant facts
within the reranker's candidates)."""

from __future__ import annotations

import io
import json
import re

import pytest

from app.demo.sample_graph import (
    ensure_sample_graph,
    graph_name,
    load_facts,
    load_questions,
    sample_graph_text,
)
from app.graph.runtime import GraphitiAdapter
from tests.conftest import unique_graph_id

TOP_K = 3  # what the demo shows per column
CANDIDATES = 2 * TOP_K  # RERANKER_CANDIDATES (default 2) x top-k: what the reranker gets to judge
_STOPWORDS = {"what", "where", "when", "does", "that", "with", "from", "come", "were", "about", "whom"}


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if len(w) >= 4 and w not in _STOPWORDS}


@pytest.fixture(scope="module")
def facts():
    return load_facts()


@pytest.fixture(scope="module")
def questions():
    return load_questions()


def test_sample_file_is_valid_and_of_the_promised_size(facts):
    lines = [line for line in sample_graph_text().splitlines() if line.strip()]
    assert len(facts) == len(lines)
    assert 120 <= len(facts) <= 200
    entities = {name for fact in facts for name in (fact.source, fact.target)}
    assert 30 <= len(entities) <= 50
    texts = [fact.fact for fact in facts]
    assert len(set(texts)) == len(texts), "fact texts must be unique: on-topic checks match by text"
    historical = [fact for fact in facts if fact.invalid_at is not None]
    assert len(historical) >= 10 and all(fact.valid_at for fact in historical)
    assert all(fact.source_labels and fact.target_labels for fact in facts)


def test_questions_name_real_facts_and_keyword_similar_distractors(facts, questions):
    texts = {fact.fact for fact in facts}
    assert len(questions) >= 4
    for question in questions:
        assert len(question.relevant_facts) >= TOP_K, question.question
        assert question.relevant_facts <= texts, question.relevant_facts - texts
        assert question.keyword_distractors, question.question
        for distractor in question.keyword_distractors:
            assert distractor in texts
            assert not any(distractor in other.relevant_facts for other in questions)
            # Keyword-similar: shares a content word with the question, yet is off topic.
            assert _words(distractor) & _words(question.question), (question.question, distractor)


def test_sample_graph_imports_cleanly_through_the_api(client, facts):
    gid = unique_graph_id("sample")
    assert client.post("/api/graph", json={"graph_id": gid}).status_code == 201
    upload = {"file": (io.BytesIO(sample_graph_text().encode()), "sample_graph.jsonl")}
    response = client.post(f"/api/graph/{gid}/facts", data=upload, content_type="multipart/form-data")
    assert response.status_code == 201, response.get_json()
    entities = {name for fact in facts for name in (fact.source, fact.target)}
    assert response.get_json() == {"imported": len(facts), "skipped_duplicates": 0, "entities": len(entities),
                                   "entities_created": len(entities)}
    stats = client.get(f"/api/graph/{gid}/stats").get_json()
    assert (stats["nodes"], stats["edges"]) == (len(entities), len(facts))
    assert stats["historical_edges"] == sum(1 for fact in facts if fact.invalid_at is not None)
    nodes = client.get(f"/api/graph/{gid}/nodes?limit=500").get_json()["items"]
    labels = {node["name"]: node["labels"] for node in nodes}
    assert labels["St. Brigid's Hospital"] == ["Organization", "Hospital"]
    assert labels["Port Alder Water Polo Club"] == ["Organization", "SportsClub"]


def test_first_stage_ranks_distractors_high_and_keeps_relevant_facts_in_reach(client, questions):
    """The demo's premise: without reranking, off-topic facts take top places; the relevant facts the
    reranker could promote are within its candidates. If an edit to the sample breaks this, the demo
    would show nothing, so this test says so."""
    graph = GraphitiAdapter(client.application.config["APP_CONFIG"]).graph
    gid = unique_graph_id("sample")
    ensure_sample_graph(graph, gid)
    with_off_topic_in_top = 0
    with_room_to_improve = 0
    for question in questions:
        hits = graph.search(gid, question.question, limit=CANDIDATES).edges
        assert len(hits) == CANDIDATES
        top = hits[:TOP_K]
        on_topic_top = sum(question.on_topic(hit.fact) for hit in top)
        on_topic_candidates = sum(question.on_topic(hit.fact) for hit in hits)
        assert on_topic_candidates >= 1, f"no relevant fact among the candidates of {question.question!r}"
        with_off_topic_in_top += on_topic_top < TOP_K
        # A perfect reranker would lift a relevant candidate into the top k in place of an off-topic one.
        with_room_to_improve += min(TOP_K, on_topic_candidates) > on_topic_top
    assert with_off_topic_in_top >= len(questions) // 2
    assert with_room_to_improve >= len(questions) // 2


def test_sample_import_is_done_once_and_redone_when_incomplete(client, facts):
    graph = GraphitiAdapter(client.application.config["APP_CONFIG"]).graph
    gid = unique_graph_id("sample")
    first = ensure_sample_graph(graph, gid)
    assert first.imported and first.facts == len(facts)
    again = ensure_sample_graph(graph, gid)
    assert not again.imported and graph.stats(gid)["edges"] == len(facts)
    assert next(g for g in graph.list() if g["graph_id"] == gid)["name"] == graph_name(sample_graph_text())

    # A graph of that name without its edges (an import cut short) is imported again, not trusted.
    graph.delete(gid)
    graph.create(gid, graph_name(sample_graph_text()))
    redone = ensure_sample_graph(graph, gid)
    assert redone.imported and graph.stats(gid)["edges"] == len(facts)

    # A graph imported from another version of the file (another name) is replaced.
    graph.delete(gid)
    graph.create(gid, "Port Alder sample graph 000000000000")
    graph.import_facts(gid, [json.loads(sample_graph_text().splitlines()[0])])
    replaced = ensure_sample_graph(graph, gid)
    assert replaced.imported and graph.stats(gid)["edges"] == len(facts)

