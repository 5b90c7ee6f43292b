"""A TREC candidate folder (queries.tsv, qrels.txt, candidates.jsonl with passage texts; no corpus.jsonl,
e.g. TREC DL19 BM25 top-100) as a graph for `python -m bench graph`.

Mapping (why): a passage is fact-sized, so each passage becomes exactly one fact, tagged with its
passage id in the fact metadata (`doc_id`); its source entity is the passage itself ("passage <id>")
and every passage points at one shared target, so no two passages can merge into one fact. The corpus
is the union of every query's candidates in the folder (not only the selected queries'), each passage
once, so development and test queries search the same graph. Hits map back to passage ids in
first-occurrence order (`graph_bench.hits_to_abstracts`).
"""

from __future__ import annotations

from pathlib import Path

from bench.datasets import Dataset

MAPPING_VERSION = "passage-fact-1"
COLLECTION = "passage collection"
MAX_FACT_CHARS = 4000  # app/graph/fact_import.py refuses longer facts


def is_trec_folder(folder: Path) -> bool:
    """Candidates with texts and no BEIR corpus: the corpus is built from the candidates."""
    return not (Path(folder) / "corpus.jsonl").is_file()


def passage_fact(docid: str, text: str) -> dict:
    return {"source": f"passage {docid}", "target": COLLECTION, "relation": "says",
            "fact": text[:MAX_FACT_CHARS], "metadata": {"doc_id": docid}}


def passage_facts(dataset: Dataset) -> list[dict]:
    """One fact per distinct passage of every query's candidates, in first-appearance order."""
    texts: dict[str, str] = {}
    for query in dataset.queries:
        for candidate in query.candidates:
            if candidate.text.strip():
                texts.setdefault(candidate.docid, candidate.text)
    return [passage_fact(docid, text) for docid, text in texts.items()]
