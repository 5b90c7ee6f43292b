"""`bench report`: the report-quality figures on worked examples, the shipped requirement sets, and
the command end to end (the sample graph in a real FalkorDB, the scripted server as the agent's
model and the judge), its figures checked against the written reports themselves."""

from __future__ import annotations

import json
import re

import pytest

from bench.datasets import DatasetError
from bench.report_bench import UnknownSettingError, reranker_settings, with_settings
from bench.report_metrics import BenchRequirement, GoldPoint, aggregate, score_citations, tool_calls_of
from bench.report_sets import default_file, load_set
from app.config import Config
from app.demo.sample_graph import load_facts
from tests.support.report_scripts import as_json, chat_requests, judge_or_chat, judge_requests, purpose
from tests.support.shared_data import shared_dataset
from tests.support.bench_cli import bench_cli

INVENTED = "99999999-8888-4777-8666-555555555555"


def requirement() -> BenchRequirement:
    return BenchRequirement(
        id="r", requirement="Why?", sections=1,
        gold=(GoldPoint("A", frozenset({"a1", "a2"})), GoldPoint("B", frozenset({"b1"})),
              GoldPoint("C", frozenset({"c1"}))),
        distractors=frozenset({"d1", "d2"}))


def test_gold_recall_counts_points_not_facts_and_distractors_each_time():
    # a1 and a2 state the same point: one point of three. d1 is a distractor, x is neither.
    score = score_citations(["a1", "a2", "d1", "x", "a1"], requirement())
    assert score == {
        "gold_points": 3, "gold_covered": 1, "gold_recall": 0.3333, "covered_points": ["A"],
        "missed_points": ["B", "C"], "cited_facts": 4, "cited_gold_facts": 2, "distractors_cited": 1,
        "cited_distractors": ["d1"], "cited_other": 1}
    assert score_citations(["c1", "b1", "a2", "d2", "d1"], requirement())["gold_recall"] == 1.0
    assert score_citations([], requirement())["gold_recall"] == 0.0


def test_tool_use_and_the_table_row_from_records():
    log = [{"kind": "plan"},
           {"kind": "tool", "tool": "search_graph", "search": {"moved_up": ["u1"]}},
           {"kind": "tool", "tool": "search_graph", "search": {"moved_up": []}},
           {"kind": "repeated_query", "tool": "search_graph", "identical": True},
           {"kind": "repeated_query", "tool": "search_graph", "identical": False},
           {"kind": "tool", "tool": "insight_forge", "nudged_from": "search_graph", "search": {}},
           {"kind": "invalid_call"}, {"kind": "write"}]
    assert tool_calls_of(log) == {
        "tool_calls": 3, "tool_calls_by_tool": {"search_graph": 2, "insight_forge": 1}, "repeated_queries": 2,
        "identical_repeats": 1, "nudged_calls": 1, "invalid_calls": 1, "tool_errors": 0,
        "searches_moved_by_reranker": 1}
    records = [
        {"gold_recall": 0.5, "gold_covered": 4, "gold_points": 8, "gold_shown": 6, "gold_in_text": 3,
         "listed_facts": 2, "completion_citations": 2,
         "unstated_sources": 3, "distractors_cited": 1, "removed_claims": 2,
         "tool_calls": 5, "tool_calls_by_tool": {"search_graph": 3, "insight_forge": 2}, "repeated_queries": 1,
         "identical_repeats": 1, "agent_calls": 12, "judge_calls": 60, "wall_s": 100.0},
        {"gold_recall": 1.0, "gold_covered": 5, "gold_points": 5, "gold_shown": 5, "distractors_cited": 0,
         "removed_claims": 0,
         "tool_calls": 2, "tool_calls_by_tool": {"search_graph": 1, "interview_entities": 1}, "repeated_queries": 0,
         "identical_repeats": 0, "agent_calls": 5, "judge_calls": 20, "wall_s": 50.0, "sections_by_fallback": 1},
    ]
    row = aggregate(records)
    assert row == {
        "reports": 2, "gold_recall": 0.75, "gold_covered": 9, "gold_points": 13, "gold_shown": 11,
        "gold_in_text": 3, "listed_facts": 2,
        "completion_citations": 2, "unstated_sources": 3, "distractors_cited": 1,
        "removed_claims": 2, "removed_citations": 0, "tool_calls": 7,
        "tool_calls_by_tool": {"insight_forge": 2, "interview_entities": 1, "search_graph": 4},
        "repeated_queries": 1, "identical_repeats": 1, "agent_calls": 17, "judge_calls": 80, "judge_cache_hits": 0,
        "wall_s": 150.0,
        "wall_per_report_s": 75.0, "sections_by_fallback": 1}
    assert aggregate([]) == {"reports": 0}


def test_the_shipped_sample_set_names_real_facts_and_planted_distractors():
    requirement_set = load_set("sample")
    graph = {fact.fact for fact in load_facts()}
    ids = [r.id for r in requirement_set.requirements]
    assert ids == ["crisis", "pfas", "hospital", "repairs", "late-warning", "businesses", "regulator", "dairy",
                   "residents", "halvorsen", "nwosu"]
    data = json.loads(default_file("sample").read_text(encoding="utf-8"))
    # the last eight were written after the agent's settings were chosen, and say so
    assert [bool(item.get("held_out")) for item in data["requirements"]] == [False] * 3 + [True] * 8
    for item in requirement_set.requirements:
        assert item.known_facts() <= graph and item.distractors and len(item.gold) >= 5
    crisis = requirement_set.requirements[0]
    assert "AquaPure Bottling supplies drinking water for the Port Alder Water Polo Club's home matches." in \
        crisis.distractors  # the distractor the issue's report cited
    assert crisis.sections == 2 and len(crisis.gold) == 8


def test_the_held_out_sample_set_loads_and_asks_new_questions():
    holdout = load_set("sample", default_file("sample").with_name("report_bench_holdout.json"))
    shipped = load_set("sample")
    graph = {fact.fact for fact in load_facts()}
    assert [r.id for r in holdout.requirements] == [
        "holdout-well4", "holdout-officials", "holdout-advisory", "holdout-airfield", "holdout-vulnerable"]
    assert not {r.requirement for r in holdout.requirements} & {r.requirement for r in shipped.requirements}
    for item in holdout.requirements:
        assert item.known_facts() <= graph and item.distractors and len(item.gold) >= 3


def test_a_set_naming_a_fact_the_graph_lacks_fails_loudly(tmp_path):
    data = json.loads(default_file("sample").read_text(encoding="utf-8"))
    data["requirements"][0]["gold"][0]["facts"] = ["Storm Edda flooded the wellfield (a typo of the real fact)."]
    path = tmp_path / "set.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(DatasetError, match="requirement 'crisis' names facts the sample graph does not hold"):
        load_set("sample", path)
    with pytest.raises(DatasetError, match="needs --dataset"):
        load_set("scifact")


def test_settings_go_through_config_by_their_environment_names():
    config = Config.from_env()
    tuned = with_settings(config, [("RERANKER_FUSION", "rrf"), ("RERANKER_FUSION_WEIGHT", "0.25"),
                                   ("REPORT_AGENT_MAX_TOOL_CALLS", "3")])
    assert (tuned.reranker_fusion, tuned.reranker_fusion_weight, tuned.report_agent_max_tool_calls) == ("rrf", 0.25, 3)
    assert tuned.llm_model_name == config.llm_model_name  # nothing else changes
    with pytest.raises(ValueError, match="RERANKER_FUSION"):
        with_settings(config, [("RERANKER_FUSION", "average")])
    with pytest.raises(UnknownSettingError, match="no setting RERANKER_TELEPATHY"):
        with_settings(config, [("RERANKER_TELEPATHY", "on")])
    labels = [s.label for s in reranker_settings(["off", "on"], "pointwise", "logprobs", [("rrf", "0.5")], [])]
    assert labels == ["reranker off", "reranker on (pointwise:logprobs)",
                      "reranker on (pointwise:logprobs) + fusion rrf 0.5"]


# -- end to end --------------------------------------------------------------------------------

def hospital_writer(messages, body):
    """Plans one section, searches once, then cites every fact it was shown but the first (only listed under
    "sources", never said) plus one invented id."""
    kind = purpose(messages)
    if kind == "outline":
        return as_json({"title": "St. Brigid's", "sections": [
            {"title": "How the hospital responded", "goal": "The hospital's response to the outbreak"}]})
    if kind == "section":
        if not any(m["role"] == "assistant" for m in messages):
            return as_json({"action": "tool", "tool": "search_graph",
                            "arguments": {"query": "St. Brigid's Hospital outbreak patients", "limit": 6}})
        # every fact the section was shown: the planned calls' results in the opening, then its own search's
        shown = re.findall(r"\[(F\d+)\]", "\n".join(m["content"] for m in messages if m["role"] == "user"))
        listed, *said = dict.fromkeys(shown)
        content = " ".join(f"The graph says so [{label}]." for label in said)
        return as_json({"action": "write", "content": f"{content} Something else happened [{INVENTED}].",
                        "sources": [listed]})
    return as_json({"sub_queries": []})


def expected_from_markdown(markdown: str, item: dict) -> tuple[int, int, int]:
    """(gold points covered, distractors cited, gold points covered by the text alone), read from the report's
    Sources list ("- [id] fact (time)") and the facts listed beneath a section ("- fact (time) [id]")."""
    lines = markdown.splitlines()
    sources = {line.split("] ", 1)[1] for line in lines if re.match(r"^- \[[0-9a-f-]{36}\] ", line)}
    listed = {line[2:] for line in lines if re.search(r"\) \[[0-9a-f-]{36}\]$", line)}

    def among(entries: set[str], fact: str) -> bool:
        return any(entry.startswith(fact + " (") for entry in entries)

    def covered(entries: set[str]) -> int:
        return sum(1 for point in item["gold"] if any(among(entries, fact) for fact in point["facts"]))

    return (covered(sources | listed), sum(1 for fact in item["distractors"] if among(sources | listed, fact)),
            covered(sources))


def test_bench_report_runs_end_to_end_and_resumes(backend, scripted_llm, tmp_path):
    scripted_llm.responder = judge_or_chat(chat_fn=hospital_writer)  # the judge scores by keyword overlap
    # That judge scores 0 for a fact sharing no word with the question, so the citation floor (its own tests:
    # test_citation_floor.py) would take out more than the invented sentence this test counts.
    app, _ = backend(LLM_BASE_URL=scripted_llm.base_url, LLM_MODEL_NAME="writer", LLM_TIMEOUT_S=10,
                     RERANKER_BASE_URL=scripted_llm.base_url, RERANKER_MODEL="judge", RERANKER_SCORE_MODE="logprobs",
                     REPORT_CITATION_FLOOR=0)
    output = tmp_path / "bench"
    command = ["report", "--only", "hospital", "--rerankers", "off,on", "--fusion", "rrf:0.5",
               "--set", "RERANKER_CANDIDATES=2", "--llm-model", "writer-2", "--output", str(output)]
    refused = bench_cli(app=app, args=command)
    assert refused.exit_code != 0 and "add --yes" in refused.output and scripted_llm.count == 0

    done = bench_cli(app=app, args=[*command, "--yes"])
    assert done.exit_code == 0, done.output
    results = json.loads((output / "results.json").read_text())
    labels = ["reranker off", "reranker on (pointwise:logprobs)", "reranker on (pointwise:logprobs) + fusion rrf 0.5"]
    assert list(results["settings"]) == labels
    assert results["agent_model"] == "writer-2"  # the model the reports were written with, not the default
    assert results["citation_floor"] == 0
    assert results["settings"][labels[2]]["overrides"]["RERANKER_FUSION"] == "rrf"
    item = next(i for i in json.loads(default_file("sample").read_text())["requirements"] if i["id"] == "hospital")

    for label in labels:
        (record,) = results["per_report"][label]
        report = output / "reports" / record["report_id"]
        markdown = (report / "report.md").read_text(encoding="utf-8")
        covered, distractors, in_text = expected_from_markdown(markdown, item)
        assert (record["gold_covered"], record["distractors_cited"]) == (covered, distractors)
        assert record["gold_in_text"] == in_text <= covered
        assert record["gold_recall"] == round(covered / len(item["gold"]), 4) and covered > 0
        assert record["removed_claims"] == 1 and INVENTED not in markdown  # the invented sentence is gone
        assert (record["off_question"], record["off_question_distractors"]) == (0, [])  # a floor of 0 keeps all
        steps = [json.loads(line) for line in (report / "steps.jsonl").read_text().splitlines()]
        tools = [step for step in steps if step["kind"] == "tool"]
        # The agent's three planned calls (the stance question's interview, two follow-up searches), the model's
        # search.
        assert [(t["tool"], t.get("planned", False)) for t in tools] == [
            ("interview_entities", True), ("search_graph", True), ("search_graph", True), ("search_graph", False)]
        assert record["tool_calls_by_tool"] == {"interview_entities": 1, "search_graph": 3}
        assert record["repeated_queries"] == 0 and record["wall_s"] > 0 and record["status"] == "done"
        # The fact only named under "sources" is not cited; the completion request offers it (and gets no
        # sentence back); with a reranker it is then listed beneath the section, which cites it.
        (write,) = [step for step in steps if step["kind"] == "write"]
        (complete,) = [step for step in steps if step["kind"] == "complete"]
        listing = label != labels[0]
        assert record["unstated_sources"] == 1 and (write["unstated_sources"][0] in markdown) is listing
        assert complete["offered"] == ["F1"] and complete["cited"] == []
        assert record["listed_facts"] == int(listing)
        # Outline, two interviews, the model's search turn, write turn and completion.
        assert record["agent_calls"] == 6
        row = results["settings"][label]
        assert (row["reports"], row["gold_recall"], row["agent_calls"]) == (1, record["gold_recall"], 6)
        assert tools[2]["search"]["reranked"] is (label != labels[0])
    judged = [results["per_report"][label][0]["judge_calls"] for label in labels]
    assert judged[0] == 0 and judged[1] > 0 and sum(judged) == len(judge_requests(scripted_llm))
    cached = [results["per_report"][label][0]["judge_cache_hits"] for label in labels]
    assert judged[2] + cached[2] >= judged[1]  # the fusion run's scores: judged anew or from the cache
    assert len(chat_requests(scripted_llm)) == 3 * 6  # per setting, as counted above; nothing else
    assert "| reranker off | 1 | " in done.output and (output / "results.md").is_file()

    # The same command again reuses every finished report: no model request at all.
    before = scripted_llm.count
    again = bench_cli(app=app, args=[*command, "--yes"])
    assert again.exit_code == 0 and scripted_llm.count == before
    assert json.loads((output / "results.json").read_text())["per_report"] == results["per_report"]


def test_bench_report_refuses_unknown_settings_before_running(backend, scripted_llm, tmp_path):
    app, _ = backend(LLM_BASE_URL=scripted_llm.base_url, LLM_MODEL_NAME="writer")
    for extra, message in ((["--set", "RERANKER_TELEPATHY=1"], "no setting RERANKER_TELEPATHY"),
                           (["--fusion", "average"], "RERANKER_FUSION"),
                           (["--only", "weather"], "unknown requirement id(s) ['weather']"),
                           (["--graph", "scifact"], "needs --dataset")):
        result = bench_cli(app=app, args=["report", "--output", str(tmp_path), *extra])
        assert result.exit_code != 0 and message in result.output, result.output
    assert scripted_llm.count == 0 and not (tmp_path / "results.json").exists()


def test_the_shipped_scifact_set_matches_the_qrels():
    requirement_set = load_set("scifact", dataset=shared_dataset("beir-scifact-test"))
    assert [r.id for r in requirement_set.requirements] == ["53", "179", "1259", "1266"]
    birth = requirement_set.requirements[1]
    assert [p.point for p in birth.gold] == ["abstract 16322674", "abstract 17450673", "abstract 23557241",
                                             "abstract 27123743"]
    assert "Claim: Birth-weight is positively associated with breast cancer." in birth.requirement
    facts = {fact["fact"] for fact in requirement_set.facts}
    for item in requirement_set.requirements:
        assert item.known_facts() <= facts and not (item.distractors & frozenset().union(*(p.facts for p in item.gold)))
