"""`bench graph` on a small SciFact subset: a real FalkorDB, the in-process embedder, a scripted judge.

Three claims whose relevant abstract sits at BM25 rank 2-4 of their first four candidates; the
graph holds those 12 abstracts, one fact per sentence plus the title. The judge knows which
abstract every fact comes from (through the same mapping the benchmark imports), and says yes
exactly to facts of a relevant abstract: so wherever such a fact reaches the reranker, the
reranked search must put that abstract first, and the off/on rankings must name only abstracts
of the subset.
"""

from __future__ import annotations

import json

import pytest

from dataclasses import replace

from bench.datasets import DatasetError, load_dataset
from bench.first_stage import EXACT, INDEX, INDEX_COPY, FirstStageArgs, run_first_stage_bench
from bench.graph_bench import (
    GraphBenchArgs, abstract_facts, hits_to_abstracts, run_graph_bench, select_queries, split_sentences,
)
from bench.replay import FOCUS_LABELS, TRACE_VERSION, Replay, parse_replays, sure_stop
from bench.rerankers import parse_strategies, with_model_options
from bench.trec_graph import is_trec_folder, passage_facts
from app.config import RERANKER_JUDGE_FOCI, Config
from app.graph.loop import run_on_loop
from app.graph.runtime import GraphitiAdapter, reset_graphiti
from app.graph.search import EdgeHit
from app.graph.vector_index import index_state
from tests.conftest import unique_graph_id
from tests.support.scripted_llm import judge
from tests.support.shared_data import shared_dataset
from tests.support.bench_cli import bench_cli

SCIFACT = "beir-scifact-test"
CLAIMS = ("42", "54", "128")
CANDIDATES_PER_CLAIM = 4


def _lines(path):
    return path.read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="module")
def subset(tmp_path_factory):
    """The three claims, their qrels, their first four candidates and those abstracts, copied to tmp."""
    folder, scifact = tmp_path_factory.mktemp("scifact-subset"), shared_dataset(SCIFACT)
    queries = [line for line in _lines(scifact / "queries.tsv") if line.split("\t")[0] in CLAIMS]
    qrels = [line for line in _lines(scifact / "qrels.txt") if line.split()[0] in CLAIMS]
    candidates, pool = [], set()
    for line in _lines(scifact / "candidates.top20.jsonl"):
        record = json.loads(line)
        if record["qid"] in CLAIMS:
            record["candidates"] = record["candidates"][:CANDIDATES_PER_CLAIM]
            pool.update(c["docid"] for c in record["candidates"])
            candidates.append(json.dumps(record))
    corpus = [line for line in _lines(scifact / "corpus.jsonl") if json.loads(line)["_id"] in pool]
    for name, lines in (("queries.tsv", queries), ("qrels.txt", qrels), ("candidates.jsonl", candidates),
                        ("corpus.jsonl", corpus)):
        (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    relevant = {}
    for line in qrels:
        qid, _, docid, _ = line.split()
        relevant.setdefault(qid, set()).add(docid)
    claims = {line.split("\t")[0]: line.split("\t")[1] for line in queries}
    fact_doc = {fact["fact"]: fact["metadata"]["doc_id"]
                for line in corpus for record in [json.loads(line)]
                for fact in abstract_facts(record["_id"], record["title"], record["text"])}
    assert len(claims) == 3 and len(pool) == 12 and all(relevant[q] <= pool for q in CLAIMS)
    return folder, claims, relevant, fact_doc, pool


def graph_args(folder, output, base_url, **overrides):
    values = dict(
        dataset=folder, output=output, max_queries=None, limit=5, corpus="candidates",
        # The judge's own order (fusion is replayed, and has its own test below).
        config=with_model_options(replace(Config.from_env(), reranker_fusion="none"), base_url=base_url,
                                  model="scripted", concurrency=2, timeout_s=10, deadline_s=30),
        strategy=parse_strategies("pointwise:logprobs", "logprobs")[0], yes=True,
    )
    values.update(overrides)
    return GraphBenchArgs(**values)


def test_claims_are_searched_off_and_on_and_mapped_back_to_abstract_ids(subset, tmp_path, scripted_llm):
    folder, claims, relevant, fact_doc, pool = subset
    qid_of = {text: qid for qid, text in claims.items()}
    scripted_llm.responder = judge(lambda claim, fact: 0.95 if fact_doc[fact] in relevant[qid_of[claim]] else 0.05)
    lines: list[str] = []
    results = run_graph_bench(graph_args(folder, tmp_path / "out", scripted_llm.base_url), echo=lines.append)

    off, on = results["strategies"]["reranker off"], results["strategies"]["reranker on (pointwise:logprobs)"]
    assert off["calls"] == 0 and on["calls"] == scripted_llm.count > 0
    assert on["calls"] <= on["estimated_calls_run"] == 3 * 5 * Config().reranker_candidates
    assert off["search_errors"] == on["search_errors"] == 0 and off["queries"] == on["queries"] == 3

    judged = {}
    for body in scripted_llm.requests:
        user = body["messages"][-1]["content"]
        claim = next(text for text in claims.values() if text in user)
        judged.setdefault(qid_of[claim], set()).update(doc for fact, doc in fact_doc.items() if fact in user)
    for qid in CLAIMS:
        for phase in ("reranker off", "reranker on (pointwise:logprobs)"):
            ranking = results["per_query"][phase][qid]["ranking"]
            assert ranking and set(ranking) <= pool and len(ranking) == len(set(ranking))
        on_ranking = results["per_query"]["reranker on (pointwise:logprobs)"][qid]["ranking"]
        if judged.get(qid, set()) & relevant[qid]:  # a relevant fact reached the judge: its abstract leads
            assert on_ranking[0] in relevant[qid]
            assert results["per_query"]["reranker on (pointwise:logprobs)"][qid]["mrr@10"] == 1.0
    assert any(judged.get(qid, set()) & relevant[qid] for qid in CLAIMS)
    assert on["mrr@10"] >= off["mrr@10"]
    assert on["search_p50_s"] > 0 and off["first_stage_p50_ms"] > 0
    assert (tmp_path / "out" / "results.json").is_file() and (tmp_path / "out" / "quality_latency.png").is_file()

    # A rerun reuses the imported graph and every finished claim: no import, no model call.
    calls = scripted_llm.count
    lines.clear()
    again = run_graph_bench(graph_args(folder, tmp_path / "out", scripted_llm.base_url), echo=lines.append)
    assert scripted_llm.count == calls and not any(line.startswith("Importing") for line in lines)
    assert again["strategies"]["reranker on (pointwise:logprobs)"]["ndcg@10"] == on["ndcg@10"]
    report = run_graph_bench(graph_args(folder, tmp_path / "out", scripted_llm.base_url, report_only=True, yes=False,
                                        confirm_above=0), echo=lines.append)
    assert scripted_llm.count == calls and report["strategies"]["reranker off"]["ndcg@10"] == off["ndcg@10"]
    # Other settings key other results: nothing to report, and the stored report is left as it is.
    written = (tmp_path / "out" / "results.json").read_text()
    other = replace(graph_args(folder, tmp_path / "out", scripted_llm.base_url).config, reranker_fusion_weight=0.3)
    with pytest.raises(DatasetError, match="no claim .* is finished"):
        run_graph_bench(graph_args(folder, tmp_path / "out", scripted_llm.base_url, report_only=True, config=other),
                        echo=lines.append)
    assert (tmp_path / "out" / "results.json").read_text() == written

    # `bench first-stage` searches the same stored graph: its exact phase is this run's reranker-off phase.
    lines.clear()
    first = run_first_stage_bench(FirstStageArgs(dataset=folder, output=tmp_path / "out", config=Config.from_env(),
                                                 limit=5), echo=lines.append)
    assert not any(line.startswith("Importing") for line in lines) and first["queries"] == 3
    exact, by_index = first["phases"][EXACT], first["phases"][INDEX]
    assert (exact["ndcg@10"], exact["mrr@10"]) == (off["ndcg@10"], off["mrr@10"])
    assert 0 < by_index["ndcg@10"] <= 1 and by_index["first_stage_p50_ms"] > 0 and 0 <= first["top_changed"] <= 3
    # The stored graph keeps no vector index (its keyword ranking stays as measured); the copy has one.
    for data, has_index in (("graph-data", False), (INDEX_COPY, True)):
        runtime = GraphitiAdapter(replace(Config.from_env(), data_dir=tmp_path / "out" / data,
                                          reranker_provider="none")).runtime
        try:
            state = run_on_loop(index_state(runtime.driver_for(first["graph_id"])), timeout=30)
        finally:
            reset_graphiti()
        assert (state is not None) is has_index, data


def test_bench_first_stage_on_a_folder_without_queries_is_one_line(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = bench_cli(
        args=["first-stage", "--dataset", str(empty), "--output", str(tmp_path / "out")])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1 and "queries.tsv" in result.output, result.output


def test_abstracts_become_title_and_sentence_facts_tagged_with_their_id():
    facts = abstract_facts("77", "A title", "First finding holds. Second (n=3) too! 3 more.")
    assert [f["fact"] for f in facts] == ["A title", "First finding holds.", "Second (n=3) too!", "3 more."]
    assert {f["metadata"]["doc_id"] for f in facts} == {"77"}
    assert split_sentences("e.g. this stays whole. Next") == ["e.g. this stays whole.", "Next"]


def _hit(doc_id, rank):
    return EdgeHit(uuid=str(rank), fact="f", score=1.0, rank=rank, first_stage_rank=rank, first_stage_score=1.0,
                   rerank_score=None, relation="STATES", source=None, target=None, source_uuid="s",
                   target_uuid="t", valid_at=None, invalid_at=None, expired_at=None, created_at=None,
                   metadata={} if doc_id is None else {"doc_id": doc_id, "sentence": rank})


def test_hits_map_to_abstracts_in_first_occurrence_order():
    hits = [_hit("9", 1), _hit("4", 2), _hit("9", 3), _hit(None, 4), _hit("5", 5)]
    assert hits_to_abstracts(hits) == ["9", "4", "5"]


# -- a TREC candidate folder in the graph, and replays of the stored judge scores -------------------

DL19 = "trec-dl19-passage-bm25-top100"
TREC_QUERIES = 3
TREC_CANDIDATES = 4


@pytest.fixture(scope="module")
def trec_subset(tmp_path_factory):
    """Three DL19 queries, their first four BM25 candidates, and the second query's list also holding
    the first query's best passage: a passage in two candidate lists must still be one fact."""
    folder, dl19 = tmp_path_factory.mktemp("dl19-subset"), shared_dataset(DL19)
    records = [json.loads(line) for line in _lines(dl19 / "candidates.jsonl")][:TREC_QUERIES]
    for record in records:
        record["candidates"] = record["candidates"][:TREC_CANDIDATES]
    shared = dict(records[0]["candidates"][0], rank=TREC_CANDIDATES + 1)
    records[1]["candidates"].append(shared)
    qids = [record["qid"] for record in records]
    queries = [line for line in _lines(dl19 / "queries.tsv") if line.split("\t")[0] in qids]
    qrels = [line for line in _lines(dl19 / "qrels.txt") if line.split()[0] in qids]
    for name, lines in (("queries.tsv", queries), ("qrels.txt", qrels),
                        ("candidates.jsonl", [json.dumps(record) for record in records])):
        (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    texts = {c["docid"]: c["text"] for record in records for c in record["candidates"]}
    grades = {(line.split()[0], line.split()[2]): int(line.split()[3]) for line in qrels}
    query_text = {line.split("\t")[0]: line.split("\t")[1] for line in queries}
    assert len(texts) == TREC_QUERIES * TREC_CANDIDATES and shared["docid"] in texts
    return folder, texts, grades, query_text


def test_trec_import_maps_every_hit_back_to_its_passage_exactly_once(trec_subset, backend):
    folder, texts, _, query_text = trec_subset
    dataset = load_dataset(folder)
    facts = passage_facts(dataset)
    assert is_trec_folder(folder) and not is_trec_folder(shared_dataset(SCIFACT))
    # The union of the candidate lists: each passage once (the shared one too), text unchanged.
    assert [fact["metadata"]["doc_id"] for fact in facts] == list(dict.fromkeys(
        c.docid for query in dataset.queries for c in query.candidates))
    assert {fact["metadata"]["doc_id"]: fact["fact"] for fact in facts} == texts

    backend()
    graph = GraphitiAdapter().graph
    gid = unique_graph_id("trec")
    graph.create(gid)
    graph.import_facts(gid, facts)
    assert graph.stats(gid)["edges"] == len(texts)
    for query in query_text.values():
        hits = graph.search(gid, query, limit=len(texts)).edges
        ranking = hits_to_abstracts(hits)
        assert len(hits) == len(texts) and len(ranking) == len(hits)  # every passage found, each once
        assert all(hit.fact == texts[hit.metadata["doc_id"]] for hit in hits)


FALKOR_KEYWORD_QUERY = ("CALL db.idx.fulltext.queryRelationships('RELATES_TO', $query) YIELD relationship AS e, "
                        "score RETURN e.doc_id AS doc_id, score ORDER BY score DESC, doc_id")


def _keyword_scores(config: Config, graph_id: str, queries) -> list[list[tuple[str, float]]]:
    """The keyword half's raw full-text scores on the running FalkorDB, as graphiti queries it."""
    from graphiti_core.search.search_utils import fulltext_query
    from app.graph.loop import run_on_loop

    driver = GraphitiAdapter(config).runtime.driver_for(graph_id)  # the running one, else started on `config`
    scores = []
    for text in queries:
        records = run_on_loop(driver.execute_query(FALKOR_KEYWORD_QUERY,
                                                   query=fulltext_query(text, [graph_id], driver)))[0]
        scores.append([(str(record["doc_id"]), round(float(record["score"]), 9)) for record in records])
    return scores


def test_a_fresh_import_is_searched_over_the_index_a_restart_rebuilds(trec_subset, backend, tmp_path):
    """graphiti writes each FalkorDB edge twice (its fields, then its vector); RediSearch keeps the
    first version's postings until its garbage collector runs, and they count in the scores. The
    bench's searches must see the index a restarted database rebuilds, whether or not it just imported."""
    from bench.graph_bench import prepare_graph
    from app.graph.runtime import reset_graphiti

    folder, texts, _, query_text = trec_subset
    backend()  # the embedded FalkorDB of the test settings
    config = replace(Config.from_env(), data_dir=tmp_path / "graph-data", reranker_provider="none")
    gid = unique_graph_id("fresh")
    try:
        prepare_graph(config, gid, passage_facts(load_dataset(folder)), tmp_path / "import.json", echo=lambda _: None)
        after_import = _keyword_scores(config, gid, query_text.values())
        reset_graphiti()  # the same data loaded again: the index is rebuilt
        after_restart = _keyword_scores(config, gid, query_text.values())
    finally:
        reset_graphiti()
    assert all(after_restart) and after_import == after_restart


def test_select_queries_takes_a_1_based_inclusive_range(trec_subset):
    dataset = load_dataset(trec_subset[0])
    qids = [query.qid for query in dataset.queries]
    assert [q.qid for q in select_queries(dataset, (2, 3), None)] == qids[1:3]
    assert [q.qid for q in select_queries(dataset, (2, 3), 1)] == qids[1:2]
    assert [q.qid for q in select_queries(dataset, None, 2)] == qids[:2]


def test_replayed_fusions_equal_the_live_search_and_cost_no_model_call(trec_subset, tmp_path, scripted_llm):
    folder, texts, grades, query_text = trec_subset
    qid_of = {text: qid for qid, text in query_text.items()}
    doc_of = {text: docid for docid, text in texts.items()}
    # A judge that knows the qrels a little: grade / 3, so its order differs from the first stage's.
    judge_score = lambda query, passage: 0.05 + grades.get((qid_of[query], doc_of[passage]), 0) / 3.3  # noqa: E731
    scripted_llm.responder = judge(judge_score)
    live = replace(with_model_options(Config.from_env(), base_url=scripted_llm.base_url, model="scripted",
                                      concurrency=2, timeout_s=10, deadline_s=30),
                   reranker_fusion="rrf", reranker_fusion_weight=0.7, reranker_cosine_weight=0.0)
    replays = parse_replays("none,rrf:0.7,linear:0.5", 0.5)
    args = graph_args(folder, tmp_path / "out", scripted_llm.base_url, config=live, limit=3, replays=replays,
                      budgets=[1e-6])
    results = run_graph_bench(args, echo=lambda line: None)
    rows = results["strategies"]
    live_label = "reranker on (pointwise:logprobs, fusion rrf w=0.7)"

    assert results["replay_mismatches"] == [] and results["replayed_queries"] == TREC_QUERIES
    assert rows[live_label]["calls"] == scripted_llm.count > 0
    for measure in ("ndcg@10", "mrr@10", "recall@10", "calls"):
        assert rows["replay: rrf w=0.7"][measure] == rows[live_label][measure]
    # The stored records, read back from disk.
    records = [json.loads(line) for path in (tmp_path / "out" / "runs").glob("on-*.jsonl")
               for line in path.read_text().splitlines()]
    assert len(records) == TREC_QUERIES
    for record in records:
        trace = record["trace"]
        assert record["ranking"] == results["per_query"]["replay: rrf w=0.7"][record["qid"]]["ranking"]
        # The stored evidence is the judge's own score of each candidate.
        query = query_text[record["qid"]]
        assert trace["evidence"] == pytest.approx([judge_score(query, texts[d]) for d in trace["doc_ids"]], abs=1e-6)
        # Judge alone: its scores' order; a budget nothing fits in: the first stage's own order.
        by_judge = sorted(range(len(trace["doc_ids"])), key=lambda p: (-trace["evidence"][p], p))
        assert results["per_query"]["replay: judge alone"][record["qid"]]["ranking"] == \
            list(dict.fromkeys(trace["doc_ids"][p] for p in by_judge[:3]))
        assert results["per_query"]["replay: rrf w=0.7, budget 1e-06 s"][record["qid"]]["ranking"] == \
            list(dict.fromkeys(trace["doc_ids"][:3]))
        assert len(trace["cosine"]) == len(trace["doc_ids"]) and record["judged"] == len(trace["doc_ids"])
    assert rows["replay: rrf w=0.7, budget 1e-06 s"]["calls"] == 0
    assert rows["embedder cosine alone"]["calls"] == 0 and rows["embedder cosine alone"]["queries"] == TREC_QUERIES

    # Replays come from the stored scores: reporting again makes no model call.
    calls = scripted_llm.count
    again = run_graph_bench(replace(args, report_only=True, yes=False, confirm_above=0), echo=lambda line: None)
    assert scripted_llm.count == calls
    assert again["strategies"]["replay: linear w=0.5"] == rows["replay: linear w=0.5"]


@pytest.mark.parametrize("focus", RERANKER_JUDGE_FOCI)
def test_a_live_cascade_with_the_cosine_is_replayed_exactly_and_judges_only_its_depth(trec_subset, tmp_path,
                                                                                       scripted_llm, focus):
    folder, texts, grades, query_text = trec_subset
    qid_of = {text: qid for qid, text in query_text.items()}
    doc_of = {text: docid for docid, text in texts.items()}
    scripted_llm.responder = judge(lambda query, passage: 0.05 + grades.get((qid_of[query], doc_of[passage]), 0) / 3.3)
    live = replace(with_model_options(Config.from_env(), base_url=scripted_llm.base_url, model="scripted",
                                      concurrency=2, timeout_s=10, deadline_s=30),
                   reranker_fusion="rrf", reranker_fusion_weight=0.5, reranker_cosine_weight=0.3,
                   reranker_judge_depth=4, reranker_judge_focus=focus)
    cascade = "#4" if focus == "top" else f"#{focus}4"
    args = graph_args(folder, tmp_path / "out", scripted_llm.base_url, config=live, limit=3,
                      replays=parse_replays(f"rrf:0.5+0.3{cascade},rrf:0.5+0.3", 0.5), budgets=[])
    results = run_graph_bench(args, echo=lambda line: None)
    rows = results["strategies"]
    live_label = next(label for label in rows if label.startswith("reranker on"))

    # The replay reads the cosine search fused (stored vectors) and asks about the same four.
    assert results["replay_mismatches"] == [] and results["replayed_queries"] == TREC_QUERIES
    assert rows[live_label]["calls"] == 4 * TREC_QUERIES == scripted_llm.count
    replayed = rows["replay: rrf w=0.5 cos=0.3, judge 4" + FOCUS_LABELS[focus]]
    assert replayed["calls"] == rows[live_label]["calls"] and replayed["ndcg@10"] == rows[live_label]["ndcg@10"]
    records = [json.loads(line) for path in (tmp_path / "out" / "runs").glob("on-*.jsonl")
               for line in path.read_text().splitlines()]
    for record in records:
        judged = [p for p, seconds in enumerate(record["trace"]["judged_at_s"]) if seconds is not None]
        assert len(judged) == 4 == record["judged"] and len(record["trace"]["cosine"]) > 4


def test_replay_settings_name_method_weight_and_budget():
    replays = parse_replays("none, rrf:0.7, linear@30, rrf:0.7, zscore:0.6", 0.5)
    assert [(r.method, r.weight, r.budget_s) for r in replays] == [("none", 0.5, None), ("rrf", 0.7, None),
                                                                   ("linear", 0.5, 30.0), ("zscore", 0.6, None)]
    assert [r.label for r in replays] == ["replay: judge alone", "replay: rrf w=0.7", "replay: linear w=0.5, budget 30 s",
                                          "replay: zscore w=0.6"]
    for bad in ("borda", "rrf:2", "rrf:x", "linear@0", "none@soon", "rrf:0.7+0.4", "rrf:0.5+x", "rrf#-1", "rrf#a"):
        with pytest.raises(ValueError):
            parse_replays(bad, 0.5)


def test_replay_settings_name_the_cosine_share_and_the_cascade_depth():
    replays = parse_replays("rrf:0.5+0.3, linear:0.4+0.2#8, rrf:0.5+0.3#6@10, linear:0.6+0.2#cut6, "
                            "linear:0.5+0.3#disagree5", 0.7)
    assert [(r.method, r.weight, r.cosine_weight, r.depth, r.focus, r.budget_s) for r in replays] == [
        ("rrf", 0.5, 0.3, 0, "top", None), ("linear", 0.4, 0.2, 8, "top", None), ("rrf", 0.5, 0.3, 6, "top", 10.0),
        ("linear", 0.6, 0.2, 6, "cut", None), ("linear", 0.5, 0.3, 5, "disagree", None)]
    assert [r.label for r in replays] == ["replay: rrf w=0.5 cos=0.3", "replay: linear w=0.4 cos=0.2, judge 8",
                                          "replay: rrf w=0.5 cos=0.3, judge 6, budget 10 s",
                                          "replay: linear w=0.6 cos=0.2, judge 6 around the cut",
                                          "replay: linear w=0.5 cos=0.3, judge 5 where first stage and cosine disagree"]
    for bad in ("linear#cut", "linear#cutx", "linear#top6", "linear#cut-2", "linear#disagree", "linear#disagree-1"):
        with pytest.raises(ValueError):
            parse_replays(bad, 0.5)


def test_a_sure_stop_needs_every_judgement_when_one_can_reorder_all_and_one_when_the_cheap_order_rules():
    count = 8
    trace = {"version": TRACE_VERSION, "doc_ids": [f"d{i}" for i in range(count)],
             "first_scores": [1 - i / count for i in range(count)], "cosine": [0.9 - i / 10 for i in range(count)],
             "evidence": [0.9, 0.8, 0.2, 0.7, 0.1, 0.3, 0.2, 0.1], "judged_at_s": [0.1] * count, "by_score": True,
             "fell_back": False, "cut_short": None}
    # The judge alone: any candidate left unjudged could still take the top, so all eight are judged.
    assert sure_stop(trace, Replay("none", 1.0), 3) == count
    assert sure_stop(trace, Replay("linear", 1.0, focus="cut"), 3) == count
    # A judge with a tenth of the say cannot move anything past the first stage and cosine: one settles it.
    assert sure_stop(trace, Replay("linear", 0.1, cosine_weight=0.1), 3) == 1
    # The default's shares sit between: sure only after most of the list.
    assert 1 < sure_stop(trace, Replay("linear", 0.6, cosine_weight=0.2), 3) < count
