"""The judge reads a fact's validity (RERANKER_PASSAGE_TIME): the passage text per mode, and what a real search
hands a scripted judge."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from graphiti_core.edges import EntityEdge

from app.graph.runtime import GraphitiAdapter
from app.graph.search import edge_passage
from tests.support.scripted_llm_replies import ChatRequest, judge

NOW = datetime(2026, 12, 2, tzinfo=timezone.utc)
FACT = "Tom Reyes manages the Northside Water Plant."


def _edge(valid_at=None, invalid_at=None, expired_at=None) -> EntityEdge:
    return EntityEdge(group_id="g", source_node_uuid="a", target_node_uuid="b", name="manages", fact=FACT,
                      created_at=NOW, valid_at=valid_at, invalid_at=invalid_at, expired_at=expired_at)


def _at(year: int, month: int = 1, day: int = 1) -> datetime:
    return datetime(year, month, day, tzinfo=timezone.utc)


@pytest.mark.parametrize("mode, edge, passage", [
    ("off", _edge(_at(2018, 6, 30), _at(2023, 3, 1)), FACT),
    ("dates", _edge(_at(2018, 6, 30), _at(2023, 3, 1)), f"(valid from 2018-06-30 until 2023-03-01) {FACT}"),
    ("dates", _edge(_at(2023, 3, 1)), f"(valid from 2023-03-01) {FACT}"),
    ("dates", _edge(None, _at(2019)), f"(valid until 2019-01-01) {FACT}"),
    ("status", _edge(_at(2018, 6, 30), _at(2023, 3, 1)), f"(valid from 2018-06-30 until 2023-03-01; ended) {FACT}"),
    ("status", _edge(_at(2023, 3, 1)), f"(valid from 2023-03-01; current) {FACT}"),
    ("status", _edge(_at(2027, 5, 1)), f"(valid from 2027-05-01; not yet valid) {FACT}"),
    ("status", _edge(_at(2020), _at(2028)), f"(valid from 2020-01-01 until 2028-01-01; current) {FACT}"),
    # Superseded in the graph (expired) before its own end date: ended now.
    ("status", _edge(_at(2020), _at(2028), expired_at=_at(2024)),
     f"(valid from 2020-01-01 until 2028-01-01; ended) {FACT}"),
    # A fact without dates says nothing about time, in every mode.
    ("status", _edge(), FACT),
    ("dates", _edge(), FACT),
])
def test_the_passage_carries_the_validity_the_mode_asks_for(mode, edge, passage):
    assert edge_passage(edge, mode, NOW) == passage


def test_a_time_stored_without_its_zone_reads_as_utc():
    naive = _edge(datetime(2018, 6, 30), datetime(2023, 3, 1))
    assert edge_passage(naive, "status", NOW) == f"(valid from 2018-06-30 until 2023-03-01; ended) {FACT}"


def test_search_hands_the_judge_the_dated_passage_after_the_query(backend, scripted_llm, water_graph):
    """The water facts hold one dated fact (the algae bloom of August 2024): with the default mode the judge
    reads it led by its validity and that it has ended; the undated facts read as they are; the query still
    opens every prompt (the prompt cache's shared prefix)."""
    scripted_llm.responder = judge(lambda query, passage: 0.5)
    backend(RERANKER_PROVIDER="ollama", RERANKER_BASE_URL=scripted_llm.base_url, RERANKER_MODEL="judge-model",
            RERANKER_SCORE_MODE="logprobs", RERANKER_TIMEOUT_S=5)
    outcome = GraphitiAdapter().graph.search(water_graph, "algae bloom reservoir closed", limit=4)
    requests = [ChatRequest(index=i, body=body, headers={}) for i, body in enumerate(scripted_llm.requests)]
    passages = {request.passage for request in requests}
    bloom = next(hit for hit in outcome.edges if "algae" in hit.fact)
    assert f"(valid from 2024-08-01 until 2024-08-22; ended) {bloom.fact}" in passages
    assert {hit.fact for hit in outcome.edges if hit is not bloom} <= passages
    assert all(request.messages[-1]["content"].startswith("<query>\nalgae bloom reservoir closed\n")
               for request in requests)
    assert bloom.fact == "An algae bloom closed the North Reservoir for three weeks in August 2024"  # answer unchanged
