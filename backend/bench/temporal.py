"""`python -m bench temporal`: does the fact valid at the asked time come first?

The set (bench/data/temporal_facts.jsonl, temporal_questions.jsonl, written by someone who had not
seen the search code or the judge's prompts) holds facts with valid_at / invalid_at and questions that
ask about one relation at one time: `now`, `as_of` an instant, `before` or `after` it. Each question
names its answers (the facts that hold at that time) and its distractors (the same relation at other
times).

Per database (the embedded FalkorDB, the local Neo4j, each under the output folder), the facts go in
through the product's own no-LLM import with the in-process embedder; each fact's set id rides in its
metadata (`fact_id`), so hits map back. Then, per RERANKER_PASSAGE_TIME mode, every question is searched
the product's way (`GraphitiAdapter().graph.search`, the real judge, RERANKER_FUSION as configured),
and its candidates (first-stage order and scores, the cosine, the judge's evidence) are kept. Each
search gives these orders of the same candidates, scored with the filters off and on:

- `first stage`: Graphiti's hybrid RRF order (no model);
- `cosine`: the embedder's cosine to the question alone (the cheapest signal beyond the first stage);
- `judge, time <mode>`: the search's own fused order (RERANKER_FUSION), the judge reading the passage as
  that mode builds it; `judge alone, time <mode>`: the judge's scores alone, before fusion.

Filters on means the question's `at` as the search's `as_of`: a second search of each question with
`filters=SearchFilter(as_of=at)` (app/graph/search_filters.py) once the search has its filters. Until
then the on rows are a PLACEHOLDER: the unfiltered search's candidates that are valid at `at`, in the
same order (`as_of_positions`). A real filter also brings valid facts the unfiltered first stage left
out, so the placeholder is a lower bound. `as_of_filter` decides which one runs; the results say which.

Measures: accuracy@1 (the first hit is one of the answers) and nDCG@10 (answers gain 1, distractors
and unrelated facts 0; ideal: every answer first), per question kind and for the point-in-time
questions (`now`, `as_of`). Settings are chosen on one half of the questions and reported on the
other: `tuning` holds the questions at even places in the file, `reported` those at odd places.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench.datasets import DatasetError
from bench.graph_bench import prepare_graph
from bench.store import ResultStore, run_key
from app.config import RERANKER_PASSAGE_TIMES, Config
from app.graph.runtime import GraphitiAdapter, reset_graphiti
from graphiti_llm_rerank import redact_url

logger = logging.getLogger(__name__)

DATA_DIR = Path(__file__).resolve().parent / "data"  # beside the other benchmarks' sets
FACTS_FILE = "temporal_facts.jsonl"
QUESTIONS_FILE = "temporal_questions.jsonl"
KINDS = ("now", "as_of", "before", "after")
POINT_IN_TIME = ("now", "as_of")
HALVES = ("tuning", "reported", "all")
BACKENDS = ("falkordb", "neo4j")
ID_KEY = "fact_id"  # the metadata key that carries a fact's set id through the import
CUT = 10  # nDCG@10


class TemporalSetError(DatasetError):
    """The set cannot be read: which file, which line, what is wrong."""


@dataclass(frozen=True)
class Question:
    id: str
    question: str
    kind: str
    at: datetime
    answers: frozenset[str]
    distractors: frozenset[str]
    relation: str


@dataclass(frozen=True)
class Validity:
    valid_at: datetime | None
    invalid_at: datetime | None

    def holds_at(self, moment: datetime) -> bool:
        return ((self.valid_at is None or self.valid_at <= moment)
                and (self.invalid_at is None or moment < self.invalid_at))


@dataclass
class TemporalArgs:
    config: Config  # the judge's settings (RERANKER_*), the rest from the environment
    output: Path
    data_dir: Path = DATA_DIR
    backends: tuple[str, ...] = BACKENDS
    passage_times: tuple[str, ...] = ("off", "status")
    half: str = "reported"
    per_kind: int | None = None  # the half's first N questions of each kind
    limit: int = 10
    command: str = ""
    extra: dict = field(default_factory=dict)


def _instant(text: Any, where: str) -> datetime | None:
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        raise TemporalSetError(f"{where}: {text!r} is not an ISO-8601 instant") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _lines(path: Path) -> list[tuple[int, dict]]:
    if not path.is_file():
        raise TemporalSetError(f"{path} is missing")
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            try:
                rows.append((number, json.loads(line)))
            except ValueError as error:
                raise TemporalSetError(f"{path}:{number}: {error}") from None
    return rows


def load_facts(path: Path) -> tuple[list[dict], dict[str, Validity]]:
    """The facts in the import format (the set id moved into metadata) and each one's validity."""
    facts, validity = [], {}
    for number, row in _lines(path):
        fact = dict(row)
        fact_id = str(fact.pop("id", "") or "")
        if not fact_id or fact_id in validity:
            raise TemporalSetError(f"{path}:{number}: every fact needs its own 'id'")
        fact["metadata"] = {**(fact.get("metadata") or {}), ID_KEY: fact_id}
        validity[fact_id] = Validity(_instant(fact.get("valid_at"), f"{path}:{number}"),
                                     _instant(fact.get("invalid_at"), f"{path}:{number}"))
        facts.append(fact)
    return facts, validity


def load_questions(path: Path, known_facts: set[str]) -> list[Question]:
    questions = []
    for number, row in _lines(path):
        where = f"{path}:{number}"
        try:
            question = Question(str(row["id"]), row["question"], row["kind"], _instant(row["at"], where),
                                frozenset(map(str, row["answers"])), frozenset(map(str, row.get("distractors", []))),
                                row.get("relation", ""))
        except (KeyError, TypeError) as error:
            raise TemporalSetError(f"{where}: missing or malformed field {error}") from None
        unknown = (question.answers | question.distractors) - known_facts
        if question.kind not in KINDS or not question.answers or unknown:
            raise TemporalSetError(f"{where}: kind must be one of {KINDS}, answers non-empty, "
                                   f"every fact id known (unknown: {sorted(unknown)})")
        questions.append(question)
    return questions


def half_of(questions: list[Question], half: str) -> list[Question]:
    """`tuning`: the questions at even places of the file (0, 2, ...); `reported`: at odd places."""
    if half == "all":
        return list(questions)
    parity = 0 if half == "tuning" else 1
    return [question for place, question in enumerate(questions) if place % 2 == parity]


def first_of_each_kind(questions: list[Question], per_kind: int | None) -> list[Question]:
    """The first `per_kind` questions of each kind, in file order (all when None): a small run still asks
    about every kind."""
    if per_kind is None:
        return list(questions)
    seen: dict[str, int] = {}
    kept = []
    for question in questions:
        seen[question.kind] = seen.get(question.kind, 0) + 1
        if seen[question.kind] <= per_kind:
            kept.append(question)
    return kept


# --- measures ---------------------------------------------------------------------------------------


def accuracy_at_1(ranking: Sequence[str], answers: frozenset[str]) -> float:
    return 1.0 if ranking and ranking[0] in answers else 0.0


def ndcg_at(ranking: Sequence[str], answers: frozenset[str], cut: int = CUT) -> float:
    """Binary gains: an answer is worth 1, anything else 0."""
    dcg = sum(1.0 / math.log2(place + 2) for place, fact in enumerate(ranking[:cut]) if fact in answers)
    ideal = sum(1.0 / math.log2(place + 2) for place in range(min(len(answers), cut)))
    return dcg / ideal if ideal else 0.0


def as_of_filter(at: datetime):
    """The search's own `as_of` filter for `at`, or None while the search has no filters (the placeholder
    post-filter, `as_of_positions`, stands in)."""
    try:
        from app.graph.search_filters import SearchFilter
    except ImportError:
        return None
    return SearchFilter(as_of=at)


FILTER_ON = ("search as_of" if as_of_filter(datetime.now(timezone.utc)) is not None
             else "PLACEHOLDER: post-filter of the unfiltered candidates (valid at the question's 'at')")


def as_of_positions(candidate_ids: Sequence[str | None], validity: dict[str, Validity], at: datetime,
                    order: Sequence[int]) -> list[int]:
    """PLACEHOLDER for the search's `as_of` filter: the positions of `order` whose fact holds at `at`.
    Replace with a search that passes `as_of=at` once the filters are merged."""
    return [position for position in order
            if candidate_ids[position] is not None and validity[candidate_ids[position]].holds_at(at)]


# --- one search -------------------------------------------------------------------------------------


def candidate_record(question: Question, outcome, latency_s: float) -> dict:
    """What one search judged and how it ordered its candidates, JSON-safe, by candidate position."""
    trace = outcome.trace["edges"]
    count = len(trace.passages)
    return {
        "qid": question.id,
        "candidate_ids": [(metadata or {}).get(ID_KEY) for metadata in trace.metadata],
        "passages": trace.passages,
        "first_scores": [float(score) for score in trace.first_scores],
        "cosine": None if trace.cosine is None else [float(value) for value in trace.cosine],
        "evidence": [trace.judgement.evidence.get(position) for position in range(count)],
        "judge_order": [placed.position for placed in trace.judgement.order],  # the search's fused order
        "answer": [(hit.metadata or {}).get(ID_KEY) for hit in outcome.edges],
        "fell_back": trace.judgement.fell_back, "judged": outcome.judged, "error": outcome.error,
        "latency_s": round(latency_s, 3),
    }


def orders(record: dict) -> dict[str, list[int]]:
    """Each signal's order of the record's candidate positions, best first (ties: first-stage order)."""
    count = len(record["candidate_ids"])
    first = list(range(count))
    # The judge's own order, before fusion: what the passage's time does to the judge alone.
    unjudged = float("-inf")
    result = {"first stage": first, "judge": record["judge_order"],
              "judge alone": sorted(first, key=lambda position: (-(record["evidence"][position] or unjudged),
                                                                  position))}
    if record["cosine"] is not None:
        result["cosine"] = sorted(first, key=lambda position: (-record["cosine"][position], position))
    return result


def question_scores(record: dict, question: Question, validity: dict[str, Validity]) -> dict[str, dict]:
    """acc@1 and nDCG@10 of each signal's order, with the filter off and on (the filtered search's own
    order when it ran, else the placeholder post-filter of the unfiltered one)."""
    scores = {}
    for signal, order in orders(record).items():
        for filtered in (False, True):
            ids, positions = record["candidate_ids"], order
            if filtered and "filtered" in record:
                ids, positions = record["filtered"]["candidate_ids"], orders(record["filtered"])[signal]
            elif filtered:
                positions = as_of_positions(ids, validity, question.at, order)
            ranking = [ids[position] for position in positions if ids[position] is not None]
            scores[f"{signal}|{'on' if filtered else 'off'}"] = {
                "acc@1": accuracy_at_1(ranking, question.answers), "ndcg@10": ndcg_at(ranking, question.answers)}
    return scores


# --- the run ----------------------------------------------------------------------------------------


def backend_config(args: TemporalArgs, backend: str) -> Config:
    """The app's own database under the output folder (never a configured server), the in-process embedder."""
    return replace(args.config, graph_backend=backend, data_dir=(args.output / "graph-data" / backend).resolve(),
                   falkordb_url=None, neo4j_uri=None, neo4j_local_port=0, embedding_provider="local",
                   reranker_budget_s=0.0)


def set_key(facts: list[dict]) -> str:
    return run_key(facts=facts)


def search_questions(adapter, graph_id: str, questions: list[Question], store: ResultStore, limit: int,
                     echo: Callable[[str], None], label: str) -> None:
    for done, question in enumerate(questions, start=1):
        if question.id in store.done:
            continue
        started = time.perf_counter()
        outcome = adapter.graph.search(graph_id, question.question, limit=limit)
        record = candidate_record(question, outcome, time.perf_counter() - started)
        filters = as_of_filter(question.at)
        if filters is not None:
            started = time.perf_counter()
            filtered = adapter.graph.search(graph_id, question.question, limit=limit, filters=filters)
            record["filtered"] = candidate_record(question, filtered, time.perf_counter() - started)
            record["fell_back"] = record["fell_back"] or record["filtered"]["fell_back"]
        store.add(record, persist=not record["fell_back"] and not record["error"])
        echo(f"  {label} {done}/{len(questions)} {question.id}: {record['latency_s']:.1f} s, "
             f"{record['judged']} judged")


def run_temporal(args: TemporalArgs, echo: Callable[[str], None] = print) -> dict:
    facts, validity = load_facts(args.data_dir / FACTS_FILE)
    every = load_questions(args.data_dir / QUESTIONS_FILE, set(validity))
    questions = first_of_each_kind(half_of(every, args.half), args.per_kind)
    graph_id = "temporal_" + set_key(facts)
    fusion = {"method": args.config.reranker_fusion, "weight": args.config.reranker_fusion_weight,
              "cosine_weight": args.config.reranker_cosine_weight}
    echo(f"Temporal set: {len(facts)} facts, {len(every)} questions; {len(questions)} of the {args.half} half")
    records: dict[str, dict[str, dict]] = {}
    try:
        for backend in args.backends:
            config = backend_config(args, backend)
            prepare_graph(replace(config, reranker_provider="none"), graph_id, facts,
                          config.data_dir / f"import-{graph_id}.json", echo)
            for mode in args.passage_times:
                label = f"{backend}, time {mode}"
                on = replace(config, reranker_provider="ollama", reranker_passage_time=mode)
                store = ResultStore(args.output, f"{backend}-{mode}", run_key(
                    graph=graph_id, limit=args.limit, model=on.reranker_model, mode=on.reranker_score_mode,
                    strategy=on.reranker_strategy, candidates=on.reranker_candidates, filter=FILTER_ON, **fusion))
                reset_graphiti()  # a runtime with this mode's settings, same data
                search_questions(GraphitiAdapter(on), graph_id, questions, store, args.limit, echo, label)
                records[label] = store.done
    finally:
        reset_graphiti()
    results = build_results(args, questions, records, validity, len(facts))
    write_results(results, args.output)
    return results


def _candidates(record: dict, filtered: bool) -> list[str | None]:
    return record["filtered"]["candidate_ids"] if filtered and "filtered" in record else record["candidate_ids"]


def aggregate(rows: list[dict[str, float]]) -> dict[str, float | int]:
    if not rows:
        return {"questions": 0}
    return {"questions": len(rows), **{measure: round(sum(row[measure] for row in rows) / len(rows), 4)
                                       for measure in ("acc@1", "ndcg@10")}}


def build_results(args: TemporalArgs, questions: list[Question], records: dict[str, dict[str, dict]],
                  validity: dict[str, Validity], facts: int) -> dict:
    """One row per (run, signal, filter): overall, point-in-time and per kind."""
    rows = []
    for label, done in records.items():
        backend, mode = label.split(", time ")
        per_signal: dict[str, list[tuple[Question, dict]]] = {}
        for question in questions:
            if question.id not in done:
                continue
            for key, score in question_scores(done[question.id], question, validity).items():
                per_signal.setdefault(key, []).append((question, score))
        for key, scored in per_signal.items():
            signal, filtered = key.split("|")
            reads_passage = signal.startswith("judge")
            if not reads_passage and mode != args.passage_times[0]:
                continue  # the first stage and the cosine do not read the passage: one row per database
            rows.append({
                "backend": backend, "signal": f"{signal}, time {mode}" if reads_passage else signal,
                "filter": filtered, "all": aggregate([score for _, score in scored]),
                "point_in_time": aggregate([score for q, score in scored if q.kind in POINT_IN_TIME]),
                "kinds": {kind: aggregate([score for q, score in scored if q.kind == kind]) for kind in KINDS},
                # How often the candidates held an answer at all: no order can do better.
                "answer_among_candidates": round(sum(
                    bool(q.answers & set(_candidates(done[q.id], filtered == "on"))) for q, _ in scored)
                    / len(scored), 4),
            })
    latencies = sorted(record["latency_s"] for done in records.values() for record in done.values())
    return {
        "benchmark": "temporal", "half": args.half, "question_ids": [q.id for q in questions], "facts": facts,
        "limit": args.limit, "candidates_per_question": args.limit * args.config.reranker_candidates,
        "model": args.config.reranker_model, "base_url": redact_url(args.config.reranker_base_url),
        "fusion": args.config.reranker_fusion, "fusion_weight": args.config.reranker_fusion_weight,
        "cosine_weight": args.config.reranker_cosine_weight,
        "filter_on": FILTER_ON,
        "search_p50_s": latencies[len(latencies) // 2] if latencies else None,
        "rows": rows, "command": args.command, **args.extra,
    }


def markdown(results: dict) -> str:
    lines = [f"Temporal benchmark, {results['half']} half ({len(results['question_ids'])} questions), "
             f"{results['model']}, fusion {results['fusion']}; filter on = {results['filter_on']}.", "",
             "| database | order | filter | acc@1 point-in-time | acc@1 all | nDCG@10 all | "
             + " | ".join(f"acc@1 {kind}" for kind in KINDS) + " | an answer among the candidates |",
             "| --- | --- | --- | ---: | ---: | ---: | " + " | ".join("---:" for _ in KINDS) + " | ---: |"]
    for row in results["rows"]:
        kinds = " | ".join(f"{row['kinds'][kind].get('acc@1', '-')} ({row['kinds'][kind]['questions']})"
                           for kind in KINDS)
        lines.append(f"| {row['backend']} | {row['signal']} | {row['filter']} | "
                     f"{row['point_in_time'].get('acc@1', '-')} | {row['all'].get('acc@1', '-')} | "
                     f"{row['all'].get('ndcg@10', '-')} | {kinds} | {row['answer_among_candidates']} |")
    return "\n".join(lines) + "\n"


def write_results(results: dict, output: Path) -> None:
    output.mkdir(parents=True, exist_ok=True)
    (output / "results.json").write_text(json.dumps(results, indent=2, default=str))
    (output / "results.md").write_text(markdown(results))


__all__ = ["HALVES", "BACKENDS", "RERANKER_PASSAGE_TIMES", "TemporalArgs", "TemporalSetError", "run_temporal",
           "markdown", "load_facts", "load_questions", "half_of", "accuracy_at_1", "ndcg_at", "question_scores"]
