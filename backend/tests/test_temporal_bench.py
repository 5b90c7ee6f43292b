"""`python -m bench temporal`: the shipped set is what its questions say, the measures are right by hand, and a
tiny run against the real local model reports figures computed from its own searches."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from bench.temporal import (
    DATA_DIR, FACTS_FILE, KINDS, QUESTIONS_FILE, TemporalArgs, TemporalSetError, accuracy_at_1, first_of_each_kind,
    half_of, load_facts, load_questions, ndcg_at, question_scores, run_temporal,
)
from app.config import Config


def _shipped():
    facts, validity = load_facts(DATA_DIR / FACTS_FILE)
    return facts, validity, load_questions(DATA_DIR / QUESTIONS_FILE, set(validity))


def test_every_answer_holds_at_the_asked_time_and_no_distractor_does():
    """The filters-on rows rely on it: a fact valid at `at` that is neither answer nor distractor is
    another relation's."""
    _, validity, questions = _shipped()
    assert {question.kind for question in questions} == set(KINDS)
    for question in questions:
        assert all(validity[fact].holds_at(question.at) for fact in question.answers), question.id
        assert not any(validity[fact].holds_at(question.at) for fact in question.distractors), question.id


def test_the_halves_split_the_questions_and_a_slice_asks_about_every_kind():
    _, _, questions = _shipped()
    tuning, reported = half_of(questions, "tuning"), half_of(questions, "reported")
    assert not {q.id for q in tuning} & {q.id for q in reported}
    assert len(tuning) + len(reported) == len(questions)
    sliced = first_of_each_kind(reported, 2)
    assert [q.kind for q in sliced].count("now") == 2 and {q.kind for q in sliced} == set(KINDS)


def test_a_fact_without_its_id_is_one_line_naming_the_file(tmp_path):
    (tmp_path / FACTS_FILE).write_text(json.dumps({"source": "a", "target": "b", "relation": "r", "fact": "f"}) + "\n")
    with pytest.raises(TemporalSetError, match=f"{FACTS_FILE}:1: every fact needs its own 'id'"):
        load_facts(tmp_path / FACTS_FILE)


def test_the_measures_by_hand():
    answers = frozenset({"a", "b"})
    assert accuracy_at_1(["a", "x"], answers) == 1.0 and accuracy_at_1(["x", "a"], answers) == 0.0
    assert accuracy_at_1([], answers) == 0.0
    # answers at places 2 and 3 of a ranking; ideal: places 1 and 2
    expected = (1 / math.log2(3) + 1 / math.log2(4)) / (1 + 1 / math.log2(3))
    assert ndcg_at(["x", "a", "b"], answers) == pytest.approx(expected)
    assert ndcg_at(["x"] * 10 + ["a"], answers) == 0.0  # past the cut


@pytest.mark.local_model
def test_a_tiny_run_against_the_real_model_reports_what_its_searches_found(tmp_path, local_llm, local_llm_config):
    """One question of each kind, three facts judged per search, the judge without and with the facts'
    validity: 24 judgements of the real model. Every figure is recomputed from the searches it stored."""
    config = dataclasses.replace(
        Config.from_env(), reranker_provider="ollama", reranker_base_url=local_llm,
        reranker_model=local_llm_config.local_llm_model, reranker_score_mode="logprobs", reranker_candidates=1,
        reranker_timeout_s=900, reranker_deadline_s=1800, search_timeout_s=2000)
    args = TemporalArgs(config=config, output=tmp_path / "out", backends=("falkordb",),
                        passage_times=("off", "status"), half="tuning", per_kind=1, limit=3)
    results = run_temporal(args, echo=lambda line: None)

    _, validity, questions = _shipped()
    asked = first_of_each_kind(half_of(questions, "tuning"), 1)
    assert results["question_ids"] == [q.id for q in asked]
    signals = {(row["signal"], row["filter"]) for row in results["rows"]}
    assert signals == {(signal, filtered) for signal in ("first stage", "cosine", "judge, time off", "judge, time status",
                                                         "judge alone, time off", "judge alone, time status")
                       for filtered in ("off", "on")}
    records = {}
    for mode in ("off", "status"):
        (path,) = (tmp_path / "out" / "runs").glob(f"falkordb-{mode}-*.jsonl")
        records[mode] = {r["qid"]: r for r in map(json.loads, path.read_text().splitlines())}
        assert set(records[mode]) == {q.id for q in asked}
        assert all(r["judged"] == len(r["candidate_ids"]) == 3 and not r["fell_back"] for r in records[mode].values())
    # The judge read the validity in status mode only (every fact of the set has a valid_at).
    assert all(not p.startswith("(valid ") for r in records["off"].values() for p in r["passages"])
    assert all(p.startswith("(valid from ") for r in records["status"].values() for p in r["passages"])
    for row in results["rows"]:
        signal, _, mode = row["signal"].partition(", time ")
        mode = mode or "off"  # the first stage and the cosine come from the first mode's searches
        scores = [question_scores(records[mode][q.id], q, validity)[f"{signal}|{row['filter']}"] for q in asked]
        assert row["all"]["acc@1"] == pytest.approx(sum(s["acc@1"] for s in scores) / len(asked), abs=1e-4)
        assert row["all"]["ndcg@10"] == pytest.approx(sum(s["ndcg@10"] for s in scores) / len(asked), abs=1e-4)
    assert (tmp_path / "out" / "results.md").read_text().count("| falkordb |") == len(results["rows"])
