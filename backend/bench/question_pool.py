"""How deep must the judge read a report section's question pool? (`python -m bench question-pool`)

The report agent searches each section's own question with REPORT_QUESTION_CANDIDATES first-stage
candidates (100 by default) and the judge reads every one: most of a report's judge calls, so most
of its time. RERANKER_JUDGE_DEPTH would have the judge read only the first N of the cheap order
(the first stage fused with the embedder's cosine, what the cascade reads) and leave the rest in
that order. Whether that keeps the report's material depends on where the gold facts sit in the
pool, which needs no model call to find out: this searches each requirement of a sample-graph set
with the reranker off, orders the pool as the cascade would, and counts the gold facts within each
depth, by the first stage's order and by the cheap order.

The requirement stands in for its sections' questions (the agent writes those per run, narrower),
and the pool is the first stage's alone (the question search adds its top entities' facts after it).

    python -m bench question-pool --pool 100
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from bench.report_bench import graph_id_of
from bench.report_metrics import BenchRequirement
from bench.report_sets import RequirementSet
from app.config import Config
from app.demo.sample_graph import ensure_sample_graph
from app.graph.loop import run_on_loop
from app.graph.runtime import GraphitiAdapter, reset_graphiti
from graphiti_llm_rerank.fusion import cheap_order
from app.graph.similarity import query_cosines

DEPTHS = (10, 20, 30, 40, 50, 60, 80, 100)


@dataclass(frozen=True)
class GoldPlaces:
    """Where one requirement's gold facts sit in its pool (0-based places; facts outside the pool
    have none)."""

    id: str
    gold: int  # distinct gold facts of the requirement
    first: tuple[int, ...]  # the first-stage place of each gold fact in the pool
    cheap: tuple[int, ...]  # the same facts' places in the cheap order

    def within(self, depth: int) -> tuple[int, int]:
        """(by the first stage, by the cheap order): gold facts among the first `depth`."""
        return sum(place < depth for place in self.first), sum(place < depth for place in self.cheap)


def gold_places(graph, embedder, config: Config, graph_id: str, requirement: BenchRequirement,
                pool: int) -> GoldPlaces:
    """Search the requirement's pool with the reranker off (`graph` is the adapter's graph namespace
    on a config with RERANKER_PROVIDER=none) and place its gold facts in both orders."""
    question = requirement.requirement
    hits = graph.search(graph_id, question, limit=pool).edges
    facts = [hit.fact for hit in hits]
    cosine = run_on_loop(query_cosines(embedder, question, facts), timeout=600)
    order = cheap_order([hit.first_stage_score for hit in hits], cosine, method=config.reranker_fusion,
                        weight=config.reranker_fusion_weight, cosine_weight=config.reranker_cosine_weight)
    cheap_place = {position: place for place, position in enumerate(order)}
    gold = requirement.gold_facts()
    in_pool = [position for position, fact in enumerate(facts) if fact in gold]
    return GoldPlaces(requirement.id, len(gold), tuple(in_pool), tuple(cheap_place[p] for p in in_pool))


def depths_for(pool: int) -> list[int]:
    return [depth for depth in DEPTHS if depth < pool] + [pool]


def summary(results: list[GoldPlaces], pool: int) -> dict:
    """Pooled over the requirements: gold facts, those in the pool, and per depth the share of the
    pool's gold within it by each order."""
    in_pool = sum(len(result.first) for result in results)

    def share(count: int) -> float | None:
        return round(count / in_pool, 4) if in_pool else None

    shares = {}
    for depth in depths_for(pool):
        counts = [result.within(depth) for result in results]
        first, cheap = sum(count[0] for count in counts), sum(count[1] for count in counts)
        shares[str(depth)] = {"first_stage": share(first), "cheap": share(cheap)}
    return {"requirements": len(results), "gold_facts": sum(r.gold for r in results), "in_pool": in_pool,
            "pool": pool, "share_within_depth": shares}


def report(results: list[GoldPlaces], pool: int) -> str:
    """A Markdown table (gold facts within each depth, first stage / cheap order), then the pooled
    figures as JSON on the last line."""
    depths = depths_for(pool)
    lines = ["| requirement | gold facts | " + " | ".join(f"within {depth}" for depth in depths) + " |",
             "|---|---:|" + "---:|" * len(depths)]
    for result in results:
        cells = " | ".join("%d / %d" % result.within(depth) for depth in depths)
        lines.append(f"| {result.id} | {result.gold} | {cells} |")
    return "\n".join(lines) + "\n\n" + json.dumps(summary(results, pool))


def run(config: Config, requirement_set: RequirementSet, requirements: list[BenchRequirement], pool: int,
        echo=print) -> list[GoldPlaces]:
    """The gold places of each requirement, on the set's sample graph (imported first if missing,
    into the graph `bench report` uses)."""
    reset_graphiti()
    adapter = GraphitiAdapter(replace(config, reranker_provider="none"))
    try:
        graph_id = graph_id_of(requirement_set)
        ensure_sample_graph(adapter.graph, graph_id,
                            on_import=lambda n: echo(f"Importing the sample graph ({n} facts, no LLM)..."))
        embedder = adapter.runtime.graphiti.embedder
        return [gold_places(adapter.graph, embedder, config, graph_id, requirement, pool)
                for requirement in requirements]
    finally:
        reset_graphiti()
