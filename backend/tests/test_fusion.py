"""Fusion of the judge's evidence with the first stage (graphiti_llm_rerank/fusion.py), on hand-made lists whose
answers are worked out by hand in the comments; then through graph search, where the hits must be
what the same arithmetic gives on the search's own candidates."""

from __future__ import annotations

import pytest

from app.graph.runtime import GraphitiAdapter
from graphiti_llm_rerank.fusion import RRF_K, cascade_positions, cheap_order, disputed_positions, first_stage_share, fuse
from tests.support.facts import WATER_FACTS
from tests.support.scripted_llm import judge

FIRST = [0.9, 0.8, 0.7]  # first-stage scores: position 0 is the first stage's best


def order(fused):
    return [hit.position for hit in fused]


def scores(fused):
    return [hit.score for hit in fused]


def test_none_is_the_judges_order_with_its_scores():
    # Judge: 0 -> 0.1, 1 -> 0.5, 2 -> 0.9. Its order is 2, 1, 0 and the scores are its own.
    fused = fuse(FIRST, {0: 0.1, 1: 0.5, 2: 0.9}, method="none")
    assert order(fused) == [2, 1, 0]
    assert scores(fused) == [0.9, 0.5, 0.1]
    assert [hit.judge_score for hit in fused] == [0.9, 0.5, 0.1]


def test_rrf_of_two_opposite_orders_keeps_the_ends_and_sinks_the_middle():
    # Judge ranks: 2 -> 1, 1 -> 2, 0 -> 3. First-stage ranks: 0 -> 1, 1 -> 2, 2 -> 3. Weight 0.5:
    #   0: 0.5/(60+3) + 0.5/(60+1) = 0.0079365 + 0.0081967 = 0.0161332
    #   1: 0.5/(60+2) + 0.5/(60+2) = 1/62                   = 0.0161290
    #   2: 0.5/(60+1) + 0.5/(60+3) = the same as 0          = 0.0161332
    # 0 and 2 tie; ties break by first-stage position, so 0 comes first.
    fused = fuse(FIRST, {0: 0.1, 1: 0.5, 2: 0.9}, method="rrf", weight=0.5)
    assert RRF_K == 60
    assert order(fused) == [0, 2, 1]
    assert scores(fused) == pytest.approx([0.5 / 63 + 0.5 / 61, 0.5 / 61 + 0.5 / 63, 1 / 62])
    assert scores(fused)[0] == pytest.approx(0.0161332, abs=1e-7) and scores(fused)[2] == pytest.approx(0.0161290, abs=1e-7)


def test_rrf_weight_leans_towards_the_judge():
    # Weight 0.8, same lists:
    #   0: 0.8/63 + 0.2/61 = 0.0126984 + 0.0032787 = 0.0159771
    #   1: 0.8/62 + 0.2/62 = 1/62                  = 0.0161290
    #   2: 0.8/61 + 0.2/63 = 0.0131148 + 0.0031746 = 0.0162894
    fused = fuse(FIRST, {0: 0.1, 1: 0.5, 2: 0.9}, method="rrf", weight=0.8)
    assert order(fused) == [2, 1, 0]
    assert scores(fused) == pytest.approx([0.0162894, 0.0161290, 0.0159771], abs=1e-7)
    # The two ends of the weight: 0 is the first stage alone, 1 the judge alone.
    assert order(fuse(FIRST, {0: 0.1, 1: 0.5, 2: 0.9}, method="rrf", weight=0.0)) == [0, 1, 2]
    assert order(fuse(FIRST, {0: 0.1, 1: 0.5, 2: 0.9}, method="rrf", weight=1.0)) == [2, 1, 0]


def test_linear_mixes_min_max_normalised_scores():
    # First stage [1.0, 0.6, 0.2] -> normalised 1, 0.5, 0. Judge {0: 0.1, 1: 0.9, 2: 0.5} -> 0, 1, 0.5.
    # Weight 0.5:  0: 0.5*0 + 0.5*1 = 0.5;  1: 0.5*1 + 0.5*0.5 = 0.75;  2: 0.5*0.5 + 0.5*0 = 0.25.
    fused = fuse([1.0, 0.6, 0.2], {0: 0.1, 1: 0.9, 2: 0.5}, method="linear", weight=0.5)
    assert order(fused) == [1, 0, 2]
    assert scores(fused) == pytest.approx([0.75, 0.5, 0.25])
    assert [hit.judge_score for hit in fused] == [0.9, 0.1, 0.5]


def test_linear_reads_a_rank_strategy_by_rank_not_by_its_score_gaps():
    # First stage [1.0, 0.9, 0.0] -> 1, 0.9, 0. Judge {0: 0.0, 1: 0.1, 2: 1.0}, weight 0.6.
    # By score: judge normalised 0, 0.1, 1:
    #   0: 0.6*0 + 0.4*1 = 0.4;  1: 0.6*0.1 + 0.4*0.9 = 0.42;  2: 0.6*1 + 0.4*0 = 0.6   -> 2, 1, 0
    # By rank: judge ranks 2 -> 1, 1 -> 2, 0 -> 3, as values 1, 0.5, 0:
    #   0: 0.6*0 + 0.4*1 = 0.4;  1: 0.6*0.5 + 0.4*0.9 = 0.66; 2: 0.6*1 + 0.4*0 = 0.6   -> 1, 2, 0
    first, evidence = [1.0, 0.9, 0.0], {0: 0.0, 1: 0.1, 2: 1.0}
    by_score = fuse(first, evidence, method="linear", weight=0.6, by_score=True)
    by_rank = fuse(first, evidence, method="linear", weight=0.6, by_score=False)
    assert order(by_score) == [2, 1, 0] and scores(by_score) == pytest.approx([0.6, 0.42, 0.4])
    assert order(by_rank) == [1, 2, 0] and scores(by_rank) == pytest.approx([0.66, 0.6, 0.4])


def test_zscore_keeps_one_outlying_first_stage_score_from_squeezing_the_others():
    # First stage [1.0, 0.3, 0.2, 0.1]: mean 0.4, deviations .6, -.1, -.2, -.3, variance .125, sd 1/(2*sqrt 2):
    #   z = 1.6971, -0.2828, -0.5657, -0.8485.  Min-max: 1, 2/9, 1/9, 0 (the first hit squeezes the rest).
    # Judge {0: .2, 1: .9, 2: .6, 3: 1.0}: mean .675, deviations -.475, .225, -.075, .325, variance .096875,
    #   sd .311247: z = -1.5261, 0.7229, -0.2410, 1.0442.  Min-max: 0, .875, .5, 1.
    # Weight 0.5. linear: 0: .5,  1: .4375 + .1111 = .5486,  2: .25 + .0556 = .3056,  3: .5 + 0 = .5
    #   -> 1, 0, 3, 2 (0 and 3 tie; 0 is the first stage's better).
    # zscore: 0: .5 * (1.6971 - 1.5261) = .0855,  1: .5 * (-.2828 + .7229) = .2200,
    #   2: .5 * (-.5657 - .2410) = -.4033,  3: .5 * (-.8485 + 1.0442) = .0978  -> 1, 3, 0, 2.
    first, evidence = [1.0, 0.3, 0.2, 0.1], {0: 0.2, 1: 0.9, 2: 0.6, 3: 1.0}
    linear = fuse(first, evidence, method="linear", weight=0.5)
    assert order(linear) == [1, 0, 3, 2] and scores(linear) == pytest.approx([0.5486, 0.5, 0.5, 0.3056], abs=1e-4)
    zscore = fuse(first, evidence, method="zscore", weight=0.5)
    assert order(zscore) == [1, 3, 0, 2]
    assert scores(zscore) == pytest.approx([0.2200, 0.0978, 0.0855, -0.4033], abs=1e-4)
    assert [hit.judge_score for hit in zscore] == [0.9, 1.0, 0.2, 0.6]
    # Signals with no spread count 0 for everyone, as in linear: the judge alone decides.
    flat = fuse([0.5, 0.5, 0.5, 0.5], evidence, method="zscore", weight=0.5)
    assert order(flat) == [3, 1, 2, 0]


def test_a_judge_that_cannot_tell_apart_leaves_linear_to_the_first_stage():
    # Every judge score 0.7: normalised, all 0; the first stage alone decides (0.5 * 1, 0.5 * 0.5, 0).
    fused = fuse([1.0, 0.6, 0.2], {0: 0.7, 1: 0.7, 2: 0.7}, method="linear", weight=0.5)
    assert order(fused) == [0, 1, 2] and scores(fused) == pytest.approx([0.5, 0.25, 0.0])


def test_unjudged_candidates_keep_their_first_stage_place():
    # Five candidates; the judge finished 0, 1 and 3 (3 from the cache); 2 and 4 are unjudged.
    # The judged hold places 0, 1, 3 and take them in the judge's order 1 (0.9), 3 (0.6), 0 (0.2);
    # 2 and 4 stay at places 2 and 4 and carry the score of the hit above them.
    fused = fuse([0.9, 0.8, 0.7, 0.6, 0.5], {0: 0.2, 1: 0.9, 3: 0.6}, method="none")
    assert order(fused) == [1, 3, 2, 0, 4]
    assert scores(fused) == [0.9, 0.6, 0.6, 0.2, 0.2]
    assert [hit.judge_score for hit in fused] == [0.9, 0.6, None, 0.2, None]


def test_an_unjudged_candidate_at_the_top_carries_the_best_fused_score():
    # Judged: 2 -> 0.5, 3 -> 0.7. Places 2, 3 get 3 then 2; places 0 and 1 keep 0 and 1 at 0.7.
    fused = fuse([0.9, 0.8, 0.7, 0.6], {2: 0.5, 3: 0.7}, method="none")
    assert order(fused) == [0, 1, 3, 2] and scores(fused) == [0.7, 0.7, 0.7, 0.5]


def test_rrf_over_a_partial_judgement_uses_first_stage_ranks_of_the_whole_list():
    # Four candidates, 0 and 1 judged: 0 -> 0.2, 1 -> 0.8 (judge ranks 1 -> 1, 0 -> 2). Weight 0.5:
    #   0: 0.5/(60+2) + 0.5/(60+1) = 0.0080645 + 0.0081967 = 0.0162612
    #   1: 0.5/(60+1) + 0.5/(60+2) = the same                = 0.0162612   -> tie, 0 first
    # Places 2 and 3 keep candidates 2 and 3.
    fused = fuse([0.9, 0.8, 0.7, 0.6], {0: 0.2, 1: 0.8}, method="rrf", weight=0.5)
    assert order(fused) == [0, 1, 2, 3]
    assert scores(fused)[0] == pytest.approx(0.0162612, abs=1e-7) and scores(fused)[1] == scores(fused)[0]


def test_no_evidence_is_the_first_stage_with_its_scores():
    assert [(hit.position, hit.score, hit.judge_score) for hit in fuse(FIRST, {}, method="rrf")] == [
        (0, 0.9, None), (1, 0.8, None), (2, 0.7, None)]
    assert fuse([], {}, method="linear") == []


@pytest.mark.parametrize("method, weight", [("borda", 0.5), ("rrf", 1.5), ("linear", -0.1)])
def test_bad_settings_are_refused(method, weight):
    with pytest.raises(ValueError):
        fuse(FIRST, {0: 1.0}, method=method, weight=weight)


def test_every_position_comes_back_once_and_scores_never_rise():
    first = [1 / (index + 1) for index in range(12)]
    evidence = {index: ((index * 7) % 5) / 5 for index in (0, 2, 3, 5, 8, 11)}
    for method in ("none", "rrf", "linear", "zscore"):
        for by_score in (True, False):
            fused = fuse(first, evidence, method=method, weight=0.3, by_score=by_score)
            assert sorted(order(fused)) == list(range(12))
            assert scores(fused) == sorted(scores(fused), reverse=True)
            unjudged = [place for place, hit in enumerate(fused) if hit.judge_score is None]
            assert unjudged == [1, 4, 6, 7, 9, 10] == [fused[place].position for place in unjudged]


def test_the_cosine_is_a_third_share_in_rrf_and_linear():
    # Candidates 0, 1, 2; cosine 0.2, 0.9, 0.5 ranks them 3, 1, 2. Judge 0.1, 0.5, 0.9 ranks them 3, 2, 1.
    cosine = [0.2, 0.9, 0.5]
    evidence = {0: 0.1, 1: 0.5, 2: 0.9}
    rrf = fuse(FIRST, evidence, method="rrf", weight=0.4, cosine=cosine, cosine_weight=0.4)
    by_hand = {0: 0.4 / (RRF_K + 3) + 0.4 / (RRF_K + 3) + 0.2 / (RRF_K + 1),
               1: 0.4 / (RRF_K + 2) + 0.4 / (RRF_K + 1) + 0.2 / (RRF_K + 2),
               2: 0.4 / (RRF_K + 1) + 0.4 / (RRF_K + 2) + 0.2 / (RRF_K + 3)}
    assert order(rrf) == [1, 2, 0]  # 1 and 2 have the same judge + cosine ranks; 1 is the first stage's better
    assert scores(rrf) == pytest.approx([by_hand[1], by_hand[2], by_hand[0]])
    # linear, min-max over the judged three: judge 0, .5, 1; cosine 0, 1, 3/7; first stage 1, .5, 0.
    linear = fuse(FIRST, evidence, method="linear", weight=0.5, cosine=cosine, cosine_weight=0.3)
    by_hand = {0: 0.5 * 0 + 0.3 * 0 + 0.2 * 1, 1: 0.5 * 0.5 + 0.3 * 1 + 0.2 * 0.5, 2: 0.5 * 1 + 0.3 * 3 / 7 + 0.2 * 0}
    assert order(linear) == [1, 2, 0] and scores(linear) == pytest.approx([by_hand[1], by_hand[2], by_hand[0]])
    # Without a cosine share the cosine changes nothing.
    assert fuse(FIRST, evidence, method="rrf", weight=0.7, cosine=cosine) == fuse(FIRST, evidence, method="rrf", weight=0.7)


@pytest.mark.parametrize("method", ["linear", "zscore"])
@pytest.mark.parametrize("weight, cosine_weight", [(0.8, 0.2), (0.9, 0.1), (0.7, 0.3)])
def test_shares_summing_to_one_leave_ties_to_the_first_stages_order(method, weight, cosine_weight):
    # In floating point 1 - 0.8 - 0.2 is below 0; the first stage's share must be exactly 0, not negative.
    assert first_stage_share(weight, cosine_weight) == 0.0
    # Candidates 0 and 1 tie on judge and cosine; the first stage's order must break the tie, as position does.
    first = [0.9, 0.8, 0.7]
    fused = fuse(first, {0: 0.1, 1: 0.1, 2: 0.9}, method=method, weight=weight,
                 cosine=[0.1, 0.1, 0.9], cosine_weight=cosine_weight)
    assert order(fused) == [2, 0, 1]


def test_the_first_stage_keeps_what_the_judge_and_the_cosine_leave():
    assert first_stage_share(0.5, 0.3) == pytest.approx(0.2) and first_stage_share(0.6) == pytest.approx(0.4)


def test_the_cheap_order_fuses_first_stage_and_cosine_in_the_full_fusions_proportion():
    first = [0.9, 0.8, 0.7, 0.6]
    cosine = [0.1, 0.2, 0.9, 0.3]  # cosine ranks 4, 3, 1, 2
    assert cheap_order(first, None, method="rrf", weight=0.5, cosine_weight=0.0) == [0, 1, 2, 3]
    assert cheap_order(first, cosine, method="rrf", weight=0.5, cosine_weight=0.0) == [0, 1, 2, 3]
    # Judge 0.5, cosine 0.4: the cosine has 0.8 of the rest. 2: .8/61 + .2/63 beats 0: .8/64 + .2/61.
    assert cheap_order(first, cosine, method="rrf", weight=0.5, cosine_weight=0.4) == [2, 3, 1, 0]
    # All of the rest to the cosine: the cosine's own order.
    assert cheap_order(first, cosine, method="linear", weight=0.6, cosine_weight=0.4) == [2, 3, 1, 0]


def test_unjudged_candidates_keep_their_place_in_the_cheap_order():
    first = [0.9, 0.8, 0.7, 0.6, 0.5]
    cosine = [0.1, 0.2, 0.9, 0.3, 0.8]
    # The judge's share 0.6 leaves the cheap order all to the cosine (0.4 of the remaining 0.4).
    places = cheap_order(first, cosine, method="rrf", weight=0.6, cosine_weight=0.4)
    assert places == [2, 4, 3, 1, 0]
    # The judge saw the first two of the cheap order only (a cascade of depth 2) and prefers 4.
    fused = fuse(first, {2: 0.2, 4: 0.9}, method="rrf", weight=0.6, cosine=cosine, cosine_weight=0.4)
    assert order(fused) == [4, 2, 3, 1, 0]
    assert [hit.judge_score for hit in fused] == [0.9, 0.2, None, None, None]
    assert scores(fused) == sorted(scores(fused), reverse=True)
    # Judged nothing (a failed call): the first stage's own order and scores, as with the reranker off.
    unjudged = fuse(first, {}, method="rrf", weight=0.6, cosine=cosine, cosine_weight=0.4)
    assert order(unjudged) == [0, 1, 2, 3, 4] and scores(unjudged) == first


def test_a_cascade_asks_about_the_first_few_or_about_the_few_around_the_cut_nearest_first():
    places = [5, 3, 8, 0, 9, 1, 7, 2, 6, 4]  # a cheap order of ten candidates
    assert cascade_positions(places, 4, cut=4, focus="top") == [5, 3, 8, 0]
    # Around the cut after the 4th place: the 4th and 5th first, then the 3rd and 6th.
    assert cascade_positions(places, 4, cut=4, focus="cut") == [0, 9, 8, 1]
    assert cascade_positions(places, 3, cut=4, focus="cut") == [0, 9, 8]
    # The window stays inside the list at either end.
    assert cascade_positions(places, 4, cut=1, focus="cut") == [5, 3, 8, 0]
    assert cascade_positions(places, 4, cut=10, focus="cut") == [4, 6, 2, 7]
    # No cascade: depth 0, or as many as there are.
    assert cascade_positions(places, 0, cut=4, focus="cut") is None
    assert cascade_positions(places, 10, cut=4, focus="top") is None
    with pytest.raises(ValueError, match="focus"):
        cascade_positions(places, 4, cut=4, focus="middle")


def test_a_cascade_where_the_cheap_signals_disagree_asks_first_about_what_one_returns_and_the_other_not():
    # Six candidates in first-stage order; the cosine ranks them 3, 1, 6, 2, 4, 5 (1 = closest).
    cosine = [0.5, 0.9, 0.1, 0.7, 0.4, 0.3]
    places = [1, 0, 3, 2, 4, 5]  # a cheap order of both
    # A cut of 3: the first stage returns 0, 1, 2, the cosine 1, 3, 0: they disagree about 2 and 3.
    assert disputed_positions(cosine, 3) == [2, 3]
    assert cascade_positions(places, 3, cut=3, focus="disagree", cosine=cosine) == [3, 2, 1]
    assert cascade_positions(places, 1, cut=3, focus="disagree", cosine=cosine) == [3]
    # A cut of 2: the first stage returns 0, 1, the cosine 1, 3.
    assert cascade_positions(places, 3, cut=2, focus="disagree", cosine=cosine) == [0, 3, 1]
    # Where they agree on the whole answer, the cheap order's first are asked, as with `top`.
    agreeing = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4]
    assert disputed_positions(agreeing, 3) == []
    assert cascade_positions(places, 3, cut=3, focus="disagree", cosine=agreeing) == [1, 0, 3]
    # Without a cosine there is nothing to disagree about.
    assert cascade_positions(places, 3, cut=3, focus="disagree") == cascade_positions(places, 3, cut=3, focus="top")
    assert cascade_positions(places, 6, cut=3, focus="disagree", cosine=cosine) is None


@pytest.mark.parametrize("weight, cosine_weight", [(0.7, 0.4), (0.5, -0.1), (0.2, 1.1)])
def test_shares_over_one_are_refused(weight, cosine_weight):
    with pytest.raises(ValueError, match="cosine"):
        fuse(FIRST, {0: 1.0}, method="rrf", weight=weight, cosine=[0.1, 0.2, 0.3], cosine_weight=cosine_weight)


# -- through graph search ------------------------------------------------------------------------

QUERY = "harbor water utility reservoir town"


@pytest.mark.parametrize("method", ["rrf", "linear", "zscore"])
def test_graph_search_answers_the_fused_order_of_its_own_candidates(backend, scripted_llm, water_graph, method):
    # A judge with distinct scores that disagrees with the first stage: alphabetical order.
    alphabetical = sorted(fact["fact"] for fact in WATER_FACTS)
    scripted_llm.responder = judge(lambda query, passage: 0.9 - 0.1 * alphabetical.index(passage))
    app, client = backend(RERANKER_PROVIDER="ollama", RERANKER_BASE_URL=scripted_llm.base_url,
                          RERANKER_MODEL="judge-model", RERANKER_SCORE_MODE="logprobs", RERANKER_TIMEOUT_S=5,
                          RERANKER_FUSION=method, RERANKER_FUSION_WEIGHT=0.7,
                          RERANKER_COSINE_WEIGHT=0, RERANKER_PASSAGE_TIME="off")  # the judge knows facts by text
    outcome = GraphitiAdapter(app.config["APP_CONFIG"]).graph.search(water_graph, QUERY, limit=4)
    trace = outcome.trace["edges"]

    assert len(trace.passages) == 8 and outcome.reranked and outcome.fusion == method
    assert (outcome.judged, outcome.candidates) == (8, 8)
    # The judge's evidence is its own score of each candidate, in the search's first-stage order.
    assert trace.judgement.evidence == pytest.approx(
        {position: 0.9 - 0.1 * alphabetical.index(text) for position, text in enumerate(trace.passages)})
    expected = fuse(trace.first_scores, trace.judgement.evidence, method=method, weight=0.7, by_score=True)
    assert [(hit.fact, hit.score, hit.first_stage_rank, hit.rerank_score) for hit in outcome.edges] == [
        (trace.passages[hit.position], hit.score, hit.position + 1, hit.judge_score) for hit in expected[:4]]
    assert [hit.first_stage_score for hit in outcome.edges] == [trace.first_scores[hit.position] for hit in expected[:4]]
    if method == "rrf":  # by hand for the top hit: 0.7/(60 + judge rank) + 0.3/(60 + first-stage rank)
        top = outcome.edges[0]
        judge_rank = alphabetical.index(top.fact) + 1
        assert top.score == pytest.approx(0.7 / (60 + judge_rank) + 0.3 / (60 + top.first_stage_rank))

    body = client.post(f"/api/graph/{water_graph}/search", json={"query": QUERY, "limit": 4}).get_json()
    assert (body["judged"], body["candidates"], body["fusion"], body["reranked"]) == (8, 8, method, True)
    assert "trace" not in body


def test_with_the_reranker_off_nothing_is_judged(backend, water_graph):
    _, client = backend(RERANKER_PROVIDER="none")
    body = client.post(f"/api/graph/{water_graph}/search", json={"query": QUERY, "limit": 4}).get_json()
    assert (body["judged"], body["candidates"], body["fusion"], body["reranked"]) == (0, 4, None, False)
    assert all(edge["rerank_score"] is None and edge["score"] == edge["first_stage_score"] for edge in body["edges"])


def _cascade_search(backend, scripted_llm, graph_id, score, limit, **settings):
    """One search of QUERY whose judge answers `score(how many it has been asked so far)`: the API
    client, the search's outcome and edge trace, the passages asked in order, and the cheap order."""
    asked = []

    def answer(query, passage):
        asked.append(passage)
        return score(len(asked))

    scripted_llm.responder = judge(answer)
    app, client = backend(RERANKER_PROVIDER="ollama", RERANKER_BASE_URL=scripted_llm.base_url,
                          RERANKER_MODEL="judge-model", RERANKER_SCORE_MODE="logprobs", RERANKER_TIMEOUT_S=5,
                          RERANKER_MAX_PARALLEL=1, **settings)
    outcome = GraphitiAdapter(app.config["APP_CONFIG"]).graph.search(graph_id, QUERY, limit=limit)
    trace = outcome.trace["edges"]
    places = cheap_order(trace.first_scores, trace.cosine, method=settings["RERANKER_FUSION"],
                         weight=settings["RERANKER_FUSION_WEIGHT"], cosine_weight=settings["RERANKER_COSINE_WEIGHT"])
    return client, outcome, trace, asked, places


def test_a_cascade_asks_the_judge_about_the_cheap_orders_first_few_and_fuses_the_cosine(
        backend, scripted_llm, water_graph):
    client, outcome, trace, asked, places = _cascade_search(
        backend, scripted_llm, water_graph, lambda count: 0.9 - 0.05 * count, limit=4, RERANKER_FUSION="rrf",
        RERANKER_FUSION_WEIGHT=0.5, RERANKER_COSINE_WEIGHT=0.3, RERANKER_JUDGE_DEPTH=3)

    assert len(trace.passages) == 8 and len(trace.cosine) == 8 and all(-1 <= c <= 1 for c in trace.cosine)
    # Only the cheap order's first three were sent to the model; the answer says so.
    assert sorted(asked) == sorted(trace.passages[p] for p in places[:3])
    assert set(trace.judgement.judged_at_s) == set(places[:3])
    assert (outcome.judged, outcome.candidates) == (3, 8)
    expected = fuse(trace.first_scores, trace.judgement.evidence, method="rrf", weight=0.5, by_score=True,
                    cosine=trace.cosine, cosine_weight=0.3)
    assert [hit.fact for hit in outcome.edges] == [trace.passages[hit.position] for hit in expected[:4]]
    assert [hit.rerank_score is not None for hit in outcome.edges] == [
        hit.position in places[:3] for hit in expected[:4]]
    body = client.post(f"/api/graph/{water_graph}/search", json={"query": QUERY, "limit": 4}).get_json()
    assert (body["judged"], body["candidates"]) == (3, 8)


def test_a_cascade_around_the_cut_asks_the_judge_nearest_the_cut_first_and_leaves_the_leaders_in_place(
        backend, scripted_llm, water_graph):
    # The judge's favourite is the last one asked.
    client, outcome, trace, asked, places = _cascade_search(
        backend, scripted_llm, water_graph, lambda count: 0.9 if count == 4 else 0.1, limit=4,
        RERANKER_FUSION="linear", RERANKER_FUSION_WEIGHT=0.6, RERANKER_COSINE_WEIGHT=0.2, RERANKER_JUDGE_DEPTH=4,
        RERANKER_JUDGE_FOCUS="cut")

    # Eight candidates, four returned: the cheap order's 4th and 5th were asked first, then the 3rd and 6th.
    assert asked == [trace.passages[places[index]] for index in (3, 4, 2, 5)]
    assert (outcome.judged, outcome.candidates) == (4, 8)
    # The first two keep their places unjudged; the judge's favourite (asked last) moves up to the 3rd.
    assert [hit.fact for hit in outcome.edges[:2]] == [trace.passages[places[0]], trace.passages[places[1]]]
    assert [hit.rerank_score is None for hit in outcome.edges] == [True, True, False, False]
    assert outcome.edges[2].fact == trace.passages[places[5]]
    body = client.post(f"/api/graph/{water_graph}/search", json={"query": QUERY, "limit": 4}).get_json()
    assert (body["judged"], body["candidates"]) == (4, 8)


def test_a_cascade_where_the_cheap_signals_disagree_asks_the_judge_about_those_first(
        backend, scripted_llm, water_graph):
    _, outcome, trace, asked, places = _cascade_search(
        backend, scripted_llm, water_graph, lambda count: 0.5, limit=5, RERANKER_FUSION="linear",
        RERANKER_FUSION_WEIGHT=0.5, RERANKER_COSINE_WEIGHT=0.3, RERANKER_JUDGE_DEPTH=4, RERANKER_JUDGE_FOCUS="disagree")

    disputed = disputed_positions(trace.cosine, 5)
    # The stored vectors and the first stage disagree about this answer's last places (5th and 6th).
    assert disputed and len(disputed) < 4
    expected = [p for p in places if p in disputed] + [p for p in places if p not in disputed][:4 - len(disputed)]
    assert expected != places[:4]  # what the judge reads is not what `top` would have it read
    assert asked == [trace.passages[position] for position in expected]
    assert sorted(trace.judgement.judged_at_s) == sorted(expected) and outcome.judged == 4
