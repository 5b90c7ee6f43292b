"""`python -m bench choose-fusion` (bench/fusion_choice.py): the rule of docs/bench/FUSION.md applied to
stored runs. The runs here are hand-made so the right answer is known: in half the queries the relevant
candidate is last in the first stage, first by cosine, and the judge ties it with a decoy; in the other
half the judge alone knows it (last by cosine). Only the three signals together find both."""

from __future__ import annotations

import json

from bench.fusion_choice import choose_cascade, lifts_a_lone_find, load_run, rank_settings, report
from bench.replay import TRACE_VERSION, Replay
from tests.support.bench_cli import bench_cli


def _trace(doc_ids, cosine, evidence):
    count = len(doc_ids)
    return {"version": TRACE_VERSION, "doc_ids": doc_ids, "first_scores": [1.0 - i / count for i in range(count)],
            "evidence": evidence, "judged_at_s": [0.1 * (i + 1) for i in range(count)], "by_score": True,
            "fell_back": False, "cut_short": None, "cosine": cosine}


def _run(tmp_path, name):
    dataset, output = tmp_path / f"{name}-data", tmp_path / name
    (output / "runs").mkdir(parents=True)
    dataset.mkdir()
    queries, qrels, records = [], [], []
    for q in range(4):
        docs = [f"q{q}d{i}" for i in range(6)]
        queries.append(f"q{q}\tquestion {q}")
        if q % 2 == 0:
            qrels.append(f"q{q} 0 q{q}d5 1")  # relevant: last in the first stage ...
            cosine = [0.1, 0.2, 0.3, 0.2, 0.1, 0.9]  # ... first by cosine
            evidence = [0.2, 0.9, 0.1, 0.1, 0.1, 0.9]  # the judge ties it with a decoy the first stage ranks 2nd
        else:
            qrels.append(f"q{q} 0 q{q}d3 1")  # the judge alone knows it; last by cosine
            cosine = [0.5, 0.6, 0.4, 0.05, 0.3, 0.2]
            evidence = [0.3, 0.4, 0.2, 0.95, 0.1, 0.1]
        records.append({"qid": f"q{q}", "trace": _trace(docs, cosine, evidence)})
    (dataset / "queries.tsv").write_text("\n".join(queries) + "\n")
    (dataset / "qrels.txt").write_text("\n".join(qrels) + "\n")
    (output / "runs" / "on-test.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return output, dataset


def test_the_rule_picks_a_setting_that_gives_the_cosine_a_share_and_beats_both_baselines(tmp_path):
    runs = [load_run(*_run(tmp_path, "a")), load_run(*_run(tmp_path, "b"))]
    rows, baselines = rank_settings(runs)
    chosen = rows[0]
    assert chosen.eligible and chosen.replay.cosine_weight > 0 and chosen.margin > 0
    # The first stage puts the relevant candidate 6th or 4th (MRR 1/6, 1/4); the chosen setting, 1st.
    assert baselines["a"]["first stage"]["mrr@10"] < 0.25
    assert baselines["a"]["cosine alone"]["mrr@10"] < 1 and baselines["a"]["baseline"]["mrr@10"] < 1
    assert all(score["mrr@10"] == 1.0 for score in chosen.scores)
    # The grid: three methods, judge share 0.1-1.0 and cosine share 0-(1 - judge share) in tenths: 55 each.
    assert sorted({row.replay.method for row in rows}) == ["linear", "rrf", "zscore"] and len(rows) == 3 * 55
    # Ties in the margin go to the smaller judge share, then to rrf, linear, zscore in that order.
    tied = [row for row in rows if row.eligible and abs(row.margin - chosen.margin) < 1e-9]
    assert chosen.replay.weight == min(row.replay.weight for row in tied)
    methods = ["rrf", "linear", "zscore"]
    assert methods.index(chosen.replay.method) == min(
        methods.index(row.replay.method) for row in tied if row.replay.weight == chosen.replay.weight)
    cascade, table = choose_cascade(runs, chosen.replay, baselines)
    assert {(each.focus, each.depth) for each, _, _ in table} == {
        (focus, depth) for focus in ("top", "cut", "disagree") for depth in (4, 5, 6, 8, 10, 12)}
    kept = [each for each, _, shares in table if min(shares) >= 0.9]
    foci = ["top", "cut", "disagree"]
    assert cascade == (min(kept, key=lambda each: (each.depth, foci.index(each.focus))) if kept else chosen.replay)
    text = report(runs)
    assert "Chosen: " in text and "| today: linear w=0.7 |" in text
    assert "| top, stop when sure | " in text and "| cut, stop when sure | " in text


def test_a_setting_must_put_first_what_only_the_judge_finds(tmp_path):
    # 20 candidates judged 0.2, the last of the first stage and of the cosine judged 0.95.
    # linear, judge 0.7, cosine 0.3: it gets 0.7, the cheap leader 0.3. Judge 0.5, cosine 0.3: 0.5 against
    # 0.2 + 0.3, a tie the first stage breaks the other way. rrf ranks the judgement, however sure: the
    # leader's 0.6/62 + 0.4/61 beats its 0.6/61 + 0.4/80.
    assert lifts_a_lone_find(Replay("linear", 0.7, cosine_weight=0.3))
    assert not lifts_a_lone_find(Replay("linear", 0.5, cosine_weight=0.3))
    assert not lifts_a_lone_find(Replay("rrf", 0.6, cosine_weight=0.2)) and lifts_a_lone_find(Replay("rrf", 1.0))
    rows, _ = rank_settings([load_run(*_run(tmp_path, "a"))])
    assert all(not row.eligible for row in rows if row.replay.method == "rrf" and row.replay.weight < 1)
    assert any(row.eligible for row in rows)


def test_the_command_names_a_bad_run_in_one_line(backend, tmp_path):
    app, _ = backend()
    result = bench_cli(app=app, args=["choose-fusion", "--run", str(tmp_path)])
    assert result.exit_code == 2 and "OUTPUT_FOLDER=DATASET_FOLDER" in result.output
    empty = tmp_path / "empty"
    (empty / "runs").mkdir(parents=True)
    result = bench_cli(app=app, args=["choose-fusion", "--run", f"{empty}={tmp_path}"])
    assert result.exit_code == 2 and "no traced reranked records" in result.output
    output, dataset = _run(tmp_path, "c")
    result = bench_cli(app=app, args=["choose-fusion", "--run", f"{output}={dataset}", "--top", "3"])
    assert result.exit_code == 0 and "Chosen: " in result.output, result.output


def test_another_score_mode_is_measured_against_the_baseline_of_todays_mode(tmp_path):
    # Run "a" plays a new score mode; "b" the same queries judged as today's default judges, here by a
    # judge that scores the relevant candidate 1 and the rest 0, so its baseline is perfect.
    other_mode, dataset = _run(tmp_path, "a")
    todays_mode, _ = _run(tmp_path, "b")
    lines = (todays_mode / "runs" / "on-test.jsonl").read_text().splitlines()
    qrels = dict(line.split(" ")[0::2] for line in (dataset / "qrels.txt").read_text().splitlines())
    records = []
    for line in lines:
        record = json.loads(line)
        record["trace"]["evidence"] = [float(doc == qrels[record["qid"]]) for doc in record["trace"]["doc_ids"]]
        records.append(json.dumps(record))
    (todays_mode / "runs" / "on-test.jsonl").write_text("\n".join(records) + "\n")
    alone, measured = load_run(other_mode, dataset), load_run(other_mode, dataset, baseline=todays_mode)
    assert alone.baseline()["mrr@10"] < 1 and measured.baseline()["mrr@10"] == 1.0
    # Every setting's own scores are the new mode's either way; only the yardstick moves.
    (rows_alone, _), (rows, baselines) = rank_settings([alone]), rank_settings([measured])
    assert baselines["a"]["baseline"] == measured.baseline()
    assert {row.replay: row.scores for row in rows} == {row.replay: row.scores for row in rows_alone}
    assert max(row.margin for row in rows) <= 0 < max(row.margin for row in rows_alone)
    assert not any(row.eligible for row in rows if row.scores[0]["mrr@10"] < 1)


def test_a_baseline_run_of_other_queries_is_refused_in_one_line(backend, tmp_path):
    output, dataset = _run(tmp_path, "a")
    other, _ = _run(tmp_path, "b")
    record = json.loads((other / "runs" / "on-test.jsonl").read_text().splitlines()[0])
    (other / "runs" / "on-test.jsonl").write_text(json.dumps(record) + "\n")
    app, _ = backend()
    run = ["choose-fusion", "--run", f"{output}={dataset}"]
    result = bench_cli(app=app, args=[*run, "--baseline-run", str(other)])
    assert result.exit_code == 2 and "its queries are not those of" in result.output, result.output
    assert "Invalid value for --baseline-run" in result.output, result.output
    result = bench_cli(app=app, args=[*run, "--baseline-run", str(tmp_path / "missing")])
    assert result.exit_code == 2 and "--baseline-run" in result.output and "no such folder" in result.output
    result = bench_cli(app=app, args=[*run, "--baseline-run", str(output), "--baseline-run", str(output)])
    assert result.exit_code == 2 and "one per --run" in result.output, result.output
    result = bench_cli(app=app, args=[*run, "--baseline-run", str(output)])
    assert result.exit_code == 0 and "Chosen: " in result.output, result.output


def _write_run(tmp_path, name, traces, relevant):
    """A run folder of these traces (qid -> trace) and its dataset: one relevant doc per query."""
    dataset, output = tmp_path / f"{name}-data", tmp_path / name
    (output / "runs").mkdir(parents=True)
    dataset.mkdir()
    (dataset / "queries.tsv").write_text("".join(f"{qid}\tquestion {qid}\n" for qid in traces))
    (dataset / "qrels.txt").write_text("".join(f"{qid} 0 {doc} 1\n" for qid, doc in relevant.items()))
    (output / "runs" / "on-test.jsonl").write_text(
        "".join(json.dumps({"qid": qid, "trace": trace}) + "\n" for qid, trace in traces.items()))
    return output, dataset


def test_a_wider_pool_judges_the_cheap_orders_first_and_meets_the_cosine_over_either_pool(backend, tmp_path):
    # Today's pool is the first 6 of a wider pool of 12. q0's relevant fact is 9th in the first stage (only
    # the wide pool holds it) and first by cosine; q1's and q2's is first in the first stage, but 7th by
    # cosine behind six facts only the wide pool holds. The judge knows every relevant fact (0.95 against 0.1).
    wide, narrow, relevant = {}, {}, {}
    shapes = [(8, [0.3] * 8 + [0.9] + [0.3] * 3)] + [(0, [0.5] + [0.2] * 5 + [0.8] * 6)] * 2
    for q, (place, cosine) in enumerate(shapes):
        docs = [f"q{q}d{i}" for i in range(12)]
        relevant[f"q{q}"] = docs[place]
        evidence = [0.95 if i == place else 0.1 for i in range(12)]
        wide[f"q{q}"] = _trace(docs, cosine, evidence)
        narrow[f"q{q}"] = _trace(docs[:6], cosine[:6], evidence[:6])
    wide_out, dataset = _write_run(tmp_path, "wide", wide, relevant)
    narrow_out, _ = _write_run(tmp_path, "narrow", narrow, relevant)
    measured = load_run(wide_out, dataset, baseline=narrow_out)
    # The cosine alone: q0 1st, q1 and q2 7th over the wide pool; missed, 1st and 1st over today's. Today's wins.
    over_wide, over_narrow = load_run(wide_out, dataset).cosine_alone(), load_run(narrow_out, dataset).cosine_alone()
    assert over_narrow["ndcg@10"] > over_wide["ndcg@10"] and measured.cosine_alone() == over_narrow
    assert load_run(narrow_out, dataset, baseline=wide_out).cosine_alone() == over_narrow  # either way round
    # Every setting judges the cheap order's first 6 only: with the cosine alone as the cheap order, q1's
    # and q2's relevant fact is 7th there, never judged, and stays 7th; judged whole, the judge lifts it.
    rows, baselines = rank_settings([measured], judge_depth=6)
    assert {row.replay.depth for row in rows} == {6}
    by_setting = {row.replay: row.scores[0] for row in rows}
    cosine_led = Replay("linear", 0.7, cosine_weight=0.3, depth=6)
    assert by_setting[cosine_led] == measured.replayed(cosine_led)
    judged_whole = measured.replayed(Replay("linear", 0.7, cosine_weight=0.3))
    assert by_setting[cosine_led]["mrr@10"] < judged_whole["mrr@10"] == 1
    # The cascade step weighs depths under the judged 6 only; the command takes the depth as an option.
    chosen = rows[0].replay
    _, table = choose_cascade([measured], chosen, baselines)
    assert {each.depth for each, _, _ in table} == {4, 5}
    app, _ = backend()
    result = bench_cli(app=app, args=["choose-fusion", "--run", f"{wide_out}={dataset}",
                                      "--baseline-run", str(narrow_out), "--judge-depth", "6"])
    assert result.exit_code == 0 and ", judge 6 |" in result.output, result.output


def test_log_odds_tell_apart_judgements_near_one_end_that_the_probability_squeezes(backend, tmp_path):
    # The decoy is judged 0.05, the relevant fact 0.02 and the rest 0.001; only the cosine prefers the relevant
    # one. Min-max over probabilities puts it at 0.39 of the judge's span, below the decoy by more than the
    # cosine's share makes up; over log-odds at 0.76 (odds of 1 to 19 and 1 to 49, both far above the rest's
    # 1 to 999), and linear, judge 0.7, cosine 0.3 puts it first.
    trace = _trace(["decoy", "rel", "o1", "o2"], [0.0, 1.0, 0.5, 0.5], [0.05, 0.02, 0.001, 0.001])
    output, dataset = _write_run(tmp_path, "run", {"q0": trace}, {"q0": "rel"})
    setting = Replay("linear", 0.7, cosine_weight=0.3)
    as_stored, as_log_odds = load_run(output, dataset), load_run(output, dataset, log_odds=True)
    assert as_stored.replayed(setting)["mrr@10"] == 0.5 and as_log_odds.replayed(setting)["mrr@10"] == 1.0
    # The yardstick stays the stored probabilities; a judge's own order (and so rank fusion) does not move.
    assert as_log_odds.baseline() == as_stored.baseline()
    for same in (Replay("none", 1.0), Replay("rrf", 0.6, cosine_weight=0.2)):
        assert as_log_odds.replayed(same) == as_stored.replayed(same)
    assert json.loads((output / "runs" / "on-test.jsonl").read_text())["trace"]["evidence"][0] == 0.05
    app, _ = backend()
    result = bench_cli(app=app, args=["choose-fusion", "--run", f"{output}={dataset}",
                                      "--judge-log-odds"])
    assert result.exit_code == 0 and "Chosen: " in result.output, result.output
