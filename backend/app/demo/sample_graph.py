"""The shipped sample graph (app/data/sample_graph.jsonl) and its demo questions.

The scenario: Port Alder, a coastal town whose drinking water was contaminated in March 2025
(E. coli after a storm, then PFAS), with its water authority, council, hospital, reporters,
companies and residents. A few facts share words with the demo questions but not their topic
(a water polo club, the Water Street Bakery, a lobster boil): the first stage ranks some of them
high, which is what the reranker is there to fix.

demo_questions.json lists, for each question, the exact fact texts a good answer needs. A hit is
"on topic" when its fact text is one of them: no uuids, no model, nothing that depends on a run.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from importlib import resources

from app.graph.fact_parsing import FactInput, parse_fact

logger = logging.getLogger(__name__)

DEMO_GRAPH_ID = "demo"
_NAME_PREFIX = "Port Alder sample graph"


@dataclass(frozen=True)
class DemoQuestion:
    question: str
    relevant_facts: frozenset[str]
    keyword_distractors: tuple[str, ...]

    def on_topic(self, fact: str) -> bool:
        return fact in self.relevant_facts


@dataclass(frozen=True)
class ImportOutcome:
    imported: bool  # False: the graph was already there, unchanged
    facts: int
    entities: int


def _data_text(name: str) -> str:
    return resources.files("app").joinpath("data", name).read_text(encoding="utf-8")


def sample_graph_text() -> str:
    return _data_text("sample_graph.jsonl")


def load_facts(text: str | None = None) -> list[FactInput]:
    """Every fact of the sample graph, validated like an upload (a bad line names its number)."""
    text = sample_graph_text() if text is None else text
    return [
        parse_fact(json.loads(line), number, unit="line")
        for number, line in enumerate(text.splitlines(), start=1)
        if line.strip()
    ]


def load_questions() -> list[DemoQuestion]:
    data = json.loads(_data_text("demo_questions.json"))
    return [
        DemoQuestion(
            question=item["question"],
            relevant_facts=frozenset(item["relevant_facts"]),
            keyword_distractors=tuple(item.get("keyword_distractors", ())),
        )
        for item in data["questions"]
    ]


def graph_name(text: str) -> str:
    """The registry name of the imported graph; it carries the file's hash, so an edited file is noticed."""
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
    return f"{_NAME_PREFIX} {digest}"


def entity_count(facts: list[FactInput]) -> int:
    return len({name for fact in facts for name in (fact.source, fact.target)})


def ensure_sample_graph(
    graph, graph_id: str = DEMO_GRAPH_ID, *, force: bool = False, on_import=None
) -> ImportOutcome:
    """Import the sample graph into `graph_id` unless the same file is already fully imported there.

    `graph` is the adapter's graph namespace. The check is the registry name (file hash) plus the
    edge count, so a file edited since, or an import cut short by Ctrl-C, is imported again from
    scratch (deleting the graph first, which drops whatever a cut-short import left).
    `on_import(n_facts)` is called before an import starts (progress for the user).
    """
    text = sample_graph_text()
    facts = load_facts(text)
    name = graph_name(text)
    existing = next((g for g in graph.list() if g["graph_id"] == graph_id), None)
    if existing is not None:
        complete = existing.get("name") == name and graph.stats(graph_id)["edges"] == len(facts)
        if complete and not force:
            return ImportOutcome(imported=False, facts=len(facts), entities=entity_count(facts))
        logger.info("Re-importing graph %s (changed, incomplete or forced)", graph_id)
        graph.delete(graph_id)
    if on_import is not None:
        on_import(len(facts))
    graph.create(graph_id, name)
    # A failed import rolls itself back; one cut short by Ctrl-C may go on writing on the graph loop
    # for a moment, so it is not deleted here: the edge count tells the next run to start over.
    result = graph.import_facts(graph_id, facts)
    return ImportOutcome(imported=True, facts=result["imported"], entities=result["entities"])
