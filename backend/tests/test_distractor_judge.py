"""`python -m bench distractor-judge`: the judge's side of the report bench's distractor target, over real HTTP to a
scripted judge whose scores are set per fact, so every figure it prints follows from them."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest

from bench.distractor_judge import run, summary
from bench.report_metrics import BenchRequirement, GoldPoint
from bench.report_sets import load_set
from app.config import Config
from tests.support.scripted_llm import judge
from tests.support.bench_cli import bench_cli

REQUIREMENT = "How did Acme Corp respond to the flooding of its depot?"
GOLD = {"Acme Corp built a dyke.": 0.8, "Acme Corp paid for pumps.": 0.6, "Acme Corp moved its depot.": 0.4}
# A distractor the judge likes only while the question names the company: the lower score counts.
NAME_ONLY = "Acme Corp sponsors the town's football club."
DISTRACTORS = {NAME_ONLY: 0.1, "The flood museum opened in 1990.": 0.2, "Acme Corp warned of floods in ads.": 0.7}


def scores(query: str, passage: str) -> float:
    if passage == NAME_ONLY and "Acme" in query:
        return 0.9
    return {**GOLD, **DISTRACTORS}[passage]


def requirement() -> BenchRequirement:
    points = tuple(GoldPoint(fact, frozenset({fact})) for fact in GOLD)
    return BenchRequirement("acme", REQUIREMENT, 1, points, frozenset(DISTRACTORS))


def config_for(base_url: str) -> Config:
    return dataclasses.replace(Config.from_env(), reranker_provider="ollama", reranker_strategy="pointwise",
                               reranker_score_mode="logprobs", reranker_base_url=base_url, reranker_model="judge",
                               reranker_timeout_s=5.0)


def test_each_fact_keeps_the_lower_score_of_the_question_as_asked_and_without_its_names(scripted_llm):
    scripted_llm.responder = judge(scores)
    [result] = asyncio.run(run(config_for(scripted_llm.base_url), [requirement()]))

    assert result.gold == pytest.approx(GOLD)
    assert result.distractors == pytest.approx(DISTRACTORS)  # NAME_ONLY: 0.1 without names, not 0.9 as asked
    asked = {request["messages"][1]["content"].split("<query>\n")[1].split("\n</query>")[0]
             for request in scripted_llm.requests}
    assert asked == {REQUIREMENT, "How did it respond to the flooding of its depot?"}


def test_the_pooled_figures_follow_from_the_scores(scripted_llm):
    scripted_llm.responder = judge(scores)
    figures = summary(asyncio.run(run(config_for(scripted_llm.base_url), [requirement()])))

    assert figures["gold_facts"] == 3 and figures["distractors"] == 3
    # gold over distractor in 7 of the 9 pairs: 0.6 and 0.4 lose to the ads fact (0.7)
    assert figures["auc"] == pytest.approx(7 / 9, abs=1e-4)
    assert figures["distractors_at_or_over_their_gold_median"] == ["Acme Corp warned of floods in ads."]
    assert figures["distractors_kept_by_a_floor_keeping_all_gold"] == 1  # only 0.7 is at or over 0.4
    assert figures["gold_removed_by_a_floor_removing_all_distractors"] == 2  # 0.6 and 0.4 are at or under 0.7


def test_the_command_scores_the_shipped_set_and_names_what_it_cannot_find(scripted_llm, monkeypatch):
    dairy = next(r for r in load_set("sample").requirements if r.id == "dairy")
    gold = {fact for point in dairy.gold for fact in point.facts}
    scripted_llm.responder = judge(lambda query, passage: 0.9 if passage in gold else 0.05)
    monkeypatch.setenv("RERANKER_TIMEOUT_S", "5")
    command = ["distractor-judge", "--base-url", scripted_llm.base_url, "--model", "judge"]

    done = bench_cli(args=[*command, "--only", "dairy"])
    assert done.exit_code == 0, done.output
    table, _, figures = done.stdout.partition("\n\n")
    assert "| dairy | 0.9000 / 0.9000 |" in table
    assert json.loads(figures)["auc"] == 1.0
    assert json.loads(figures)["distractors"] == len(dairy.distractors)

    asked = scripted_llm.count
    refused = bench_cli(args=[*command, "--only", "dairy,nonesuch"])
    assert refused.exit_code == 2
    assert "unknown requirement id(s) ['nonesuch']" in refused.stderr
    assert scripted_llm.count == asked  # refused before any judge request
