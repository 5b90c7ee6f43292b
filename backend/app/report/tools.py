"""The report tools' work: SearchResult, InsightForge, Panorama and Interview over one graph (each
tool's definition, its parameters and how it is called: tool_registry.py).

They read the graph only through `GraphitiAdapter(config).graph` (search, paged node and edge
reads, node reads). Whether the search is reranked is configuration (RERANKER_PROVIDER): the
tools keep the order search gives them and never know which it was.

Each tool takes the search's filters (`filters`, app/graph/search_filters.py) and narrows every search it
runs with them. Panorama and Interview list facts beyond their searches' hits from the graph's paged reads,
which no filter narrows: with filters they list the hits alone.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable

from app.config import Config
from app.graph.search import SearchOutcome
from app.graph.search_filters import SearchFilter
from app.graph.store import UnknownGraphError, UnknownNodeError
from app.graph.runtime import GraphitiAdapter
from app.report.interview import ground_answers, interview_summary
from app.report.llm import ReportLLM, ReportLLMError
from app.report.planning import content_words, name_in_context, stem, subject_phrase, unexplored_names
from app.report.prompts import interview_messages, sub_query_messages
from app.report.results import (
    DONT_KNOW, EntityInterview, InsightResult, InterviewAnswer, InterviewResult, PanoramaResult, SearchResult,
    ToolResult, relation_chains,
)
from app.report.tool_registry import tool_named
from app.report.views import EntityView, FactView

logger = logging.getLogger(__name__)

PAGE_SIZE = 200
MAX_READ_NODES = 2000  # panorama and name lookups read at most this many; the rest is reported
MAX_READ_EDGES = 5000
MAX_ENTITY_LOOKUPS = 10  # InsightForge looks up the summaries of this many entities
MAX_CHAIN_PATHS = 10
INTERVIEW_SEARCH_LIMIT = 20
MAX_FACTS_PER_ENTITY = 12
NEIGHBOURHOOD_ENTITIES = 5  # InsightForge's question and the agent's searches judge the top entities' facts too


@dataclass(frozen=True)
class FactJudgement:
    """Facts as the reranker judged them against one question."""

    best_first: list[FactView]
    scores: dict[str, float]  # fact uuid -> the judge's relevance; only facts it scored

    def below(self, uuid: str, floor: float) -> bool:
        """Whether the judge scored the fact under `floor` (a fact it did not score never is)."""
        score = self.scores.get(uuid)
        return score is not None and score < floor


def _budget(max_chars: int | None) -> dict[str, int]:
    return {"max_chars": max_chars} if max_chars else {}


def relationship_chains(facts: list[FactView]) -> list[str]:
    """Each fact's 'A -[R]-> B', then two-step paths 'A -[R]-> B -[S]-> C' joined through B."""
    by_source: dict[str, list[FactView]] = defaultdict(list)
    for fact in facts:
        by_source[fact.source_uuid].append(fact)
    paths: list[str] = []
    for first in facts:
        for second in by_source.get(first.target_uuid, []):
            if second.uuid != first.uuid and second.target_uuid != first.source_uuid:
                paths.append(f"{first.relation_chain} -[{second.relation}]-> {second.target or '?'}")
    return relation_chains(facts) + list(dict.fromkeys(paths))[:MAX_CHAIN_PATHS]


def _stems(text: str) -> set[str]:
    return {stem(word) for word in content_words(text)}


def _best_first(merged: dict[str, FactView]) -> list[FactView]:
    # Stable sort: on equal scores the fact found first (earlier sub-query, better rank) stays first.
    return sorted(merged.values(), key=lambda fact: -(fact.score or 0.0))


def _names_of(facts: list[FactView]) -> list[str]:
    return [name for fact in facts for name in (fact.source, fact.target) if name]


class ReportTools:
    """One graph-reading service for the report agent and the HTTP API."""

    def __init__(self, config: Config, llm: ReportLLM | None = None) -> None:
        self.config = config
        self._llm = llm
        self._owns_llm = llm is None

    @property
    def graph(self):
        return GraphitiAdapter(self.config).graph

    @property
    def llm(self) -> ReportLLM:
        if self._llm is None:
            self._llm = ReportLLM.from_config(self.config)
        return self._llm

    def close(self) -> None:
        if self._owns_llm and self._llm is not None:
            self._llm.close()

    def run(self, graph_id: str, tool: str, arguments: Any) -> ToolResult:
        """Validate the arguments (UnknownToolError / ToolArgumentError) and run the tool."""
        report_tool = tool_named(tool)
        return report_tool.run(self, graph_id, report_tool.check_arguments(arguments))

    # -- SearchResult -------------------------------------------------------------------------

    def search_graph(self, graph_id: str, query: str, limit: int = 10, scope: str = "both",
                     neighbourhood: int = 0, max_chars: int | None = None,
                     already_shown: frozenset[str] = frozenset(), candidates: int | None = None,
                     filters: SearchFilter | None = None) -> SearchResult:
        """`already_shown`: facts the reader has (the agent's section so far); the answer holds
        others in their place, and says how many it left out. `candidates`: app/graph/search.py."""
        outcome = self.graph.search(graph_id, query, limit=limit, scope=scope, neighbourhood=neighbourhood,
                                    exclude=already_shown, candidates=candidates, filters=filters)
        return SearchResult(graph_id=graph_id, query=query, scope=scope, already_shown=outcome.excluded,
                            facts=[FactView.from_hit(hit, query) for hit in outcome.edges],
                            entities=[EntityView.from_hit(hit) for hit in outcome.nodes],
                            reranked=outcome.reranked, error=outcome.error, **_budget(max_chars))

    def judge_facts(self, question: str, facts: list[FactView]) -> FactJudgement | None:
        """How the configured reranker judges `facts` against `question`; None when reranking is off
        or judged nothing. Lets a caller rank facts that several searches found by one question of its own."""
        judged = self.graph.judge_passages(question, [fact.fact for fact in facts])
        if judged is None:
            return None
        return FactJudgement([facts[position] for position in judged.order],
                             {facts[position].uuid: score for position, score in judged.scores.items()})

    # -- InsightForge -------------------------------------------------------------------------

    def insight_forge(self, graph_id: str, question: str, max_sub_queries: int = 3, limit: int = 8,
                      max_chars: int | None = None, candidates: int | None = None,
                      filters: SearchFilter | None = None) -> InsightResult:
        """`candidates`: how many first-stage candidates the judge reads for the question itself
        (app/graph/search.py); its sub-queries get the usual number."""
        if not self.graph.exists(graph_id):  # before spending an LLM call on the split
            raise UnknownGraphError(graph_id)
        errors: list[str] = []
        sub_queries, split_usable = self._sub_queries(question, max_sub_queries, errors)
        merged: dict[str, FactView] = {}
        reranked = False
        for index, sub_query in enumerate(sub_queries):
            # The question itself also brings the facts around its top entities before the judge:
            # its causes and consequences rarely share its words (app/graph/search.py).
            question_itself = index == 0
            reranked = self._search_into(merged, graph_id, sub_query, limit, errors,
                                         neighbourhood=NEIGHBOURHOOD_ENTITIES if question_itself else 0,
                                         candidates=candidates if question_itself else None,
                                         filters=filters) or reranked
        if split_usable:  # slots the split left empty: follow the names the results brought up
            for name in unexplored_names(_names_of(_best_first(merged)), sub_queries,
                                         limit=max_sub_queries - len(sub_queries)):
                query = name_in_context(name, subject_phrase(question))  # the name as it bears on the question
                sub_queries.append(query)
                reranked = self._search_into(merged, graph_id, query, limit, errors, filters=filters) or reranked
        facts = _best_first(merged)
        entities, left_out = self._entities_of(graph_id, facts)
        return InsightResult(graph_id=graph_id, question=question, sub_queries=sub_queries, facts=facts,
                             entities=entities, chains=relationship_chains(facts), reranked=reranked,
                             errors=errors, entities_left_out=left_out, **_budget(max_chars))

    def _search_into(self, merged: dict[str, FactView], graph_id: str, query: str, limit: int,
                     errors: list[str], neighbourhood: int = 0, candidates: int | None = None,
                     filters: SearchFilter | None = None) -> bool:
        """Search one sub-query and merge its facts; whether the search was reranked."""
        outcome = self.graph.search(graph_id, query, limit=limit, scope="edges", neighbourhood=neighbourhood,
                                    candidates=candidates, filters=filters)
        if outcome.error:
            errors.append(f"search for {query!r} failed: {outcome.error}")
        for hit in outcome.edges:
            self._merge(merged, hit, query)
        return outcome.reranked

    def _sub_queries(self, question: str, max_sub_queries: int, errors: list[str]) -> tuple[list[str], bool]:
        """(the question, then up to max-1 sub-queries from the LLM; whether the split was usable).

        The question alone when the LLM fails. A sub-query with no content word beyond an earlier
        query's (a rewording: "drinking water crisis in Port Alder" for "What caused the
        drinking-water crisis in Port Alder?") would only find the same facts again, so it is dropped.
        """
        queries = [question]
        if max_sub_queries <= 1:
            return queries, False
        try:
            reply = self.llm.chat_json(sub_query_messages(question, max_sub_queries - 1), max_tokens=300)
        except ReportLLMError as error:
            errors.append(f"sub-query split failed ({error.error_class}); searched the question alone")
            return queries, False
        proposed = reply.get("sub_queries")
        if not isinstance(proposed, list):
            errors.append("sub-query split gave no 'sub_queries' list; searched the question alone")
            return queries, False
        seen = [_stems(question)]
        for item in proposed:
            if not (isinstance(item, str) and item.strip() and len(item) <= 500):
                continue
            words = _stems(item)
            if not words or any(words <= earlier for earlier in seen):
                continue
            seen.append(words)
            queries.append(item.strip())
            if len(queries) == max_sub_queries:
                break
        return queries, True

    @staticmethod
    def _merge(merged: dict[str, FactView], hit, sub_query: str) -> None:
        known = merged.get(hit.uuid)
        if known is None:
            merged[hit.uuid] = FactView.from_hit(hit, sub_query)
            return
        known.found_by.append(sub_query)
        if hit.score > (known.score or 0.0):
            known.score, known.rank, known.first_stage_rank = hit.score, hit.rank, hit.first_stage_rank
            known.from_neighbourhood = hit.from_neighbourhood

    def _entities_of(self, graph_id: str, facts: list[FactView]) -> tuple[list[EntityView], int]:
        uuids = list(dict.fromkeys(uuid for fact in facts for uuid in (fact.source_uuid, fact.target_uuid)))
        entities = []
        for uuid in uuids[:MAX_ENTITY_LOOKUPS]:
            try:
                entities.append(EntityView.from_row(self.graph.node(graph_id, uuid)))
            except UnknownNodeError:  # removed since the search; nothing to summarise
                continue
        return entities, max(0, len(uuids) - MAX_ENTITY_LOOKUPS)

    # -- Panorama -----------------------------------------------------------------------------

    def panorama_search(self, graph_id: str, query: str, limit: int = 30, max_chars: int | None = None,
                        filters: SearchFilter | None = None) -> PanoramaResult:
        node_rows, total_nodes = self._read_all(self.graph.nodes, graph_id, MAX_READ_NODES)
        edge_rows, total_edges = self._read_all(self.graph.edges, graph_id, MAX_READ_EDGES)
        outcome = self.graph.search(graph_id, query, limit=limit, scope="both", filters=filters)
        if filters is not None and not filters.empty:  # the paged read is not filtered: the hits alone
            edge_rows = []
        facts = self._ranked_facts(edge_rows, outcome)
        relevant = {hit.uuid for hit in outcome.edges} | {hit.uuid for hit in outcome.nodes}
        relevant |= {uuid for hit in outcome.edges for uuid in (hit.source_uuid, hit.target_uuid)}
        return PanoramaResult(
            graph_id=graph_id, query=query, entities=self._ranked_entities(node_rows, outcome, relevant),
            current=[fact for fact in facts if not fact.is_historical],
            historical=[fact for fact in facts if fact.is_historical],
            relevant_uuids=relevant, total_nodes=total_nodes, total_edges=total_edges,
            reranked=outcome.reranked, error=outcome.error, **_budget(max_chars),
        )

    @staticmethod
    def _read_all(read: Callable[..., dict], graph_id: str, cap: int) -> tuple[list[dict], int]:
        """Every row through paged reads, up to `cap`; also the total the graph holds."""
        rows: list[dict] = []
        total = 0
        while len(rows) < cap:
            page = read(graph_id, offset=len(rows), limit=min(PAGE_SIZE, cap - len(rows)))
            total = int(page["total"])
            rows.extend(page["items"])
            if not page["items"] or len(rows) >= total:
                break
        return rows, max(total, len(rows))

    @staticmethod
    def _ranked_facts(rows: list[dict], outcome: SearchOutcome) -> list[FactView]:
        """Search hits in search order (also hits beyond the read limit), then the rest as stored."""
        hits = {hit.uuid: hit for hit in outcome.edges}
        ranked = [FactView.from_hit(hit) for hit in outcome.edges]
        return ranked + [FactView.from_row(row) for row in rows if row["uuid"] not in hits]

    @staticmethod
    def _ranked_entities(rows: list[dict], outcome: SearchOutcome, relevant: set[str]) -> list[EntityView]:
        """Entity hits in search order, then entities of relevant facts, then the rest by name."""
        found = {hit.uuid for hit in outcome.nodes}
        ranked = [EntityView.from_hit(hit) for hit in outcome.nodes]
        others = [EntityView.from_row(row) for row in rows if row["uuid"] not in found]
        others.sort(key=lambda entity: entity.uuid not in relevant)  # stable: keeps name order within
        return ranked + others

    # -- Interview ----------------------------------------------------------------------------

    def interview_entities(self, graph_id: str, topic: str, questions: list[str],
                           entities: list[str] | None = None, max_entities: int = 3,
                           limit: int = INTERVIEW_SEARCH_LIMIT, max_chars: int | None = None,
                           filters: SearchFilter | None = None) -> InterviewResult:
        filtered = filters is not None and not filters.empty
        outcome = self.graph.search(graph_id, topic, limit=limit, scope="both", filters=filters)
        not_found: list[str] = []
        if entities:
            uuids, not_found = self._entities_named(graph_id, entities)
        else:
            uuids = [hit.uuid for hit in outcome.nodes]
            uuids += [uuid for hit in outcome.edges for uuid in (hit.source_uuid, hit.target_uuid)]
        interviews = [self._interview(graph_id, uuid, topic, questions, outcome, only_hits=filtered)
                      for uuid in list(dict.fromkeys(uuids))[:max_entities]]
        return InterviewResult(graph_id=graph_id, topic=topic, questions=questions, interviews=interviews,
                               not_found=not_found, summary=interview_summary(topic, questions, interviews),
                               reranked=outcome.reranked, error=outcome.error, **_budget(max_chars))

    def _entities_named(self, graph_id: str, names: list[str]) -> tuple[list[str], list[str]]:
        rows, _ = self._read_all(self.graph.nodes, graph_id, MAX_READ_NODES)
        by_name = {}
        for row in rows:
            by_name.setdefault((row.get("name") or "").casefold(), row["uuid"])
        found = [by_name[name.casefold()] for name in names if name.casefold() in by_name]
        return found, [name for name in names if name.casefold() not in by_name]

    def _interview(self, graph_id: str, uuid: str, topic: str, questions: list[str],
                   outcome: SearchOutcome, only_hits: bool = False) -> EntityInterview:
        detail = self.graph.node(graph_id, uuid)
        entity = EntityView.from_row(detail)
        # The facts the topic search ranked come first, in its order; then the entity's other facts.
        ranked = [FactView.from_hit(hit, topic) for hit in outcome.edges if uuid in (hit.source_uuid, hit.target_uuid)]
        seen = {fact.uuid for fact in ranked}
        others = [] if only_hits else detail.get("edges", [])  # a filtered search's hits are its facts
        facts = ranked + [FactView.from_row(row) for row in others if row["uuid"] not in seen]
        kept = facts[:MAX_FACTS_PER_ENTITY]
        interview = EntityInterview(entity=entity, facts=kept, answers=[], facts_left_out=len(facts) - len(kept))
        if not kept:
            interview.answers = [InterviewAnswer(question, DONT_KNOW) for question in questions]
            return interview
        try:
            reply = self.llm.chat_json(interview_messages(entity, kept, topic, questions),
                                       max_tokens=200 + 200 * len(questions))
        except ReportLLMError as error:
            interview.error = f"the model could not answer ({error.error_class})"
            interview.answers = [InterviewAnswer(question, DONT_KNOW) for question in questions]
            return interview
        interview.answers = ground_answers(reply, questions, {fact.uuid for fact in kept})
        return interview
