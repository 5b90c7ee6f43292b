"""The graded score mode: a grade 0-3 per passage, read as the expected grade from the digits'
logprobs; parsing on hand-made answers, and the judge over real HTTP on the scripted server."""

from __future__ import annotations

import asyncio
import math

import pytest

from bench.rerankers import parse_strategies
from app.config import Config
from graphiti_llm_rerank.judge_prompt import GRADES, build_judge_messages, judge_prompt_mode
from graphiti_llm_rerank.score_parsing import expected_grade, grade_from_text
from graphiti_llm_rerank.judge import LLMJudge
from graphiti_llm_rerank.ollama_reranker import OllamaReranker
from tests.support.scripted_llm import judge

QUERY = "How long does a flea live?"
SCRIPT = {
    "An adult flea lives two to three months.": 0.95,
    "Fleas go through egg, larva, pupa and adult stages.": 0.55,
    "Flea markets sell second-hand goods.": 0.05,
}


def position(*alternatives: tuple[str, float], token: str | None = None) -> dict:
    """One logprobs position; probabilities are given as such and sent as logprobs."""
    top = [{"token": t, "logprob": math.log(p)} for t, p in alternatives]
    first = token or alternatives[0][0]
    return {"token": first, "logprob": next(a["logprob"] for a in top if a["token"] == first), "top_logprobs": top}


def test_expected_grade_weighs_every_digit_and_ignores_other_tokens():
    answer = [position(("2", 0.5), ("3", 0.3), ("The", 0.15), ("0", 0.05))]
    assert expected_grade(answer) == pytest.approx((2 * 0.5 + 3 * 0.3 + 0 * 0.05) / (0.85 * 3))


def test_variants_of_one_digit_add_up_and_the_first_position_with_a_digit_counts():
    answer = [position(("Grade", 0.9), ("The", 0.1)), position(("3", 0.4), (" 3", 0.2), ("\u01201", 0.2)),
              position(("0", 1.0))]
    assert expected_grade(answer) == pytest.approx((3 * 0.6 + 1 * 0.2) / (0.8 * 3))


def test_no_digit_anywhere_is_no_score_and_text_is_the_fallback():
    assert expected_grade([position(("Yes", 0.7), ("No", 0.3))]) is None
    assert expected_grade(None) is None
    assert grade_from_text("Grade: 2") == pytest.approx(2 / 3)
    assert grade_from_text("<think>maybe 3</think>1") == pytest.approx(1 / 3)
    assert grade_from_text("7, or none") is None and grade_from_text("") is None


def test_the_graded_prompt_lists_every_grade_and_is_recognised():
    messages = build_judge_messages(QUERY, "passage", mode="graded")
    assert all(f"{grade} = " in messages[0]["content"] for grade in GRADES)
    assert judge_prompt_mode(messages) == "graded"
    assert judge_prompt_mode(build_judge_messages(QUERY, "passage", mode="logprobs")) == "logprobs"


def _rank(base_url: str, passages: list[str]) -> list[tuple[str, float]]:
    reranker = OllamaReranker(judge=LLMJudge(model="judge-model", base_url=base_url, api_key="k", score_mode="graded",
                                       timeout_s=5, cache_size=0), deadline_s=20)

    async def go():
        try:
            return await reranker.rank(QUERY, passages)
        finally:
            await reranker.aclose()

    return asyncio.run(go())


def test_graded_judge_scores_are_the_expected_grade_over_http(scripted_llm):
    scripted_llm.responder = judge(lambda query, passage: SCRIPT[passage])
    passages = list(reversed(SCRIPT))
    ranked = _rank(scripted_llm.base_url, passages)
    assert [passage for passage, _ in ranked] == list(SCRIPT)
    for passage, score in ranked:
        assert score == pytest.approx(SCRIPT[passage], abs=1e-6)
    for request in scripted_llm.requests:
        assert request["max_tokens"] == 1 and request["logprobs"] is True and request["temperature"] == 0
        assert judge_prompt_mode(request["messages"]) == "graded"


def test_a_server_without_logprobs_still_grades_by_the_written_digit(scripted_llm):
    scripted_llm.responder = judge(lambda query, passage: SCRIPT[passage], logprobs=False)
    ranked = _rank(scripted_llm.base_url, list(reversed(SCRIPT)))
    assert [round(score * 3) for _, score in ranked] == [3, 2, 0]  # whole grades only
    assert [passage for passage, _ in ranked] == list(SCRIPT)


def test_graded_is_a_setting_and_a_benchmark_score_mode(monkeypatch):
    monkeypatch.setenv("RERANKER_SCORE_MODE", "graded")
    assert Config.from_env().reranker_score_mode == "graded"
    [spec] = parse_strategies("pointwise:graded", "logprobs")
    assert spec.score_mode == "graded"
    monkeypatch.setenv("RERANKER_SCORE_MODE", "grade")
    with pytest.raises(ValueError, match="graded"):
        Config.from_env()
