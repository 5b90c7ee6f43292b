"""`python -m bench graph`: SciFact or a TREC candidate folder in the product's own search path, reranker off vs on.

Mapping (why): the product reranks *facts*, which are sentence-sized, so each abstract becomes one
fact per sentence, plus its title as a fact of its own, all carrying the abstract id in the fact
metadata (`doc_id`). A claim's hits map back to abstract ids in first-occurrence order, and those
rankings are scored against the SciFact qrels like any run.

Corpus: by default only the abstracts in the selected claims' first-stage candidates (BM25 top-20
from candidates*.jsonl): embedding all 5,183 abstracts sentence by sentence takes most of an hour on
two CPU cores. `corpus="all"` imports everything. The graph lives under <output>/graph-data and is
reused by later runs with the same corpus; claims resume like `bench rerank` queries.

A TREC candidate folder (no corpus.jsonl, e.g. DL19 BM25 top-100) becomes one fact per passage, the
union of every query's candidates (bench/trec_graph.py), so DL19 runs through Graphiti's hybrid
first stage with the local embedder exactly as the report tools search.

Off and on are the same `GraphitiAdapter().graph.search` with RERANKER_PROVIDER=none and =ollama:
the runtime is rebuilt between the two phases over the same data (a restart of the embedded FalkorDB).
The on phase runs RERANKER_FUSION as configured and stores, per query, every candidate's first-stage
score, the judge's score and when it arrived, and the embedder's cosine (bench/replay.py). The
report adds rows replayed from those without any model call: the judge alone, each fusion asked for
(`--replay`), budgets (`--budgets`), and the embedder's cosine alone. The live fusion is replayed too,
and every query where the replay differs from what search answered is counted (`replay_mismatches`).
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from bench.datasets import Dataset, DatasetError, iter_corpus, load_dataset
from bench.estimate import DEFAULT_CONFIRM_ABOVE, confirm_estimate, describe_estimate
from bench.metrics import percentile
from bench.progress import ProgressBar
from bench.replay import (
    TRACE_VERSION, Replay, candidate_trace, cosine_ranking, fused_ranking, judged_in,
)
from bench.report import write_reports
from bench.runner import BenchInterrupted, finished_by_all
from bench.rerankers import ModelWaitClock, StrategySpec
from bench.store import ResultStore, run_key
from bench import trec_graph
from bench.summary import counter_delta, fell_back, summarize
from app.config import Config
from app.graph.loop import run_on_loop
from app.graph.runtime import GraphitiAdapter, reset_graphiti
from graphiti_llm_rerank import redact_url
from graphiti_llm_rerank.strategies.registry import strategy_from_config
from app.graph.similarity import query_cosines

logger = logging.getLogger(__name__)

IMPORT_BATCH = 500  # facts per import call: one embedding batch, one atomic write
MAPPING_VERSION = "sentences+title-1"
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(\[])")


@dataclass
class GraphBenchArgs:
    dataset: Path
    output: Path
    strategy: StrategySpec
    config: Config
    max_queries: int | None = 50
    limit: int = 10
    candidates_factor: int | None = None  # first-stage facts per result slot when reranking
    corpus: str = "candidates"
    query_range: tuple[int, int] | None = None  # 1-based, inclusive, in the dataset's query order
    replays: list[Replay] = field(default_factory=list)  # fusions replayed from the on phase's scores
    budgets: list[float] = field(default_factory=list)  # RERANKER_BUDGET_S values replayed (live fusion)
    report_only: bool = False  # no import, no search: report the claims both phases have finished
    yes: bool = False
    confirm_above: int = DEFAULT_CONFIRM_ABOVE
    command: str = ""
    extra: dict = field(default_factory=dict)


def split_sentences(text: str) -> list[str]:
    return [sentence.strip() for sentence in _SENTENCE_END.split(text) if sentence.strip()]


def abstract_facts(docid: str, title: str, text: str) -> list[dict]:
    """The title and each sentence of one abstract as facts tagged with the abstract id."""
    paper = (title or f"abstract {docid}")[:256]
    pieces = ([title] if title.strip() else []) + split_sentences(text)
    return [
        {"source": paper, "target": f"abstract {docid}", "relation": "states", "fact": piece[:4000],
         "metadata": {"doc_id": docid, "sentence": index}}
        for index, piece in enumerate(pieces)
    ]


def select_queries(dataset: Dataset, query_range: tuple[int, int] | None, max_queries: int | None) -> list:
    """The queries in `query_range` (1-based, inclusive), then the first `max_queries` of those."""
    queries = list(dataset.queries)
    if query_range is not None:
        queries = queries[query_range[0] - 1: query_range[1]]
    return queries[:max_queries] if max_queries else queries


def corpus_facts(dataset: Dataset, claims, corpus: str) -> tuple[list[dict], int]:
    """(facts, abstracts or passages) for the chosen corpus, in corpus file order."""
    if trec_graph.is_trec_folder(dataset.path):
        facts = trec_graph.passage_facts(dataset)
        return facts, len(facts)
    pool = None if corpus == "all" else {c.docid for claim in claims for c in claim.candidates}
    facts, abstracts = [], 0
    for docid, title, text in iter_corpus(dataset.path):
        if pool is None or docid in pool:
            facts.extend(abstract_facts(docid, title, text))
            abstracts += 1
    return facts, abstracts


def hits_to_abstracts(edges) -> list[str]:
    """Abstract ids of the hits, best first, each once (its best-ranked sentence counts)."""
    return list(dict.fromkeys(str(hit.metadata["doc_id"]) for hit in edges if "doc_id" in (hit.metadata or {})))


def stored_graph_id(dataset: Dataset, claims, corpus: str, config: Config) -> str:
    """The graph these facts are stored as: the same corpus, mapping and embedder share one."""
    embedder = (config.embedding_provider, config.embedding_model)
    if trec_graph.is_trec_folder(dataset.path):  # every query's candidates: one graph for every selection
        return "trec_" + run_key(dataset=str(dataset.path), mapping=trec_graph.MAPPING_VERSION, embedder=embedder)
    return "scifact_" + run_key(dataset=str(dataset.path), corpus=corpus, mapping=MAPPING_VERSION,
                                claims=None if corpus == "all" else [c.qid for c in claims], embedder=embedder)


def ensure_imported(adapter, graph_id: str, facts: list[dict], state_file: Path, echo) -> bool:
    """Import in batches, recording progress, so an interrupted import resumes where it stopped.
    Whether anything was written."""
    state = json.loads(state_file.read_text()) if state_file.is_file() else {"batches_done": 0}
    if not adapter.graph.exists(graph_id):
        adapter.graph.create(graph_id, name="SciFact benchmark")
        state = {"batches_done": 0}
    batches = [facts[start:start + IMPORT_BATCH] for start in range(0, len(facts), IMPORT_BATCH)]
    if state["batches_done"] >= len(batches):
        return False
    echo(f"Importing {len(facts)} facts into graph {graph_id} ({len(batches)} batches, no LLM)...")
    progress = ProgressBar(len(batches), len(batches))
    progress.steps = progress.done_weight = state["batches_done"]
    for number in range(state["batches_done"], len(batches)):
        adapter.graph.import_facts(graph_id, batches[number])
        state = {"batches_done": number + 1, "facts": len(facts)}
        state_file.write_text(json.dumps(state))
        progress.advance(1, f"import batch {number + 1}/{len(batches)}")
    progress.close()
    return True


def prepare_graph(config: Config, graph_id: str, facts: list[dict], state_file: Path, echo) -> None:
    """Import what is missing; after an import, restart the database before anything searches it.

    Why the restart: graphiti's bulk save writes each FalkorDB edge twice (its fields, then its
    vector), and RediSearch keeps the first version's postings until its garbage collector runs.
    They count in the full-text scores, so the keyword half ranks differently right after an
    import than over the same graph once the database has started again and built its index from
    what it stored: a run that imported used to rank its first phase differently from every later
    one (DL19 1-20 first stage nDCG@10 0.4660 against 0.4518, same graph). Every phase of every run
    now searches an index a start built. (Neo4j writes both in one transaction: nothing differs.)"""
    reset_graphiti()
    if ensure_imported(GraphitiAdapter(config), graph_id, facts, state_file, echo):
        reset_graphiti()


def phase_configs(args: GraphBenchArgs) -> tuple[Config, Config]:
    base = replace(args.config, data_dir=(args.output / "graph-data").resolve())
    off = replace(base, reranker_provider="none")
    on = replace(  # fusion, its weight and the budget as configured (RERANKER_FUSION...)
        base, reranker_provider="ollama", reranker_strategy=args.strategy.name,
        reranker_score_mode=args.strategy.score_mode or "auto",
        reranker_candidates=args.candidates_factor or base.reranker_candidates,
        search_timeout_s=max(base.search_timeout_s, args.config.reranker_deadline_s + 60),
    )
    return off, on


def estimate_on_calls(args: GraphBenchArgs, on: Config, claims: int) -> int:
    """Upper bound: every first-stage candidate judged (fewer when search finds fewer facts)."""
    candidates = args.limit * on.reranker_candidates
    # mmr spends exactly its relevance strategy's calls (the embedder is no model call).
    name = on.reranker_mmr_base if args.strategy.name == "mmr" else args.strategy.name
    if name == "pointwise":
        return claims * candidates
    return claims * int(strategy_from_config(on, name).estimate_calls(candidates))


def search_claims(adapter, graph_id, claims, store, limit, progress, label, judge=None) -> None:
    """Search each claim not stored yet; with the reranker on, keep every candidate's scores too."""
    clock = ModelWaitClock(judge)
    for claim in claims:
        if claim.qid in store.done:
            continue
        before, wait_before = (judge.counters.snapshot() if judge else {}), clock.total_s
        started = time.perf_counter()
        outcome = adapter.graph.search(graph_id, claim.text, limit=limit)
        latency = time.perf_counter() - started
        record = {
            "qid": claim.qid, "ranking": hits_to_abstracts(outcome.edges), "latency_s": round(latency, 4),
            "hits": len(outcome.edges), "error": outcome.error,
            "first_stage_ms": outcome.timings_ms.get("first_stage"), "rerank_ms": outcome.timings_ms.get("rerank"),
            "model_wait_s": round(clock.total_s - wait_before, 4),
            **counter_delta(before, judge.counters.snapshot() if judge else {}),
            "judged": outcome.judged, "candidates": outcome.candidates,
        }
        if judge is not None and "edges" in outcome.trace:
            trace, started = outcome.trace["edges"], time.perf_counter()
            # The cosine search itself fused, when it used one (read from the stored vectors); else the
            # embedder's, measured here after the timed search.
            cosine = trace.cosine or passage_cosines(adapter, claim.text, trace.passages)
            record["trace"] = candidate_trace(trace, cosine)
            record["cosine_s"] = round(time.perf_counter() - started, 4)
        store.add(record, persist=not fell_back(record) and not record["error"])
        progress.advance(1 + record["calls"], f"{label} claim {claim.qid} {latency:.1f}s")


def passage_cosines(adapter, query: str, passages: list[str]) -> list[float]:
    """The product's embedder: cosine of the query to each candidate (after the timed search)."""
    return run_on_loop(query_cosines(adapter.runtime.graphiti.embedder, query, passages), timeout=600)


def run_graph_bench(args: GraphBenchArgs, echo: Callable[[str], None] = print,
                    ask: Callable[[str], bool] | None = None, stdin_is_tty: bool | None = None) -> dict:
    dataset = load_dataset(args.dataset)
    claims = select_queries(dataset, args.query_range, args.max_queries)
    facts, abstracts = corpus_facts(dataset, claims, args.corpus)
    off, on = phase_configs(args)
    trec = trec_graph.is_trec_folder(dataset.path)
    graph_id = stored_graph_id(dataset, claims, args.corpus, off)
    search_key = dict(graph=graph_id, limit=args.limit)
    on_label = live_label(args.strategy.label, on)
    labels = {"reranker off": off, on_label: on}
    stores = {
        "reranker off": ResultStore(args.output, "off", run_key(**search_key)),
        on_label: ResultStore(args.output, "on", run_key(**search_key, model=args.config.reranker_model,
                                                          strategy=args.strategy.label, factor=on.reranker_candidates,
                                                          concurrency=args.config.reranker_max_parallel,
                                                          **live_settings(on))),
    }
    pending = {label: [c for c in claims if c.qid not in store.done] for label, store in stores.items()}
    estimate = {label: (0 if label == "reranker off" else estimate_on_calls(args, on, len(pending[label])),
                        len(pending[label]), len(claims) - len(pending[label])) for label in labels}
    echo(f"Graph: {abstracts} {'passages' if trec else 'abstracts'} as {len(facts)} facts "
         f"({'candidates union' if trec else args.corpus} corpus), {len(claims)} queries")
    for line in describe_estimate(estimate):
        echo(line)
    total_calls = sum(calls for calls, _, _ in estimate.values())
    if args.report_only:
        finished = finished_by_all(claims, stores)
        if not finished:  # the stored results are keyed by these settings: rewriting them with nothing helps no one
            raise DatasetError(
                f"--report-only: no claim of {args.output} is finished with the reranker off and on under these "
                f"settings (model, strategy, RERANKER_CANDIDATES, RERANKER_MAX_PARALLEL, RERANKER_FUSION, "
                f"RERANKER_FUSION_WEIGHT, RERANKER_BUDGET_S, RERANKER_COSINE_WEIGHT, RERANKER_JUDGE_DEPTH, "
                f"RERANKER_JUDGE_FOCUS); "
                f"use the run's own, as its results.md records them")
        echo(f"Report only: {len(finished)} of {len(claims)} claims are finished with the reranker off and on.")
        results = build_results(args, dataset, finished, stores, estimate, graph_id, abstracts, len(facts), on)
        write_reports(results, args.output)
        return results
    confirm_estimate(total_calls, threshold=args.confirm_above, yes=args.yes, ask=ask, stdin_is_tty=stdin_is_tty)

    interrupted = False
    progress = ProgressBar(total_calls + sum(len(p) for p in pending.values()), sum(len(p) for p in pending.values()))
    try:
        prepare_graph(off, graph_id, facts, off.data_dir / f"import-{graph_id}.json", echo)
        for label, config in labels.items():
            reset_graphiti()  # a new runtime with this phase's reranker, same data
            adapter = GraphitiAdapter(config)
            judge = getattr(adapter.runtime.reranker, "judge", None)
            search_claims(adapter, graph_id, claims, stores[label], args.limit, progress, label, judge)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        progress.close()
        reset_graphiti()

    results = build_results(args, dataset, claims, stores, estimate, graph_id, abstracts, len(facts), on)
    write_reports(results, args.output)
    if interrupted:
        raise BenchInterrupted(results)
    return results


def live_settings(on: Config) -> dict:
    """What orders the on phase besides model and strategy: part of its results' key."""
    cheap = {key: value for key, value in (("cosine", on.reranker_cosine_weight), ("depth", on.reranker_judge_depth))
             if value}  # only when set, so runs stored before these settings existed keep their key
    if on.reranker_judge_depth and on.reranker_judge_focus != "top":
        cheap["focus"] = on.reranker_judge_focus
    return dict(fusion=on.reranker_fusion, weight=on.reranker_fusion_weight, budget=on.reranker_budget_s,
                trace=TRACE_VERSION, **cheap)


def live_label(strategy_label: str, on: Config) -> str:
    fusion = "" if on.reranker_fusion == "none" else f", fusion {on.reranker_fusion} w={on.reranker_fusion_weight:g}"
    budget = f", budget {on.reranker_budget_s:g} s" if on.reranker_budget_s else ""
    return f"reranker on ({strategy_label}{fusion}{budget})"


def _aggregate(records: list[dict], dataset, estimated_calls: int) -> tuple[dict, dict]:
    records = [{key: value for key, value in record.items() if key != "trace"} for record in records]
    aggregate, per_query = summarize(records, dataset.qrels, dataset.relevance_level)
    latencies = [r["latency_s"] for r in records]
    aggregate.update(
        search_p50_s=round(percentile(latencies, 0.5), 3), search_p95_s=round(percentile(latencies, 0.95), 3),
        first_stage_p50_ms=round(percentile([r["first_stage_ms"] or 0 for r in records], 0.5), 1),
        rerank_p50_ms=round(percentile([r["rerank_ms"] or 0 for r in records], 0.5), 1),
        search_errors=sum(1 for r in records if r.get("error")),
        abstracts_per_query=round(sum(len(r["ranking"]) for r in records) / len(records), 2) if records else 0,
        estimated_calls_run=estimated_calls,
    )
    judged = [r["judged"] for r in records if r.get("judged") is not None]
    if judged:
        aggregate["judged_per_query"] = round(sum(judged) / len(judged), 2)
    return aggregate, per_query


# Counters a budget replay cuts to the share of the work that had finished when the budget ended.
_CUT_BY_BUDGET = ("prompt_tokens", "completion_tokens", "model_requests", "prompt_tokens_evaluated", "prompt_eval_us")


def replayed_records(records: list[dict], replay: Replay, limit: int) -> list[dict]:
    """The on phase's records with the ranking this replay gives. Under a budget, or asking the judge
    about fewer candidates (a cascade), the search would have ended sooner and judged fewer: latency,
    calls and tokens are cut to that share of the work (one slot judges passages one after another)."""
    replayed = []
    for record in records:
        trace = record["trace"]
        row = {**record, "ranking": fused_ranking(trace, replay, limit)}
        if replay.budget_s is not None or replay.depth:
            judged = judged_in(trace, replay, limit)
            share = judged / record["calls"] if record["calls"] else 0.0
            rerank_s = (record["rerank_ms"] or 0) / 1000
            kept_s = rerank_s * share if replay.depth else rerank_s
            if replay.budget_s is not None:
                kept_s = min(kept_s, replay.budget_s)
            row.update(latency_s=round(record["latency_s"] - max(0.0, rerank_s - kept_s), 4),
                       judged=judged, calls=min(judged, record["calls"]),
                       **{key: round(record.get(key, 0) * share) for key in _CUT_BY_BUDGET})
        replayed.append(row)
    return replayed


def cosine_records(records: list[dict], limit: int) -> list[dict]:
    """The embedder's cosine order of the same candidates: the first stage plus embedding them."""
    zero = dict.fromkeys(("calls", "invalid_outputs", "fallbacks", "unit_fallbacks", "passage_failures",
                          "cache_hits", "breaker_skips", *_CUT_BY_BUDGET), 0)
    return [{**record, **zero, "ranking": cosine_ranking(record["trace"], limit), "judged": 0,
             "latency_s": round((record["first_stage_ms"] or 0) / 1000 + record.get("cosine_s", 0.0), 4),
             "rerank_ms": round(record.get("cosine_s", 0.0) * 1000, 1), "model_wait_s": 0.0}
            for record in records if record["trace"].get("cosine") is not None]


def build_results(args, dataset, claims, stores, estimate, graph_id, abstracts, facts, on: Config) -> dict:
    wanted = [claim.qid for claim in claims]
    strategies, per_query = {}, {}
    for label, store in stores.items():
        records = [store.done[qid] for qid in wanted if qid in store.done]
        strategies[label], per_query[label] = _aggregate(records, dataset, estimate[label][0])
    on_label = next(label for label in stores if label != "reranker off")
    traced = [record for qid in wanted if "trace" in (record := stores[on_label].done.get(qid) or {})]
    live = Replay(on.reranker_fusion, on.reranker_fusion_weight, None, on.reranker_cosine_weight,
                  on.reranker_judge_depth, on.reranker_judge_focus)
    mismatches = [r["qid"] for r in traced if fused_ranking(r["trace"], live, args.limit) != r["ranking"]]
    budgets = [replace(live, budget_s=budget) for budget in args.budgets]
    for replay in [*args.replays, *budgets]:
        strategies[replay.label], per_query[replay.label] = _aggregate(
            replayed_records(traced, replay, args.limit), dataset, 0)
    cosine = cosine_records(traced, args.limit)
    if cosine:
        strategies["embedder cosine alone"], per_query["embedder cosine alone"] = _aggregate(cosine, dataset, 0)
    trec = trec_graph.is_trec_folder(dataset.path)
    return {
        "benchmark": "graph", "dataset": dataset.name, "relevance_level": dataset.relevance_level,
        "queries_selected": len(claims), "query_ids": wanted, "query_range": args.query_range,
        "graph_id": graph_id, "corpus": "candidates union" if trec else args.corpus,
        "abstracts": abstracts, "facts": facts, "mapping": trec_graph.MAPPING_VERSION if trec else MAPPING_VERSION,
        "limit": args.limit, "candidates_per_query": args.limit * on.reranker_candidates,
        "fusion": live.method, "fusion_weight": live.weight, "budget_s": on.reranker_budget_s,
        "replayed_queries": len(traced), "replay_mismatches": mismatches,
        "model": args.config.reranker_model, "base_url": redact_url(args.config.reranker_base_url),
        "concurrency": args.config.reranker_max_parallel, "command": args.command,
        "strategies": strategies, "per_query": per_query, **args.extra,
    }
