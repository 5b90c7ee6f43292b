"""`bench rerank` end to end on the scripted server: estimates, resumption, the cost gate, outputs.

The hand-made dataset grades its passages in their text ("grade3" ... "grade0"), and the scripted
judge scores by that grade, so a working pointwise rerank is a perfect ranking (nDCG@10 = 1) while
the first-stage order, which puts the best passages last, is not.
"""

from __future__ import annotations

import json

import pytest

from bench.estimate import ConfirmationRefused
from bench.rerankers import parse_strategies, with_model_options
from bench.runner import RerankBenchArgs, run_rerank_bench, store_key
from app.config import Config
from tests.support.scripted_llm import delay, garbage, judge, unused_base_url
from tests.support.scripted_rankers import listwise_reply, ranking_llm
from tests.support.bench_cli import bench_cli

GRADE_SCORE = {"grade3": 0.9, "grade2": 0.6, "grade1": 0.3, "grade0": 0.05}
QUERIES = {"q1": "first topic", "q2": "second topic", "q3": "third topic"}
# First-stage order: worst first. q1 holds a duplicate text (two docids), scored once.
CANDIDATES = {
    "q1": [("a0", "grade0 alpha"), ("a0b", "grade0 alpha"), ("a1", "grade1 alpha"), ("a3", "grade3 alpha")],
    "q2": [("b0", "grade0 beta"), ("b2", "grade2 beta"), ("b3", "grade3 beta")],
    "q3": [("c0", "grade0 gamma"), ("c1", "grade1 gamma"), ("c2", "grade2 gamma"), ("c3", "grade3 gamma")],
}
DISTINCT_TEXTS = {"q1": 3, "q2": 3, "q3": 4}


def relevance(query: str, passage: str) -> float:
    return next(score for word, score in GRADE_SCORE.items() if word in passage)


@pytest.fixture
def dataset(tmp_path):
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "queries.tsv").write_text("".join(f"{qid}\t{text}\n" for qid, text in QUERIES.items()))
    (folder / "qrels.txt").write_text("".join(
        f"{qid} 0 {docid} {text[5]}\n" for qid, items in CANDIDATES.items() for docid, text in items))
    (folder / "candidates.jsonl").write_text("".join(
        json.dumps({"qid": qid, "query": QUERIES[qid], "candidates": [
            {"docid": docid, "rank": rank, "text": text} for rank, (docid, text) in enumerate(items, start=1)]}) + "\n"
        for qid, items in CANDIDATES.items()))
    return folder


def bench_args(dataset, output, base_url, strategies="original,pointwise:logprobs,pointwise:json", concurrency=2,
               base: Config | None = None, **overrides):
    config = with_model_options(base or Config(), base_url=base_url, model="scripted", concurrency=concurrency,
                                timeout_s=10, deadline_s=30)
    values = dict(dataset=dataset.resolve(), output=output, strategies=parse_strategies(strategies, "logprobs"),
                  config=config, yes=True)
    values.update(overrides)
    return RerankBenchArgs(**values)


def estimated_total(lines: list[str]) -> int:
    total = next(line for line in lines if line.strip().startswith("total"))
    return int(total.split()[1])


def test_estimates_equal_observed_calls_and_every_output_is_written(dataset, tmp_path, scripted_llm):
    scripted_llm.responder = judge(relevance)
    lines: list[str] = []
    results = run_rerank_bench(bench_args(dataset, tmp_path / "out", scripted_llm.base_url), echo=lines.append)

    per_mode = sum(DISTINCT_TEXTS.values())  # 10: one request per distinct passage
    assert estimated_total(lines) == 2 * per_mode == scripted_llm.count
    strategies = results["strategies"]
    for label in ("pointwise:logprobs", "pointwise:json"):
        row = strategies[label]
        assert row["calls"] == per_mode and row["queries"] == 3
        assert row["estimated_calls_per_query"] == row["calls_per_query"]
        assert row["ndcg@10"] == 1.0 and row["mrr@10"] == 1.0
        assert row["prompt_tokens_per_query"] > 0  # from the server's usage fields
        assert row["invalid_output_rate"] == 0 and row["fallbacks"] == 0
        assert row["repeat_calls"] == 0  # a repeated query comes from the score cache
    assert strategies["original"]["calls_per_query"] == 0
    assert strategies["original"]["ndcg@10"] < 0.8

    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    for row in saved["strategies"].values():
        assert {"ndcg@10", "mrr@10", "map", "recall@10", "latency_p50_s", "latency_p95_s",
                "calls_per_query"} <= set(row)
    assert set(saved["per_query"]["pointwise:json"]) == set(QUERIES)
    assert saved["per_query"]["pointwise:json"]["q1"]["ranking"][0] == "a3"
    assert "| pointwise:json |" in (tmp_path / "out" / "results.md").read_text()
    assert (tmp_path / "out" / "quality_latency.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("strategy", ["listwise", "sliding_window", "pairwise", "tournament"])
def test_registry_strategies_spend_exactly_their_estimate(strategy, dataset, tmp_path, scripted_llm):
    scripted_llm.responder = ranking_llm(relevance)
    lines: list[str] = []
    results = run_rerank_bench(bench_args(dataset, tmp_path / "out", scripted_llm.base_url, strategy),
                               echo=lines.append)
    assert estimated_total(lines) == scripted_llm.count > 0
    assert results["strategies"][f"{strategy}:logprobs"]["fallbacks"] == 0


def test_unusable_answers_of_a_multi_passage_strategy_are_counted(dataset, tmp_path, scripted_llm):
    """Every window of every query answers garbage: the row must say so, not 0% invalid."""
    scripted_llm.responder = ranking_llm(relevance, listwise=lambda prompt: garbage("no idea"))
    config = Config(reranker_window_size=2, reranker_window_stride=1)
    results = run_rerank_bench(bench_args(dataset, tmp_path / "out", scripted_llm.base_url, "sliding_window",
                                          base=config), echo=lambda _: None)
    row = results["strategies"]["sliding_window:logprobs"]
    windows = sum(len(items) - 1 for items in CANDIDATES.values())  # window 2, stride 1
    assert row["calls"] == windows == scripted_llm.count
    assert row["invalid_output_rate"] == 1.0 and row["unit_fallbacks"] == windows
    assert row["fallbacks"] == len(QUERIES)  # no window worked: each query fell back as a whole


def test_one_failed_window_is_a_unit_fallback_and_one_invalid_output(dataset, tmp_path, scripted_llm):
    scripted_llm.responder = ranking_llm(
        relevance, listwise=lambda prompt: garbage() if "grade0 gamma" in prompt.passages else None)
    config = Config(reranker_window_size=3, reranker_window_stride=2)
    results = run_rerank_bench(bench_args(dataset, tmp_path / "out", scripted_llm.base_url, "sliding_window",
                                          base=config), echo=lambda _: None)
    row = results["strategies"]["sliding_window:logprobs"]
    assert row["unit_fallbacks"] == 1 and row["fallbacks"] == 0
    assert row["invalid_output_rate"] == round(1 / row["calls"], 4)
    assert " unit fallbacks |" in (tmp_path / "out" / "results.md").read_text()


def test_repaired_rankings_and_ties_are_counted(dataset, tmp_path, scripted_llm):
    """A listwise answer naming one index is usable but repaired: the row says how much was repaired."""
    scripted_llm.responder = ranking_llm(relevance, listwise=lambda prompt: listwise_reply([0]))
    results = run_rerank_bench(bench_args(dataset, tmp_path / "out", scripted_llm.base_url, "listwise"),
                               echo=lambda _: None)
    row = results["strategies"]["listwise:logprobs"]
    assert row["invalid_output_rate"] == 0 and row["unit_fallbacks"] == 0
    assert row["repairs_per_query"] == round(sum(len(items) - 1 for items in CANDIDATES.values()) / 3, 2)
    assert " repairs/q |" in (tmp_path / "out" / "results.md").read_text()


def test_cost_per_query_comes_from_token_prices_and_embedding_calls_are_counted_apart(dataset, tmp_path,
                                                                                       scripted_llm):
    from bench.estimate import TokenPrices

    scripted_llm.responder = ranking_llm(relevance)
    args = bench_args(dataset, tmp_path / "out", scripted_llm.base_url, "original,pointwise:json,mmr:json",
                      prices=TokenPrices(prompt_per_mtok=2.0, completion_per_mtok=8.0),
                      base=Config(embedding_provider="local"))
    results = run_rerank_bench(args, echo=lambda _: None)
    for label in ("pointwise:json", "mmr:json"):
        row = results["strategies"][label]
        expected = (row["prompt_tokens_per_query"] * 2.0 + row["completion_tokens_per_query"] * 8.0) / 1e6
        assert row["cost_per_query"] == pytest.approx(expected, rel=1e-3) and row["cost_per_query"] > 0
    assert results["strategies"]["mmr:json"]["embedding_calls_per_query"] == 1.0  # one batch per query
    assert results["strategies"]["pointwise:json"]["embedding_calls_per_query"] == 0.0
    assert results["strategies"]["original"]["cost_per_query"] == 0.0
    assert results["token_prices_per_mtok"] == {"prompt": 2.0, "completion": 8.0}
    table = (tmp_path / "out" / "results.md").read_text()
    assert "| cost/q |" in table and "| emb. calls/q |" in table
    free = run_rerank_bench(bench_args(dataset, tmp_path / "free", scripted_llm.base_url, "pointwise:json"),
                            echo=lambda _: None)
    assert free["strategies"]["pointwise:json"]["cost_per_query"] == 0.0  # default prices: a local model


def test_a_rerun_reuses_finished_queries(dataset, tmp_path, scripted_llm):
    scripted_llm.responder = judge(relevance)
    out = tmp_path / "out"
    first = run_rerank_bench(bench_args(dataset, out, scripted_llm.base_url, max_queries=2), echo=lambda _: None)
    after_first = scripted_llm.count
    assert after_first == 2 * (DISTINCT_TEXTS["q1"] + DISTINCT_TEXTS["q2"])

    again = run_rerank_bench(bench_args(dataset, out, scripted_llm.base_url, max_queries=2), echo=lambda _: None)
    assert scripted_llm.count == after_first  # nothing re-ran
    assert again["strategies"]["pointwise:json"]["ndcg@10"] == first["strategies"]["pointwise:json"]["ndcg@10"]

    report = run_rerank_bench(bench_args(dataset, out, scripted_llm.base_url, report_only=True, yes=False,
                                         confirm_above=0), echo=lambda _: None)
    assert scripted_llm.count == after_first and report["strategies"]["pointwise:json"]["queries"] == 2

    lines: list[str] = []
    grown = run_rerank_bench(bench_args(dataset, out, scripted_llm.base_url), echo=lines.append)
    assert scripted_llm.count - after_first == 2 * DISTINCT_TEXTS["q3"] == estimated_total(lines)
    assert grown["strategies"]["pointwise:json"]["queries"] == 3


def test_a_rerun_with_other_strategy_knobs_does_not_reuse_results(dataset, tmp_path, scripted_llm):
    """A sliding window of 2 and one of 3 rank differently: a finished run of one is not the other's."""
    scripted_llm.responder = ranking_llm(relevance)
    out = tmp_path / "out"

    def run(window: int) -> list[str]:
        lines: list[str] = []
        config = Config(reranker_window_size=window, reranker_window_stride=1)
        run_rerank_bench(bench_args(dataset, out, scripted_llm.base_url, "sliding_window", base=config),
                         echo=lines.append)
        return lines

    run(2)
    after_first = scripted_llm.count
    assert "0 reused" in " ".join(run(3)) and scripted_llm.count > after_first
    after_second = scripted_llm.count
    assert "3 reused" in " ".join(run(2)) and scripted_llm.count == after_second


def test_mmr_results_are_keyed_by_the_embedder_that_judged_redundancy(dataset, tmp_path):
    """MMR's diversity comes from the embedder: a run with another embedder is not reused; other
    strategies do not depend on it."""
    def key(strategy: str, provider: str) -> str:
        args = bench_args(dataset, tmp_path, unused_base_url(), strategy, base=Config(embedding_provider=provider))
        return store_key(args, args.strategies[0])

    assert key("mmr:logprobs", "local") != key("mmr:logprobs", "openai")
    assert key("pointwise:logprobs", "local") == key("pointwise:logprobs", "openai")


def test_a_query_whose_rerank_fell_back_is_reported_but_retried_later(dataset, tmp_path, scripted_llm):
    scripted_llm.responder = judge(relevance)
    out = tmp_path / "out"
    down = run_rerank_bench(bench_args(dataset, out, unused_base_url(), "pointwise:json", max_queries=1),
                            echo=lambda _: None)
    assert down["strategies"]["pointwise:json"]["fallbacks"] == 1  # server unreachable: incoming order
    assert down["per_query"]["pointwise:json"]["q1"]["ranking"] == ["a0", "a0b", "a1", "a3"]

    retried = run_rerank_bench(bench_args(dataset, out, scripted_llm.base_url, "pointwise:json", max_queries=1),
                               echo=lambda _: None)
    assert scripted_llm.count == DISTINCT_TEXTS["q1"]
    assert retried["strategies"]["pointwise:json"]["fallbacks"] == 0
    assert retried["per_query"]["pointwise:json"]["q1"]["ranking"][0] == "a3"


def test_refuses_above_the_threshold_without_yes(dataset, tmp_path, scripted_llm):
    args = bench_args(dataset, tmp_path / "out", scripted_llm.base_url, yes=False, confirm_above=5)
    with pytest.raises(ConfirmationRefused, match="add --yes"):
        run_rerank_bench(args, echo=lambda _: None, ask=lambda _: True, stdin_is_tty=False)
    with pytest.raises(ConfirmationRefused, match="Not confirmed"):
        run_rerank_bench(args, echo=lambda _: None, ask=lambda _: False, stdin_is_tty=True)
    assert scripted_llm.count == 0 and not (tmp_path / "out" / "results.json").exists()

    questions: list[str] = []
    run_rerank_bench(args, echo=lambda _: None, ask=lambda q: questions.append(q) or True, stdin_is_tty=True)
    assert "About 20 model calls" in questions[0] and scripted_llm.count == 20


def test_cli_prints_the_estimate_and_refuses_without_yes(dataset, tmp_path, scripted_llm, backend):
    scripted_llm.responder = judge(relevance)
    app, _ = backend()
    command = ["rerank", "--dataset", str(dataset), "--output", str(tmp_path / "cli"),
               "--base-url", scripted_llm.base_url, "--model", "scripted", "--strategies", "original,pointwise:json",
               "--confirm-above", "3"]
    refused = bench_cli(app=app, args=command)
    assert refused.exit_code == 1
    assert "total" in refused.output and "10 calls" in refused.output and "add --yes" in refused.output
    assert scripted_llm.count == 0

    done = bench_cli(app=app, args=[*command, "--yes", "--max-queries", "1", "--price-prompt", "3",
                                    "--price-completion", "15"])
    assert done.exit_code == 0, done.output
    assert scripted_llm.count == DISTINCT_TEXTS["q1"]
    saved = json.loads((tmp_path / "cli" / "results.json").read_text())
    assert saved["strategies"]["pointwise:json"]["queries"] == 1
    assert saved["token_prices_per_mtok"] == {"prompt": 3.0, "completion": 15.0}
    assert "cost/q" in done.output and saved["strategies"]["pointwise:json"]["cost_per_query"] > 0


def test_ctrl_c_keeps_finished_queries_and_the_same_command_resumes(dataset, tmp_path, scripted_llm):
    """The real CLI in a child process, interrupted with SIGINT after its first stored query."""
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    scripted_llm.responder = judge(lambda query, passage: delay(0.4, relevance(query, passage)))
    out = tmp_path / "out"
    command = [sys.executable, "-m", "bench", "rerank", "--dataset", str(dataset),
               "--output", str(out), "--base-url", scripted_llm.base_url, "--model", "scripted",
               "--strategies", "pointwise:json", "--concurrency", "1", "--yes"]
    backend_dir = Path(__file__).resolve().parents[1]
    child = subprocess.Popen(command, cwd=backend_dir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 60
        while not any(path.read_text().strip() for path in out.glob("runs/*.jsonl")):
            assert child.poll() is None and time.monotonic() < deadline, child.communicate()
            time.sleep(0.05)
        child.send_signal(signal.SIGINT)
        _, stderr = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 130 and "run the same command to resume" in stderr
    finished = json.loads((out / "results.json").read_text())["strategies"]["pointwise:json"]["queries"]
    assert 1 <= finished < 3

    calls_before = scripted_llm.count
    scripted_llm.responder = judge(relevance)
    resumed = run_rerank_bench(bench_args(dataset, out, scripted_llm.base_url, "pointwise:json", concurrency=1),
                               echo=lambda _: None)
    assert resumed["strategies"]["pointwise:json"]["queries"] == 3
    # Only the unfinished queries were judged again (the interrupted one may have been part-way).
    redone = scripted_llm.count - calls_before
    assert redone <= sum(DISTINCT_TEXTS[q] for q in ("q2", "q3")) and redone >= DISTINCT_TEXTS["q3"]
