"""Loaders for dataset folders in the layout of shared/data/*.

A folder holds:
    queries.tsv        qid <TAB> query text
    qrels.txt          TREC qrels: qid <iteration> docid grade   (the iteration column is ignored)
    candidates*.jsonl  {"qid", "query", "candidates": [{"docid", "rank", "score", "text", ["title"]}]}
    corpus.jsonl       optional, BEIR format {"_id", "title", "text"} (SciFact)

The data is read where it lies; nothing is copied.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path


class DatasetError(ValueError):
    """The folder is not a usable dataset (missing file, malformed line)."""


@dataclass(frozen=True)
class Candidate:
    docid: str
    text: str


@dataclass(frozen=True)
class Query:
    qid: str
    text: str
    candidates: tuple[Candidate, ...] = ()


@dataclass
class Dataset:
    name: str
    path: Path
    queries: list[Query]
    qrels: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def relevance_level(self) -> int:
        """Lowest grade counted relevant by binary measures: 2 for graded qrels (TREC DL), else 1."""
        top = max((grade for docs in self.qrels.values() for grade in docs.values()), default=1)
        return 2 if top > 1 else 1


def _require(path: Path) -> Path:
    if not path.is_file():
        raise DatasetError(f"{path} not found")
    return path


def read_queries(path: Path) -> dict[str, str]:
    """qid -> query text, in file order."""
    queries: dict[str, str] = {}
    for number, line in enumerate(_require(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        qid, sep, text = line.partition("\t")
        if not sep or not text.strip():
            raise DatasetError(f"{path}:{number}: expected 'qid<TAB>query'")
        queries[qid.strip()] = text.strip()
    return queries


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """qid -> {docid: grade} from TREC qrels ('qid iter docid grade')."""
    qrels: dict[str, dict[str, int]] = {}
    for number, line in enumerate(_require(path).read_text(encoding="utf-8").splitlines(), start=1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 4:
            raise DatasetError(f"{path}:{number}: expected 'qid iter docid grade'")
        try:
            grade = int(parts[3])
        except ValueError:
            raise DatasetError(f"{path}:{number}: grade {parts[3]!r} is not an integer") from None
        qrels.setdefault(parts[0], {})[parts[2]] = grade
    return qrels


def candidates_file(folder: Path) -> Path:
    """candidates.jsonl, else the one candidates*.jsonl (SciFact ships candidates.top20.jsonl)."""
    exact = folder / "candidates.jsonl"
    if exact.is_file():
        return exact
    found = sorted(folder.glob("candidates*.jsonl"))
    if len(found) != 1:
        raise DatasetError(f"{folder}: expected one candidates*.jsonl file, found {len(found)}")
    return found[0]


def passage_text(record: dict) -> str:
    """A candidate's text as the judge sees it: 'title' (when there is one) on its own line first."""
    text = str(record.get("text") or "").strip()
    title = str(record.get("title") or "").strip()
    return f"{title}\n{text}" if title else text


def read_candidates(path: Path) -> dict[str, list[Candidate]]:
    """qid -> candidates in first-stage order (by 'rank' when given, else file order)."""
    result: dict[str, list[Candidate]] = {}
    for number, line in enumerate(_require(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            items = sorted(record["candidates"], key=lambda item: item.get("rank", 0))
            result[str(record["qid"])] = [Candidate(str(item["docid"]), passage_text(item)) for item in items]
        except (ValueError, KeyError, TypeError) as error:
            raise DatasetError(f"{path}:{number}: malformed candidates line ({error})") from None
    return result


def load_dataset(folder: str | Path, *, with_candidates: bool = True) -> Dataset:
    """Queries that have qrels (and, when asked, candidates), in queries.tsv order."""
    folder = Path(folder).expanduser().resolve()
    if not folder.is_dir():
        raise DatasetError(f"{folder} is not a folder")
    texts = read_queries(folder / "queries.tsv")
    qrels = read_qrels(folder / "qrels.txt")
    candidates = read_candidates(candidates_file(folder)) if with_candidates else {}
    queries = [
        Query(qid, text, tuple(candidates.get(qid, ())))
        for qid, text in texts.items()
        if qid in qrels and (not with_candidates or candidates.get(qid))
    ]
    if not queries:
        raise DatasetError(f"{folder}: no query has both qrels and candidates")
    return Dataset(name=folder.name, path=folder, queries=queries, qrels=qrels)


def iter_corpus(folder: str | Path) -> Iterator[tuple[str, str, str]]:
    """(docid, title, text) from a BEIR corpus.jsonl."""
    path = _require(Path(folder).expanduser().resolve() / "corpus.jsonl")
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                yield str(record["_id"]), str(record.get("title") or ""), str(record.get("text") or "")
            except (ValueError, KeyError, TypeError) as error:
                raise DatasetError(f"{path}:{number}: malformed corpus line ({error})") from None
