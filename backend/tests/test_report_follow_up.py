"""With a reranker, a section's planned follow-up searches follow the names of the facts its own question
judges best among all the section has seen; without one, the last result's names (app/report/agent.py,
`_names_to_follow`). Agent runs over a real FalkorDB with the scripted server as writer and judge."""

from __future__ import annotations

from app.graph.runtime import GraphitiAdapter
from app.report.agent import start_report
from app.report.planning import name_in_context, subject_phrase, unexplored_names
from app.report.store import ReportStore
from tests.support.report_scripts import judge_or_chat
from tests.test_report_agent import agent_backend, wait_for, writes_at_once  # noqa: F401 (fixture)

QUESTION = "How does the town keep its drinking water safe?"
PART = "How does the town keep its drinking water safe"


def judge_for_the_part(query: str, passage: str) -> float:
    """Shorter facts are better for the section's question; every other query finds all facts alike."""
    return 1.0 / len(passage) if query.startswith(PART) else 0.5


def planned_searches(agent_backend, **env) -> tuple[list[dict], dict]:
    """The tool steps of a one-section report with three planned calls, and the graph's edges by uuid."""
    config, gid = agent_backend(judge_or_chat(judge_for_the_part, writes_at_once), REPORT_AGENT_MAX_TOOL_CALLS=4,
                                **env)
    report_id, task = start_report(config, gid, QUESTION, max_sections=1, planned_calls=3)
    assert wait_for(task.task_id)["state"] == "done"
    steps = ReportStore(config.data_dir).read(report_id)["log"]
    edges = {edge["uuid"]: edge for edge in GraphitiAdapter(config).graph.edges(gid, limit=100)["items"]}
    return [step for step in steps if step["kind"] == "tool"], edges


def shown_edges(step: dict, edges: dict) -> list[dict]:
    return [edges[fact["uuid"]] for fact in step["search"]["facts"] if fact.get("shown")]


def names_of(facts: list[dict]) -> list[str]:
    return [name for fact in facts for name in (fact["source"], fact["target"]) if name]


def test_with_a_reranker_the_third_search_follows_the_sections_best_judged_fact(agent_backend, scripted_llm):
    tools, edges = planned_searches(agent_backend, RERANKER_PROVIDER="ollama", RERANKER_BASE_URL=scripted_llm.base_url,
                                    RERANKER_MODEL="judge", RERANKER_SCORE_MODE="logprobs")
    assert [step.get("planned") for step in tools[:3]] == [True, True, True]
    asked = [step["arguments"]["query"] for step in tools[:2]] + [PART]
    seen = shown_edges(tools[0], edges) + shown_edges(tools[1], edges)
    best_first = sorted(seen, key=lambda edge: -judge_for_the_part(PART, edge["fact"]))  # stable: ties by position
    followed = unexplored_names(names_of(best_first), asked, limit=1)
    assert tools[2]["arguments"]["query"] == name_in_context(followed[0], subject_phrase(PART))
    # The rule the agent had before (the last result's names) would have searched another name here.
    assert unexplored_names(names_of(shown_edges(tools[1], edges)), asked, limit=1) != followed


def test_without_a_reranker_a_follow_up_takes_the_last_results_names(agent_backend):
    tools, edges = planned_searches(agent_backend, RERANKER_PROVIDER="none")
    assert len(tools) >= 2 and tools[1].get("planned")
    followed = unexplored_names(names_of(shown_edges(tools[0], edges)), [tools[0]["arguments"]["query"], PART], limit=1)
    assert tools[1]["arguments"]["query"] == name_in_context(followed[0], subject_phrase(PART))
