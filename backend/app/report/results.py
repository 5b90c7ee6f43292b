"""Typed results of the report tools: `to_dict()` for the API, `to_text()` for the agent's prompt,
`log_details()` for the agent's step log. Which tool gives which type: tool_registry.py."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from app.report.views import BudgetedText, EntityView, FactView


class ToolResult:
    """Shared by the result types: `render()` builds the budgeted text once per call."""

    max_chars = 4000

    def render(self) -> BudgetedText:  # pragma: no cover - every subclass overrides it
        raise NotImplementedError

    def to_text(self) -> str:
        return self.render().text()

    def all_facts(self) -> list[FactView]:
        """Every fact the result holds (the ones an agent may cite)."""
        return []

    def fact_uuids(self) -> set[str]:
        return {fact.uuid for fact in self.all_facts()}

    def log_details(self) -> dict[str, Any]:
        """What the tool chose by itself, for the agent's step log."""
        return {}

    def _text_info(self) -> dict[str, Any]:
        text = self.render()
        return {"text_truncated": text.truncated, "text_left_out": dict(text.left_out), "max_chars": self.max_chars}


def relation_chains(facts: list[FactView]) -> list[str]:
    return list(dict.fromkeys(fact.relation_chain for fact in facts))


@dataclass
class SearchResult(ToolResult):
    graph_id: str
    query: str
    scope: str
    facts: list[FactView]
    entities: list[EntityView]
    reranked: bool
    error: str | None = None
    max_chars: int = 4000
    already_shown: list[str] = field(default_factory=list)  # uuids the reader had, left out for others

    def all_facts(self) -> list[FactView]:
        return list(self.facts)

    def log_details(self) -> dict[str, Any]:
        return {"already_shown": len(self.already_shown)}

    def render(self) -> BudgetedText:
        text = BudgetedText(self.max_chars)
        text.header(f"Graph search for: {self.query}")
        if self.error:
            text.header(f"Search error: {self.error}")
        text.header(f"Facts ({len(self.facts)}, best first):" if self.facts else "Facts: none found.")
        if self.already_shown:
            text.header(f"({len(self.already_shown)} facts you were shown before are left out; these are others.)")
        for fact in self.facts:
            text.item(fact.line(), "facts", cap=self.max_chars * 3 // 4)
        if self.entities:
            text.header(f"Entities ({len(self.entities)}):")
            for entity in self.entities:
                text.item(entity.line(), "entities")
        chains = relation_chains(self.facts)
        if chains:
            text.header(f"Relations ({len(chains)}):")
            for chain in chains:
                text.item(f"- {chain}", "relations")
        return text

    def to_dict(self) -> dict:
        return {"graph_id": self.graph_id, "query": self.query, "scope": self.scope,
                "reranked": self.reranked, "error": self.error, "already_shown": self.already_shown,
                "facts": [fact.to_dict() for fact in self.facts],
                "entities": [entity.to_dict() for entity in self.entities],
                "relations": relation_chains(self.facts), **self._text_info()}


@dataclass
class InsightResult(ToolResult):
    graph_id: str
    question: str
    sub_queries: list[str]
    facts: list[FactView]  # merged over the sub-queries, deduplicated by uuid, best score first
    entities: list[EntityView]  # the entities the facts involve, with their summaries
    chains: list[str]  # "A -[R]-> B" and two-step "A -[R]-> B -[S]-> C"
    reranked: bool
    errors: list[str] = field(default_factory=list)
    entities_left_out: int = 0
    max_chars: int = 6000

    def all_facts(self) -> list[FactView]:
        return list(self.facts)

    def log_details(self) -> dict[str, Any]:
        return {"sub_queries": self.sub_queries}

    def render(self) -> BudgetedText:
        text = BudgetedText(self.max_chars)
        text.header(f"Deep retrieval for: {self.question}")
        text.header("Sub-queries searched: " + " | ".join(self.sub_queries))
        for error in self.errors:
            text.header(f"Note: {error}")
        text.header(f"Facts ({len(self.facts)}, merged, best first):" if self.facts else "Facts: none found.")
        for fact in self.facts:  # as much room as a search gives them: facts are what a report can cite
            text.item(fact.line(), "facts", cap=self.max_chars * 3 // 4)
        if self.entities:
            more = f", {self.entities_left_out} more not looked up" if self.entities_left_out else ""
            text.header(f"Entities involved ({len(self.entities)}{more}):")
            for entity in self.entities:
                text.item(entity.line(), "entities", cap=self.max_chars // 4)
        if self.chains:
            text.header(f"Relationship chains ({len(self.chains)}):")
            for chain in self.chains:
                text.item(f"- {chain}", "chains")
        return text

    def to_dict(self) -> dict:
        return {"graph_id": self.graph_id, "question": self.question,
                "sub_queries": self.sub_queries, "reranked": self.reranked, "errors": self.errors,
                "facts": [fact.to_dict() for fact in self.facts],
                "entities": [entity.to_dict() for entity in self.entities],
                "entities_left_out": self.entities_left_out, "chains": self.chains, **self._text_info()}


@dataclass
class PanoramaResult(ToolResult):
    graph_id: str
    query: str
    entities: list[EntityView]  # every entity read, relevant ones first
    current: list[FactView]  # facts in force, relevant ones first
    historical: list[FactView]  # facts no longer true (an end date, or expired), relevant ones first
    relevant_uuids: set[str]  # facts and entities the search found relevant
    total_nodes: int
    total_edges: int
    reranked: bool
    error: str | None = None
    max_chars: int = 8000

    @property
    def not_read(self) -> dict[str, int]:
        """What the paged reads did not reach (a graph larger than the read limits)."""
        facts_read = len(self.current) + len(self.historical)
        return {"entities": max(0, self.total_nodes - len(self.entities)),
                "facts": max(0, self.total_edges - facts_read)}

    def all_facts(self) -> list[FactView]:
        return self.current + self.historical

    def _marked(self, uuid: str, line: str) -> str:
        return "*" + line[1:] if uuid in self.relevant_uuids else line  # "* ..." instead of "- ..."

    def render(self) -> BudgetedText:
        text = BudgetedText(self.max_chars)
        relevant = sum(1 for fact in self.current + self.historical if fact.uuid in self.relevant_uuids)
        text.header(f"Panorama for: {self.query}")
        text.header(f"Graph: {self.total_nodes} entities, {self.total_edges} facts; {relevant} facts found "
                    "relevant by search (marked *), listed first.")
        if self.error:
            text.header(f"Search error: {self.error}")
        missing = self.not_read
        if any(missing.values()):
            text.header(f"Not read (over the read limit): {missing['entities']} entities, {missing['facts']} facts.")
        text.header(f"Entities ({len(self.entities)}):")
        for entity in self.entities:
            text.item(self._marked(entity.uuid, entity.line()), "entities", cap=self.max_chars // 4)
        text.header(f"Current facts ({len(self.current)}):")
        for fact in self.current:
            text.item(self._marked(fact.uuid, fact.line()), "current facts", cap=self.max_chars // 2)
        text.header(f"Historical facts, no longer true ({len(self.historical)}):")
        for fact in self.historical:
            text.item(self._marked(fact.uuid, fact.line()), "historical facts")
        return text

    def to_dict(self) -> dict:
        return {"graph_id": self.graph_id, "query": self.query, "reranked": self.reranked,
                "error": self.error, "total_nodes": self.total_nodes, "total_edges": self.total_edges,
                "not_read": self.not_read, "relevant_uuids": sorted(self.relevant_uuids),
                "entities": [entity.to_dict() for entity in self.entities],
                "current_facts": [fact.to_dict() for fact in self.current],
                "historical_facts": [fact.to_dict() for fact in self.historical], **self._text_info()}


DONT_KNOW = "I don't know."


@dataclass
class InterviewAnswer:
    question: str
    answer: str
    cited_fact_uuids: list[str] = field(default_factory=list)
    invalid_citations: list[str] = field(default_factory=list)  # cited, but not among the entity's facts
    knows: bool = False
    withheld_answer: str | None = None  # an answer that cited none of the facts, replaced by DONT_KNOW

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class EntityInterview:
    entity: EntityView
    facts: list[FactView]  # topic-ranked facts first (search order), then the entity's other facts
    answers: list[InterviewAnswer]
    facts_left_out: int = 0
    error: str | None = None

    def to_dict(self) -> dict:
        return {"entity": self.entity.to_dict(), "facts": [fact.to_dict() for fact in self.facts],
                "facts_left_out": self.facts_left_out, "answers": [a.to_dict() for a in self.answers],
                "error": self.error}


@dataclass
class InterviewResult(ToolResult):
    graph_id: str
    topic: str
    questions: list[str]
    interviews: list[EntityInterview]
    not_found: list[str]  # entity names asked for that the graph does not hold
    summary: str
    reranked: bool
    error: str | None = None
    max_chars: int = 6000

    def all_facts(self) -> list[FactView]:
        return [fact for interview in self.interviews for fact in interview.facts]

    def log_details(self) -> dict[str, Any]:
        return {"interviewed": [interview.entity.name for interview in self.interviews],
                "not_found": self.not_found}

    def render(self) -> BudgetedText:
        text = BudgetedText(self.max_chars)
        text.header(f"Interviews on: {self.topic}")
        text.header(f"Summary: {self.summary}")
        if self.not_found:
            text.header("Not in the graph: " + ", ".join(self.not_found))
        for interview in self.interviews:
            text.header(f"## {interview.entity.name}" + (f" (error: {interview.error})" if interview.error else ""))
            for answer in interview.answers:
                cited = f" [cites: {', '.join(answer.cited_fact_uuids)}]" if answer.cited_fact_uuids else ""
                text.item(f"Q: {answer.question}\nA: {answer.answer}{cited}", "answers")
            for fact in interview.facts:
                text.item(fact.line(), "facts", cap=self.max_chars // 3)
        return text

    def to_dict(self) -> dict:
        return {"graph_id": self.graph_id, "topic": self.topic, "questions": self.questions,
                "summary": self.summary, "reranked": self.reranked, "error": self.error,
                "not_found": self.not_found, "interviews": [i.to_dict() for i in self.interviews],
                **self._text_info()}
