"""The IR measures on a tiny hand-made run whose figures are worked out by hand below.

trec_eval conventions (what ir-measures/pytrec_eval compute): nDCG gain = the grade itself,
discount log2(rank + 1); binary measures count grade >= rel_level as relevant.

q1  qrels d1:3 d2:0 d3:2 d4:1     ranking d2 d1 d4 d3 d5 (d5 unjudged)
    DCG  = 0/1 + 3/log2(3) + 1/log2(4) + 2/log2(5) = 1.8927893 + 0.5 + 0.8613531 = 3.2541424
    IDCG = 3/1 + 2/log2(3) + 1/log2(4) + 0        = 3 + 1.2618595 + 0.5        = 4.7618595
    nDCG@10 = 0.683376
    rel_level 2 (relevant d1, d3): RR@10 = 1/2; AP = (1/2 + 2/4) / 2 = 0.5; R@10 = 2/2 = 1
    rel_level 1 (relevant d1, d3, d4): RR@10 = 1/2; AP = (1/2 + 2/3 + 3/4) / 3 = 0.638889; R@10 = 1
q2  qrels e1:1 e2:2               ranking e3 e4 e2
    DCG = 2/log2(4) = 1.0; IDCG = 2/1 + 1/log2(3) = 2.630930; nDCG@10 = 0.380094
    rel_level 2 (relevant e2): RR@10 = 1/3; AP = (1/3) / 1 = 0.333333; R@10 = 1
q3  qrels f1:2                    empty ranking: every measure 0 (counted, as trec_eval -c does)
mean over q1..q3 (rel_level 2): nDCG 0.354490, MRR 0.277778, MAP 0.277778, R@10 0.666667
"""

from __future__ import annotations

import ir_measures
import pytest

from bench.datasets import load_dataset
from bench.metrics import evaluate, measures, percentile, to_qrels, to_run

QRELS = {
    "q1": {"d1": 3, "d2": 0, "d3": 2, "d4": 1},
    "q2": {"e1": 1, "e2": 2},
    "q3": {"f1": 2},
}
RANKINGS = {"q1": ["d2", "d1", "d4", "d3", "d5"], "q2": ["e3", "e4", "e2"], "q3": []}


def test_per_query_figures_match_the_hand_computed_ones():
    per_query, mean = evaluate(QRELS, RANKINGS, rel_level=2)
    assert per_query["q1"] == pytest.approx({"ndcg@10": 0.683376, "mrr@10": 0.5, "map": 0.5, "recall@10": 1.0},
                                            abs=1e-6)
    assert per_query["q2"] == pytest.approx({"ndcg@10": 0.380094, "mrr@10": 1 / 3, "map": 1 / 3, "recall@10": 1.0},
                                            abs=1e-6)
    assert per_query["q3"] == {"ndcg@10": 0.0, "mrr@10": 0.0, "map": 0.0, "recall@10": 0.0}
    assert mean == pytest.approx({"ndcg@10": 0.354490, "mrr@10": 0.277778, "map": 0.277778, "recall@10": 0.666667},
                                 abs=1e-6)


def test_relevance_level_one_counts_grade_one_as_relevant():
    per_query, _ = evaluate({"q1": QRELS["q1"]}, {"q1": RANKINGS["q1"]}, rel_level=1)
    assert per_query["q1"]["map"] == pytest.approx(0.638889, abs=1e-6)
    assert per_query["q1"]["mrr@10"] == pytest.approx(0.5)


def test_mean_agrees_with_the_library_aggregate():
    # The run holds no line for q3; the library then scores q3 as 0 too, as our per-query rows do.
    _, mean = evaluate(QRELS, RANKINGS, rel_level=2)
    library = ir_measures.calc_aggregate(list(measures(2).values()), to_qrels(QRELS), to_run(RANKINGS))
    assert {key: library[measure] for key, measure in measures(2).items()} == pytest.approx(mean)


def test_our_order_wins_over_trec_eval_docid_tie_breaking():
    # Reversed alphabetical order: with tied scores trec_eval would reorder these by docid.
    per_query, _ = evaluate({"q": {"a": 2}}, {"q": ["c", "b", "a"]}, rel_level=2)
    assert per_query["q"]["mrr@10"] == pytest.approx(1 / 3)


def test_queries_without_qrels_are_left_out():
    per_query, mean = evaluate(QRELS, {"q1": RANKINGS["q1"], "unjudged": ["x"]}, rel_level=2)
    assert set(per_query) == {"q1"}
    assert mean["ndcg@10"] == pytest.approx(0.683376, abs=1e-6)


def test_percentile_interpolates_like_numpy():
    assert percentile([4.0, 1.0, 3.0, 2.0], 0.5) == pytest.approx(2.5)
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 0.95) == pytest.approx(4.8)
    assert percentile([], 0.5) == 0.0


def test_dataset_loader_reads_trec_qrels_candidates_and_titles(tmp_path):
    (tmp_path / "queries.tsv").write_text("1\tfirst query\n2\tsecond query\n3\tno candidates\n")
    (tmp_path / "qrels.txt").write_text("1 0 a 1\n1 0 b 0\n2 Q0 c 1\n3 0 d 1\n")
    (tmp_path / "candidates.top2.jsonl").write_text(
        '{"qid": "1", "query": "first query", "candidates": [{"docid": "b", "rank": 2, "text": "B"},'
        ' {"docid": "a", "rank": 1, "title": "T", "text": "A"}]}\n'
        '{"qid": "2", "query": "second query", "candidates": [{"docid": "c", "rank": 1, "text": "C"}]}\n'
    )
    dataset = load_dataset(tmp_path)
    assert [query.qid for query in dataset.queries] == ["1", "2"]  # query 3 has no candidates
    assert [(c.docid, c.text) for c in dataset.queries[0].candidates] == [("a", "T\nA"), ("b", "B")]
    assert dataset.qrels["2"] == {"c": 1}
    assert dataset.relevance_level == 1
    (tmp_path / "qrels.txt").write_text("1 0 a 3\n2 0 c 1\n")
    assert load_dataset(tmp_path).relevance_level == 2
