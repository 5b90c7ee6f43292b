"""IR measures through ir-measures (pytrec_eval, i.e. trec_eval underneath), plus latency percentiles.

nDCG@10 uses the graded qrels as gains (trec_eval's linear gain). MRR@10, MAP and Recall@10 are
binary: a document counts as relevant when its grade >= `rel_level` (2 on TREC DL, as the track
does; 1 on binary qrels such as SciFact).

trec_eval breaks score ties by docid, not by our order, so each ranking is handed over with
strictly decreasing scores. Like `trec_eval -c`, a query with an empty ranking counts as 0 rather
than silently leaving the average.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import ir_measures
import numpy as np
from ir_measures import AP, RR, R, nDCG

MEASURE_KEYS = ("ndcg@10", "mrr@10", "map", "recall@10")


def measures(rel_level: int) -> dict[str, object]:
    return {
        "ndcg@10": nDCG @ 10,
        "mrr@10": RR(rel=rel_level) @ 10,
        "map": AP(rel=rel_level),
        "recall@10": R(rel=rel_level) @ 10,
    }


def to_run(rankings: Mapping[str, Sequence[str]]) -> list[ir_measures.ScoredDoc]:
    """Rankings (best first, duplicates dropped) as scored docs whose scores keep that order."""
    run = []
    for qid, docids in rankings.items():
        unique = list(dict.fromkeys(docids))
        run.extend(ir_measures.ScoredDoc(qid, docid, float(len(unique) - index)) for index, docid in enumerate(unique))
    return run


def to_qrels(qrels: Mapping[str, Mapping[str, int]]) -> list[ir_measures.Qrel]:
    return [ir_measures.Qrel(qid, docid, int(grade)) for qid, docs in qrels.items() for docid, grade in docs.items()]


def evaluate(
    qrels: Mapping[str, Mapping[str, int]], rankings: Mapping[str, Sequence[str]], rel_level: int
) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """(per-query {qid: {measure: value}}, mean over the ranked queries that have qrels)."""
    named = measures(rel_level)
    by_measure = {measure: key for key, measure in named.items()}
    judged = [qid for qid in rankings if qid in qrels]
    per_query = {qid: dict.fromkeys(named, 0.0) for qid in judged}
    selected_qrels = to_qrels({qid: qrels[qid] for qid in judged})
    for metric in ir_measures.iter_calc(list(named.values()), selected_qrels, to_run(rankings)):
        per_query[metric.query_id][by_measure[metric.measure]] = float(metric.value)
    mean = {key: (sum(row[key] for row in per_query.values()) / len(per_query)) if per_query else 0.0
            for key in named}
    return per_query, mean


def percentile(values: Sequence[float], fraction: float) -> float:
    """numpy's linear-interpolation percentile; 0.0 for no values."""
    return float(np.percentile(list(values), fraction * 100)) if len(values) else 0.0
