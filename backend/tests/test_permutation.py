"""Permutation validation and repair, and reading the strategies' answers, on hand-made broken answers."""

from __future__ import annotations

import pytest

from graphiti_llm_rerank.permutation import repair_permutation
from graphiti_llm_rerank.strategies.answer_parsing import listwise_answer, pairwise_answer, selection_answer
from graphiti_llm_rerank.types import RerankParseError


def test_a_valid_permutation_is_kept_as_is():
    order, report = repair_permutation([2, 0, 3, 1], 4)
    assert order == [2, 0, 3, 1]
    assert report.valid and report.repairs == 0 and report.named == 4


@pytest.mark.parametrize(
    "answer, order, missing, duplicates, out_of_range, not_indices",
    [
        ([3, 1], [3, 1, 0, 2, 4], [0, 2, 4], [], [], []),  # missing: appended in incoming order
        ([2, 2, 0, 2, 1, 4, 3], [2, 0, 1, 4, 3], [], [2, 2], [], []),  # duplicates: first occurrence wins
        ([4, 7, 0, -1, 3, 2, 1, 5], [4, 0, 3, 2, 1], [], [], [7, -1, 5], []),  # out of range dropped
        ([1, "first", None, 0, 2.5, True, 4, 3, 2], [1, 0, 4, 3, 2], [], [], [], ["first", None, 2.5, True]),
        (["3", 1.0, 0, 4, 2], [3, 1, 0, 4, 2], [], [], [], []),  # "3" and 1.0 are unambiguous indices
        ([9, 1, 1, "x", 3], [1, 3, 0, 2, 4], [0, 2, 4], [1], [9], ["x"]),  # everything at once
        ([], [0, 1, 2, 3, 4], [0, 1, 2, 3, 4], [], [], []),
    ],
    ids=["missing", "duplicated", "out_of_range", "not_indices", "coerced", "mixed", "empty"],
)
def test_broken_answers_are_repaired_and_reported(answer, order, missing, duplicates, out_of_range, not_indices):
    repaired, report = repair_permutation(answer, 5)
    assert repaired == order and sorted(repaired) == list(range(5))
    assert (report.missing, report.duplicates, report.out_of_range, report.not_indices) == (
        missing, duplicates, out_of_range, not_indices,
    )
    assert report.extra == out_of_range + not_indices  # the contract's "extra": anything not an index 0..n-1
    assert report.repairs == len(missing) + len(duplicates) + len(out_of_range) + len(not_indices)
    assert report.is_valid is report.valid is (report.repairs == 0)
    assert report.as_dict()["repairs"] == report.repairs


def test_the_repair_report_has_the_contracts_fields():
    _, report = repair_permutation([9, 1, 1, "x", 3], 5)
    assert report.as_dict() == {
        "is_valid": False, "missing": [0, 2, 4], "extra": [9, "'x'"], "out_of_range": [9],
        "duplicates": [1], "not_indices": ["'x'"], "repairs": 6,
    }
    assert repair_permutation([1, 0], 2)[1].as_dict()["is_valid"] is True


@pytest.mark.parametrize(
    "text",
    [
        '{"reranked_indices": [2, 0, 1], "is_rejected": false, "rejection_reason": ""}',
        '```json\n{"reranked_indices": [2, 0, 1]}\n```',
        '<think>2 is best</think>{"reranked_indices": [2, 0, 1]}',
        'Sure! Here is the ranking: {"reranked_indices": [2, 0, 1]} Hope it helps.',
        "[2, 0, 1]",
    ],
    ids=["plain", "fenced", "think", "prose", "bare_list"],
)
def test_listwise_answers_are_read_defensively(text):
    answer = listwise_answer(text, 3)
    assert answer.order == [2, 0, 1] and answer.report.valid and not answer.rejected


def test_a_rejection_keeps_its_reason_even_without_indices():
    answer = listwise_answer('{"reranked_indices": [], "is_rejected": true, "rejection_reason": "all off-topic"}', 3)
    assert answer.rejected and answer.rejection_reason == "all off-topic" and answer.order == [0, 1, 2]


@pytest.mark.parametrize("repair", [True, False])
def test_a_rejection_that_still_ranks_is_a_parse_error(repair):
    text = '{"reranked_indices": [2, 0, 1], "is_rejected": true, "rejection_reason": "nothing fits"}'
    with pytest.raises(RerankParseError, match="rejects every passage yet ranks some"):
        listwise_answer(text, 3, repair=repair)


@pytest.mark.parametrize(
    "text", ["I cannot rank these.", '{"ranking": "2 > 0 > 1"}', '{"reranked_indices": ["x", 9]}', ""],
    ids=["prose", "string_ranking", "no_valid_index", "empty"],
)
def test_a_listwise_answer_with_nothing_usable_is_a_parse_error(text):
    with pytest.raises(RerankParseError):
        listwise_answer(text, 3)


def test_selection_is_filled_up_or_cut_to_exactly_m():
    assert selection_answer('{"selected_indices": [4]}', 6, 3) == ([4, 0, 1], 2)  # two filled in
    assert selection_answer('{"selected_indices": [5, 1, 2, 0]}', 6, 2) == ([5, 1], 2)  # two too many
    assert selection_answer('{"selected_indices": [3, 3, 8, 1]}', 6, 2) == ([3, 1], 2)  # duplicate, out of range
    with pytest.raises(RerankParseError):
        selection_answer('{"selected_indices": [7, 9]}', 6, 2)


@pytest.mark.parametrize(
    "text, label",
    [('{"more_relevant": "B"}', "B"), ('{"more_relevant": "passage a"}', "A"), ('"A"', "A"),
     ("Passage B is more relevant.", "B"), ("<think>hmm</think> B", "B")],
)
def test_pairwise_labels_are_read(text, label):
    assert pairwise_answer(text) == label


@pytest.mark.parametrize("text", ['{"more_relevant": "C"}', "Both are a bit relevant", "{}"])
def test_pairwise_without_a_label_is_a_parse_error(text):
    with pytest.raises(RerankParseError):
        pairwise_answer(text)
