"""Choosing the search's fusion and cascade depth from stored `bench graph` runs, by a fixed rule.

Each development run (`bench graph --output DIR`) stored, per query, every candidate's first-stage
score, the judge's score and the cosine (bench/replay.py). From those this module replays every
setting of a grid with the same `fuse` graph search runs, and applies the rule written in
docs/bench/FUSION.md:

1. settings: `rrf`, `linear` or `zscore`, judge share 0.1-1.0 and cosine share 0-(1 - judge share), steps of 0.1;
2. a setting's margin on a run: its nDCG@10 minus the better of the baseline (`linear`, judge 0.7, no
   cosine) and the cosine alone;
3. eligible: MRR@10 not below the baseline's on every run, and (step 9) a candidate only the judge finds
   comes first (`lifts_a_lone_find`);
4. chosen: the eligible setting with the largest smallest margin (ties: the smaller judge share, then
   the method first in METHODS);
5. the cascade: for each focus (RERANKER_JUDGE_FOCI: the cheap order's first N, the N around the
   cut, or first those the first stage and the cosine disagree about), the smallest of DEPTHS whose
   nDCG@10 gain over the first stage is at least 90% of the chosen setting's gain with everything
   judged, on every run; chosen: the smaller depth (ties: the first focus); none: depth 0 (judge every
   candidate).

Step 10 (another score mode) is this same rule over that mode's runs, each given the matching run of
today's mode (`load_run(..., baseline=...)`) so the baseline, and so every margin, stays today's.
Step 12 (a wider pool) is the rule over runs that judged a wider pool whole, with every setting replayed
as a cascade that judges only the cheap order's first `judge_depth` (`rank_settings(..., judge_depth)`):
as many judge calls as the baseline makes on today's pool. Step 13 reads the judge's probabilities as
log-odds (`load_run(..., log_odds=True)`) against the same baseline.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from bench.datasets import Dataset, load_dataset
from bench.metrics import evaluate
from bench.replay import Replay, cosine_ranking, doc_ranking, fused_ranking, sure_stop
from app.config import RERANKER_JUDGE_FOCI
from graphiti_llm_rerank.fusion import fuse

BASELINE = Replay("linear", 0.7)
METHODS = ("rrf", "linear", "zscore")  # grid order: equal margins and judge shares go to the first
DEPTHS = (4, 5, 6, 8, 10, 12)
GAIN_SHARE = 0.9
LIMIT = 10
LOG_ODDS_EDGE = 1e-6  # the nearest a probability read as log-odds comes to 0 or 1 (rule step 13)
LONE_FIND_CANDIDATES = 20  # a search's judged candidates in the lone-find check (rule step 9)


@dataclass
class DevelopmentRun:
    """One `bench graph` output: its dataset and the traced records of its reranked phase."""

    name: str
    dataset: Dataset
    traces: dict[str, dict]  # qid -> candidate trace
    # The same queries judged as today's default judges (rule step 10), when this run judged otherwise:
    # the baseline is then replayed from these, so every mode is measured against one baseline.
    baseline_traces: dict[str, dict] | None = None

    def score(self, rankings: dict[str, list[str]]) -> dict[str, float]:
        return evaluate(self.dataset.qrels, rankings, self.dataset.relevance_level)[1]

    def replayed(self, replay: Replay, traces: dict[str, dict] | None = None) -> dict[str, float]:
        return self.score({qid: fused_ranking(trace, replay, LIMIT) for qid, trace in (traces or self.traces).items()})

    def baseline(self) -> dict[str, float]:
        return self.replayed(BASELINE, self.baseline_traces)

    def first_stage(self) -> dict[str, float]:
        return self.score({qid: doc_ranking(trace["doc_ids"], range(len(trace["doc_ids"])))[:LIMIT]
                           for qid, trace in self.traces.items()})

    def cosine_alone(self) -> dict[str, float]:
        """The cosine's order alone over this run's candidates, or over the baseline run's where that scores
        higher: a wider pool is measured against the cosine over either pool."""
        pools = [self.traces] + ([self.baseline_traces] if self.baseline_traces else [])
        scores = [self.score({qid: cosine_ranking(trace, LIMIT) for qid, trace in traces.items()}) for traces in pools]
        return max(scores, key=lambda score: score["ndcg@10"])

    def sure_stop_mean(self, replay: Replay) -> tuple[float, int]:
        """Judgements per query a stop sure of its answer would need (`sure_stop`), and the candidates."""
        counts = [sure_stop(trace, replay, LIMIT) for trace in self.traces.values()]
        return sum(counts) / len(counts), max(len(trace["doc_ids"]) for trace in self.traces.values())


class BaselineRunError(ValueError):
    """The baseline run given to `load_run` holds no traced records, or ran other queries."""


def load_run(output: Path, dataset: Path, baseline: Path | None = None, *, log_odds: bool = False) -> DevelopmentRun:
    """The traced records under `output`/runs, and those under `baseline`/runs when given (ValueError when
    `output` holds none; BaselineRunError when `baseline` holds none or did not run the same queries).
    `log_odds` (rule step 13): the judge's probabilities in `output`'s records read as log-odds; the baseline
    still reads them as stored (`baseline`'s, or else `output`'s own)."""
    traces = _traces(Path(output))
    baseline_traces = traces if log_odds else None
    if log_odds:
        traces = {qid: {**trace, "evidence": [None if value is None else _log_odds(value)
                                              for value in trace["evidence"]]}
                  for qid, trace in traces.items()}
    if baseline is not None:
        try:
            baseline_traces = _traces(Path(baseline))
        except ValueError as error:
            raise BaselineRunError(str(error)) from None
        if baseline_traces.keys() != traces.keys():
            raise BaselineRunError(f"{baseline}: its queries are not those of {output}")
    return DevelopmentRun(Path(output).name, load_dataset(dataset, with_candidates=False), traces, baseline_traces)


def _log_odds(probability: float) -> float:
    """log(p / (1 - p)), with p kept off 0 and 1 by LOG_ODDS_EDGE so a certain judgement stays finite."""
    p = min(max(probability, LOG_ODDS_EDGE), 1.0 - LOG_ODDS_EDGE)
    return math.log(p / (1.0 - p))


def _traces(output: Path) -> dict[str, dict]:
    traces = {}
    for path in sorted((output / "runs").glob("on-*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            if record.get("trace") and record["trace"].get("cosine") is not None:
                traces[record["qid"]] = record["trace"]
    if not traces:
        raise ValueError(f"{output}: no traced reranked records (run `bench graph --output {output}` first)")
    return traces


def lifts_a_lone_find(replay: Replay) -> bool:
    """Rule step 9: does `replay`'s fusion put first a candidate that only the judge finds (judged 0.95,
    every other 0.2) when the first stage and the cosine both place it last? A report's neighbourhood search
    brings the judge such facts: an entity's own facts, which share no words with the question."""
    count = LONE_FIND_CANDIDATES
    cheap = [1.0 - index / count for index in range(count)]
    evidence = dict.fromkeys(range(count - 1), 0.2) | {count - 1: 0.95}
    fused = fuse(cheap, evidence, method=replay.method, weight=replay.weight, cosine=cheap,
                 cosine_weight=replay.cosine_weight)
    return fused[0].position == count - 1


def grid(judge_depth: int = 0) -> list[Replay]:
    """Rule step 1's settings; with `judge_depth`, each judging the cheap order's first that many only."""
    return [Replay(method, judge / 10, cosine_weight=cosine / 10, depth=judge_depth)
            for method in METHODS for judge in range(1, 11) for cosine in range(0, 11 - judge)]


@dataclass(frozen=True)
class Row:
    replay: Replay
    scores: tuple[dict[str, float], ...]  # per run
    margin: float  # the smallest over the runs
    eligible: bool


def rank_settings(runs: Sequence[DevelopmentRun], judge_depth: int = 0) -> tuple[list[Row], dict]:
    """Every grid setting (judging the cheap order's first `judge_depth`, 0: all), the chosen first (rule
    steps 1-4), and the baselines per run."""
    baselines = {run.name: {"first stage": run.first_stage(), "cosine alone": run.cosine_alone(),
                            "baseline": run.baseline()} for run in runs}
    rows = []
    for replay in grid(judge_depth):
        scores = tuple(run.replayed(replay) for run in runs)
        margins = [score["ndcg@10"] - max(baselines[run.name]["baseline"]["ndcg@10"],
                                          baselines[run.name]["cosine alone"]["ndcg@10"])
                   for run, score in zip(runs, scores)]
        eligible = lifts_a_lone_find(replay) and all(
            score["mrr@10"] >= baselines[run.name]["baseline"]["mrr@10"] - 1e-9 for run, score in zip(runs, scores))
        rows.append(Row(replay, scores, min(margins), eligible))
    rows.sort(key=lambda row: (not row.eligible, -round(row.margin, 9), row.replay.weight))
    return rows, baselines


def choose_cascade(runs: Sequence[DevelopmentRun], chosen: Replay, baselines: dict) -> tuple[Replay, list]:
    """Rule step 5: the cascade (focus and depth) keeping GAIN_SHARE of the full gain on every run with
    the fewest judged; `chosen` itself (depth 0) when none does. The table: (replay, scores, shares)."""
    full = [run.replayed(chosen)["ndcg@10"] for run in runs]
    table = []
    for focus in RERANKER_JUDGE_FOCI:
        for depth in (depth for depth in DEPTHS if not chosen.depth or depth < chosen.depth):
            cascade = replace(chosen, depth=depth, focus=focus)
            scores = [run.replayed(cascade) for run in runs]
            shares = [(score["ndcg@10"] - baselines[run.name]["first stage"]["ndcg@10"])
                      / max(1e-9, whole - baselines[run.name]["first stage"]["ndcg@10"])
                      for run, score, whole in zip(runs, scores, full)]
            table.append((cascade, scores, shares))
    kept = [cascade for cascade, _, shares in table if min(shares) >= GAIN_SHARE]
    best = min(kept, key=lambda cascade: (cascade.depth, RERANKER_JUDGE_FOCI.index(cascade.focus)), default=chosen)
    return best, table


def report(runs: Sequence[DevelopmentRun], top: int = 10, judge_depth: int = 0) -> str:
    rows, baselines = rank_settings(runs, judge_depth)
    chosen = rows[0].replay
    cascade, cascades = choose_cascade(runs, chosen, baselines)
    names = [run.name for run in runs]
    head = "| setting | " + " | ".join(f"{name} nDCG@10 / MRR@10" for name in names) + " | smallest margin | eligible |"
    lines = [head, "|---|" + "---:|" * len(names) + "---:|---|"]
    for label in ("first stage", "cosine alone", "baseline"):
        cells = [f"{baselines[name][label]['ndcg@10']:.4f} / {baselines[name][label]['mrr@10']:.4f}" for name in names]
        lines.append(f"| {label if label != 'baseline' else 'today: linear w=0.7'} | " + " | ".join(cells) + " | | |")
    for row in rows[:top]:
        cells = [f"{score['ndcg@10']:.4f} / {score['mrr@10']:.4f}" for score in row.scores]
        lines.append(f"| {row.replay.label.removeprefix('replay: ')} | " + " | ".join(cells)
                     + f" | {row.margin:+.4f} | {'yes' if row.eligible else 'no'} |")
    depth_head = " | ".join(f"{name} nDCG@10 / MRR@10 (share of the gain)" for name in names)
    lines += ["", f"| judge focus, depth | {depth_head} |",
              "|---|" + "---:|" * len(names)]
    for each, scores, shares in cascades:
        lines.append(f"| {each.focus}, {each.depth} | "
                     + " | ".join(f"{score['ndcg@10']:.4f} / {score['mrr@10']:.4f} ({share:.0%})"
                                  for score, share in zip(scores, shares)) + " |")
    for focus in RERANKER_JUDGE_FOCI:
        needs = [run.sure_stop_mean(replace(chosen, focus=focus)) for run in runs]
        lines.append(f"| {focus}, stop when sure | " + " | ".join(
            f"{mean:.1f} of {count} judged per query" for mean, count in needs) + " |")
    eligible = rows[0].eligible
    lines += ["", f"Chosen: {chosen.method}, judge share {chosen.weight:g}, cosine share {chosen.cosine_weight:g}"
              + ("" if eligible else " (no setting was eligible: this one only leads the ranking)")
              + "; " + (f"judge depth {cascade.depth}, focus {cascade.focus}." if cascade.depth
                        else "judge depth all (no cascade kept the gain).")]
    return "\n".join(lines)
