"""The tool text's budget is for what the model reads. The model reads each fact's short label
(F12), not the 36-character id the text is rendered with, so measuring the budget with the ids
left about a seventh of it unused and cut facts there was room for (InsightForge showed 6 of 13)."""

from __future__ import annotations

import uuid

from app.report.agent import ReportAgent
from app.report.results import InsightResult, SearchResult
from app.report.views import UUID_PATTERN, EntityView, FactView

BUDGET = 3000


def long_facts(count: int) -> list[FactView]:
    return [FactView(uuid=str(uuid.uuid4()), fact=f"Fact {n}: the pumping station on the river road logged a "
                     f"pressure drop during the night shift and reported it to the duty engineer",
                     relation="REPORTED", source=f"Station {n}", target="Duty engineer",
                     source_uuid=str(uuid.uuid4()), target_uuid=str(uuid.uuid4()), score=1 - n / 100, rank=n + 1,
                     first_stage_rank=n + 1) for n in range(count)]


def test_the_model_reads_more_facts_within_the_same_budget(backend):
    app, _ = backend()
    agent = ReportAgent(app.config["APP_CONFIG"], tool_text_chars=BUDGET)
    result = SearchResult(graph_id="g", query="pressure drop", scope="edges", facts=long_facts(30), entities=[],
                          reranked=False, max_chars=BUDGET)
    measured_with_ids = len(UUID_PATTERN.findall(result.render().text()))

    text = agent._render_for_the_model(result).text()
    labels = {found: f"F{n}" for n, found in enumerate(dict.fromkeys(UUID_PATTERN.findall(text)), start=1)}
    read_by_the_model = UUID_PATTERN.sub(lambda match: labels[match.group(0)], text)

    assert len(labels) > measured_with_ids  # more facts shown...
    assert len(read_by_the_model) <= BUDGET  # ...within the budget the model is given
    assert "truncated" in read_by_the_model and result.max_chars == BUDGET  # the result itself is unchanged


def test_insight_forge_gives_its_facts_the_room_a_search_gives_them():
    # Entity lines and chains cannot be cited; the merged facts can, and a real run showed 6 of 13.
    facts = long_facts(30)
    entities = [EntityView(uuid=str(uuid.uuid4()), name=f"Station {n}", labels=["Place"]) for n in range(30)]
    common = dict(facts=facts, reranked=False, max_chars=BUDGET)
    search = SearchResult(graph_id="g", query="pressure drop", scope="edges", entities=[], **common).to_text()
    insight = InsightResult(graph_id="g", question="pressure drop", sub_queries=["pressure drop"], entities=entities,
                            chains=[fact.relation_chain for fact in facts], **common).to_text()
    shown = [sum(1 for fact in facts if fact.uuid in text) for text in (search, insight)]
    assert shown[1] == shown[0] > 0 and len(insight) <= BUDGET
    assert "Entities involved" in insight  # the rest of the budget still names them
