"""The same report-tool search twice, without and with the LLM reranker, over one graph runtime.

Why one runtime and not two: the graph singleton owns the database connection, the embedded
FalkorDB and the event loop; rebuilding it with another Config (as tests do) would restart the
database between the two columns. The search itself reads only `runtime.reranker` and
`runtime.config` (reranker_provider, reranker_candidates, search_timeout_s), so two shallow copies
of the runtime that differ in those are enough: same Graphiti, same drivers, same data. Each copy
is wrapped in a GraphitiAdapter, so both columns go through `adapter.graph.search`, exactly the
call the report tools make.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

from app.demo.reranker_endpoint import RerankerEndpoint
from app.demo.sample_graph import DemoQuestion
from app.demo.side_by_side import Column
from app.graph.loop import run_on_loop
from app.graph.runtime import GraphitiAdapter, GraphitiRuntime
from graphiti_llm_rerank import build_reranker

SCORE_MODE = "logprobs"  # True/False logprob scoring: the best small-model judge measured here (FIELD-NOTES)


class PinnedAdapter(GraphitiAdapter):
    """A GraphitiAdapter over a given runtime instead of the process singleton."""

    def __init__(self, runtime: GraphitiRuntime):
        super().__init__(runtime.config)
        self._pinned = runtime

    @property
    def runtime(self) -> GraphitiRuntime:
        return self._pinned


def baseline_runtime(runtime: GraphitiRuntime) -> GraphitiRuntime:
    """RERANKER_PROVIDER=none: the first-stage (BM25 + vector, RRF) order, no model call."""
    config = dataclasses.replace(runtime.config, reranker_provider="none")
    return dataclasses.replace(runtime, config=config, reranker=build_reranker(config))


def reranked_runtime(runtime: GraphitiRuntime, endpoint: RerankerEndpoint) -> GraphitiRuntime:
    """RERANKER_PROVIDER=ollama against `endpoint`, built by the same factory the app uses."""
    config = dataclasses.replace(
        runtime.config,
        reranker_provider="ollama",
        reranker_base_url=endpoint.base_url,
        reranker_model=endpoint.model,
        reranker_score_mode=SCORE_MODE,
        # llama-cpp-python answers one request at a time; more in flight would only queue on the
        # server while their per-request timeouts run.
        reranker_max_parallel=1 if endpoint.kind == "local" else runtime.config.reranker_max_parallel,
    )
    return dataclasses.replace(runtime, config=config, reranker=build_reranker(config, embedder=runtime.graphiti.embedder))


@dataclass
class Tally:
    questions: int = 0
    shown: int = 0  # results shown per column, summed over questions
    baseline_on_topic: int = 0
    reranked_on_topic: int = 0
    baseline_seconds: float = 0.0
    reranked_seconds: float = 0.0
    fallbacks: int = 0  # questions where the reranker kept the first-stage order for lack of answers


class Comparison:
    """Runs each question through both searches and keeps the tally."""

    def __init__(self, runtime: GraphitiRuntime, endpoint: RerankerEndpoint, graph_id: str, top_k: int):
        self.endpoint = endpoint
        self.graph_id = graph_id
        self.top_k = top_k
        self._baseline = PinnedAdapter(baseline_runtime(runtime)).graph
        self._reranked_runtime = reranked_runtime(runtime, endpoint)
        self._reranked = PinnedAdapter(self._reranked_runtime).graph
        self.tally = Tally()

    @property
    def candidates(self) -> int:
        """How many first-stage results the reranker judges per question."""
        return self.top_k * self._reranked_runtime.config.reranker_candidates

    def warm_up(self) -> None:
        """Load the embedder before anything is timed."""
        self._baseline.search(self.graph_id, "warm-up", limit=1)

    def run(self, question: DemoQuestion) -> tuple[Column, Column]:
        baseline, baseline_s = self._timed(self._baseline, question.question)
        before = self._reranker_stats()
        reranked, reranked_s = self._timed(self._reranked, question.question)
        left = Column("WITHOUT reranking (first stage only)", baseline_s, baseline.edges, _errors(baseline))
        right = Column(f"RERANKED by {self.endpoint.model} ({SCORE_MODE})", reranked_s, reranked.edges,
                       _errors(reranked) + self._fallback_notes(before))
        self._count(question, left, right)
        return left, right

    def close(self) -> None:
        aclose = getattr(self._reranked_runtime.reranker, "aclose", None)
        if aclose is not None:
            run_on_loop(aclose(), timeout=10)

    def _timed(self, graph, query: str):
        started = time.perf_counter()
        outcome = graph.search(self.graph_id, query, limit=self.top_k)
        return outcome, time.perf_counter() - started

    def _reranker_stats(self) -> dict:
        return self._reranked_runtime.reranker.stats()

    def _fallback_notes(self, before: dict) -> list[str]:
        after = self._reranker_stats()
        notes = []
        if after["fallbacks"] + after["breaker_skips"] > before["fallbacks"] + before["breaker_skips"]:
            self.tally.fallbacks += 1
            notes.append(f"the model did not answer ({after.get('last_error') or 'error'}); "
                         "this column keeps the first-stage order")
        failed = after["passage_failures"] - before["passage_failures"]
        if failed:
            notes.append(f"{failed} passage(s) got no score and were ranked last")
        return notes

    def _count(self, question: DemoQuestion, left: Column, right: Column) -> None:
        tally = self.tally
        tally.questions += 1
        tally.shown += len(left.hits)
        tally.baseline_on_topic += sum(question.on_topic(hit.fact) for hit in left.hits)
        tally.reranked_on_topic += sum(question.on_topic(hit.fact) for hit in right.hits)
        tally.baseline_seconds += left.seconds
        tally.reranked_seconds += right.seconds


def _errors(outcome) -> list[str]:
    return [f"search error: {outcome.error}"] if outcome.error else []
