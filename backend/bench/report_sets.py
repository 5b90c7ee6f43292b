"""The report benchmark's requirement sets and the graphs they are asked over.

`sample`: the shipped sample graph and bench/data/report_bench.json, whose gold points and
distractors are the graph's own fact texts (checked here, so a typo fails loudly, not as recall 0).

`scifact`: SciFact abstracts read from --dataset and bench/data/report_bench_scifact.json. The graph
is every abstract among the chosen claims' BM25 top-20 candidates (plus their evidence abstracts),
one fact per sentence and one for the title, as `bench graph` imports them. A claim's gold points
are its evidence abstracts (its qrels, checked against the file); any sentence of one covers it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from bench.datasets import DatasetError, iter_corpus, load_dataset
from bench.report_metrics import BenchRequirement, GoldPoint
from app.demo.sample_graph import load_facts, sample_graph_text

SAMPLE_FILE = "report_bench.json"
SCIFACT_FILE = "report_bench_scifact.json"
GRAPHS = ("sample", "scifact")


@dataclass
class RequirementSet:
    graph: str  # "sample" | "scifact"
    name: str  # the set's name in reports and run keys
    requirements: list[BenchRequirement]
    facts: list  # what to import: FactInput (sample) or fact dicts (scifact)
    source_text: str  # the set file's text; its hash keys stored results


def select(requirements: list[BenchRequirement], only: list[str] | None) -> list[BenchRequirement]:
    """The requirements named in `only` (all when None), in the set's order; raises DatasetError (a
    ValueError) naming any id the set does not have."""
    if not only:
        return requirements
    unknown = sorted(set(only) - {r.id for r in requirements})
    if unknown:
        raise DatasetError(f"unknown requirement id(s) {unknown}; the set has {[r.id for r in requirements]}")
    return [r for r in requirements if r.id in only]


def default_file(graph: str) -> Path:
    name = SAMPLE_FILE if graph == "sample" else SCIFACT_FILE
    return Path(str(resources.files("bench").joinpath("data", name)))


def load_set(graph: str, path: Path | None = None, dataset: Path | None = None) -> RequirementSet:
    if graph not in GRAPHS:
        raise DatasetError(f"unknown graph {graph!r}; choose from {GRAPHS}")
    path = path or default_file(graph)
    text = Path(path).read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except ValueError as error:
        raise DatasetError(f"{path}: not JSON ({error})") from None
    if data.get("graph") != graph:
        raise DatasetError(f"{path} is a set for the {data.get('graph')!r} graph, not {graph!r}")
    if graph == "sample":
        return _sample_set(data, text, path)
    if dataset is None:
        raise DatasetError("the scifact graph needs --dataset (the BEIR SciFact folder)")
    return _scifact_set(data, text, Path(dataset))


def _sample_set(data: dict, text: str, path: Path) -> RequirementSet:
    facts = load_facts(sample_graph_text())
    known = {fact.fact for fact in facts}
    requirements = []
    for item in data["requirements"]:
        requirement = BenchRequirement(
            id=str(item["id"]), requirement=item["requirement"], sections=int(item.get("sections", 2)),
            gold=tuple(GoldPoint(point["point"], frozenset(point["facts"])) for point in item["gold"]),
            distractors=frozenset(item.get("distractors", ())),
        )
        unknown = sorted(requirement.known_facts() - known)
        if unknown:
            raise DatasetError(f"{path}: requirement {requirement.id!r} names facts the sample graph does not hold: "
                               f"{unknown[:3]}")
        overlap = requirement.distractors & requirement.gold_facts()
        if overlap:
            raise DatasetError(f"{path}: requirement {requirement.id!r} has facts both gold and distractor")
        requirements.append(requirement)
    return RequirementSet("sample", "sample", requirements, facts, text)


def _scifact_set(data: dict, text: str, dataset: Path) -> RequirementSet:
    loaded = load_dataset(dataset)
    claims = {query.qid: query for query in loaded.queries}
    wanted = [item for item in data["claims"]]
    for item in wanted:
        qid = str(item["qid"])
        if qid not in claims:
            raise DatasetError(f"claim {qid} is not in {dataset} (with qrels and candidates)")
        evidence = sorted(doc for doc, grade in loaded.qrels[qid].items() if grade >= loaded.relevance_level)
        if sorted(map(str, item["gold_docids"])) != evidence:
            raise DatasetError(f"claim {qid}: gold_docids {item['gold_docids']} differ from the qrels {evidence}")
    pool = {c.docid for item in wanted for c in claims[str(item["qid"])].candidates}
    pool |= {str(doc) for item in wanted for doc in item["gold_docids"]}
    # graph_bench needs the bench extra (ir-measures); `python -m bench distractor-judge` and the app's
    # CLI registration read the sample set without it, so only the SciFact set imports it.
    from bench.graph_bench import abstract_facts

    facts, texts_of = [], {}
    for docid, title, body in iter_corpus(dataset):
        if docid in pool:
            pieces = abstract_facts(docid, title, body)
            facts.extend(pieces)
            texts_of[docid] = frozenset(piece["fact"] for piece in pieces)
    requirements = []
    for item in wanted:
        qid = str(item["qid"])
        missing = [str(doc) for doc in [*item["gold_docids"], *item["distractor_docids"]] if str(doc) not in texts_of]
        if missing:
            raise DatasetError(f"claim {qid}: abstracts {missing} are not in the corpus")
        requirements.append(BenchRequirement(
            id=qid, requirement=data["requirement_template"].format(claim=claims[qid].text),
            sections=int(item.get("sections", data.get("sections", 1))),
            gold=tuple(GoldPoint(f"abstract {doc}", texts_of[str(doc)]) for doc in item["gold_docids"]),
            distractors=frozenset().union(*(texts_of[str(doc)] for doc in item["distractor_docids"])),
        ))
    return RequirementSet("scifact", f"scifact-{loaded.name}", requirements, facts, text)
