"""The LLM judge as Graphiti's cross encoder, and the guard every model-backed reranker runs in.

    OllamaReranker(RerankerConfig(base_url="http://localhost:11434/v1", model="qwen2.5:3b"))
    OllamaReranker(judge=shared_judge, strategy=get_strategy("listwise"))  # what the config would build, given

`OllamaReranker` runs one reranking strategy (the config's, pointwise by default: one request per
distinct passage, concurrently under the judge's bound) on an `LLMJudge` (its own, or one shared
with other callers). Scores: pointwise gives the judge's relevance (floored at SCORE_FLOOR); a
passage whose own request failed sits below every scored one, in incoming order. The other
strategies give rank-derived scores (1.0 for the best, descending). Passages with no text cannot be
judged and go last. A failed window, group or pair keeps its incoming order (counted in `stats()`).

The edge. Graphiti's `CrossEncoderClient.rank(query, passages)` answers (passage, score) pairs, best
first. Everything beneath it works by position: a reranker of ours answers
`judge_positions(query, passages)` with a `Judgement` (fusion.py): the score of each position it
judged, how many it judged, whether (and why) the call fell back. `JudgingCrossEncoder.rank` turns
that Judgement into Graphiti's pairs (every passage once, byte for byte, the judged ones in the
judge's order, scores > 0) and never raises. `judge_positions(reranker, query, passages)` asks any
cross encoder that one question: ours directly, any other through its `rank`, whose texts are
mapped back to positions here and nowhere else.

The guard. `GuardedReranker` is the `JudgingCrossEncoder` every model-backed reranker
(`OllamaReranker`, `RerankApiReranker`) subclasses. A subclass says how to rank (`_rank`: the value
of every position, higher better, given the call's `JudgedSoFar` to tell finished scores to) and,
optionally, when no model is needed (`_needs_model`) and whether its scores are relevance
(`scores_are_relevance`) or only encode an order. The guard promises what graph search relies on:

- `judge_positions` never raises (only cancellation propagates) and places every position once with
  a score > 0, so `rank` returns every incoming passage exactly once with a score > 0: Graphiti
  drops results below `reranker_min_score` (0);
- anytime: when the budget (`budget_s`, RERANKER_BUDGET_S; 0 = none) or the deadline ends a call,
  the scores it has finished are kept and the unjudged passages keep their incoming place. That
  needs a subclass that tells each score to the call's `JudgedSoFar` as it arrives
  (`reports_progress`: pointwise, the rerank API); the others answer all or nothing. The budget is a
  choice (INFO), a passed deadline a fault (one WARNING, error `RankDeadlineExceeded`);
- a failed call (server down, unknown model, every request failing, time up with nothing judged,
  prompt too large, a bug, the model still loading when its warm-up's time ran out) answers in the
  incoming order with exactly one WARNING and says so in the Judgement (`fell_back`, and why in
  `fallback_reason`);
- a call that arrives while the model is being loaded (warmup.py) waits for it before its budget
  and deadline start, at most RERANKER_TIMEOUT_S (and never past its own deadline or budget);
- after `breaker_threshold` failed calls in a row the model is skipped for `breaker_cooldown_s`;
  then calls try again (half-open) and a success closes the breaker. A call that needs no model
  (every score cached) is served even while the breaker is open.

Every call with passages is reported to the app's observer (observer.py): its seconds by how it
ended (judged, cut_short, fell_back) and the passages it judged.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from abc import abstractmethod
from collections import Counter, defaultdict, deque
from dataclasses import replace
from collections.abc import Sequence
from typing import Any, Protocol

from graphiti_core.cross_encoder.client import CrossEncoderClient

from graphiti_llm_rerank.circuit_breaker import CircuitBreaker
from graphiti_llm_rerank.config import RerankerConfig
from graphiti_llm_rerank.fusion import (
    BUDGET, DEADLINE, SCORE_FLOOR, JudgedSoFar, Judgement, cascade_positions, cheap_order, every_position,
    fallback_judgement, fuse_judgement, judged_order,
)
from graphiti_llm_rerank.judge import LLMJudge
from graphiti_llm_rerank.observer import observe_rank_call
from graphiti_llm_rerank.strategies.base import JudgeCall, run_checked, strategy_name
from graphiti_llm_rerank.strategies.pointwise import UNSCORED, PointwiseStrategy
from graphiti_llm_rerank.strategies.registry import strategy_from_config
from graphiti_llm_rerank.strategies.strategy_prompts import STRATEGY_PROMPT_VERSION
from graphiti_llm_rerank.types import (
    Document, RerankError, RerankParseError, RerankProviderError, RerankResult, RerankStrategyError, rank_score,
)
from graphiti_llm_rerank.warmup import MODEL_NOT_READY, start_warmup

logger = logging.getLogger(__name__)

DEADLINE_EXCEEDED = "RankDeadlineExceeded"
BUDGET_EXHAUSTED = "RankBudgetExhausted"  # the budget ended before anything was judged


class JudgingCrossEncoder(CrossEncoderClient):
    """A Graphiti cross encoder whose real answer is a `Judgement` by position."""

    @abstractmethod
    async def judge_positions(self, query: str, passages: list[str]) -> Judgement:
        """What the judge made of each position of `passages`. Never raises (cancellation aside)."""

    def start_warmup(self, timeout_s: float) -> None:
        """Load the model in the background before the first call needs it (the LLM judge does)."""

    def not_ready(self) -> str | None:
        """Why this reranker cannot judge now (readiness: GET /health/ready), or None. Asks no server."""
        return None

    async def rank(self, query: str, passages: list[str]) -> list[tuple[str, float]]:
        """Graphiti's interface: (passage, score) best first, made from the Judgement here only."""
        passages = list(passages)
        judgement = await self.judge_positions(query, passages)
        return [(passages[hit.position], hit.score) for hit in judged_order(judgement)]


async def judge_positions(reranker: CrossEncoderClient, query: str, passages: list[str],
                          only: list[int] | None = None) -> Judgement:
    """`reranker`'s judgement of `passages`, by position. Ours say what they judged and how; any
    other cross encoder's order is taken as a judgement of every passage, by rank.

    `only`: the positions to ask about, in the order to ask (the cascade's first few of the cheap
    order); the judgement still covers every position, the others unjudged."""
    passages = list(passages)
    if only is not None and len(only) < len(passages):
        asked = await judge_positions(reranker, query, [passages[position] for position in only])
        return on_positions(asked, only, len(passages))
    if isinstance(reranker, JudgingCrossEncoder):
        return await reranker.judge_positions(query, passages)
    if not passages:
        return Judgement(0)
    evidence = dict(ranked_positions(passages, await reranker.rank(query, passages)))
    return Judgement(len(passages), evidence, dict.fromkeys(evidence, 0.0), by_score=False)


async def rank_candidates(
    reranker: CrossEncoderClient | None, query: str, passages: list[str], first_scores: Sequence[float], *,
    method: str, weight: float, cosine: Sequence[float] | None = None, cosine_weight: float = 0.0,
    depth: int = 0, focus: str = "top", cut: int | None = None,
) -> Judgement:
    """First-stage candidates judged and fused: the `Judgement` with the answer's order filled in
    (`order`: every candidate once, best first, each a `Placed`). Never raises.

    `reranker` None: no reranking, the first stage's own order. `depth` > 0 (a cascade): the judge
    reads only `depth` candidates of the cheap order (first stage fused with the `cosine`), those
    `focus` names around `cut` (how many the answer returns); the rest keep the cheap order."""
    judgement = Judgement(len(passages))
    if reranker is not None and passages:
        fusion = {"method": method, "weight": weight, "cosine_weight": cosine_weight}
        only = (cascade_positions(cheap_order(first_scores, cosine, **fusion), depth,
                                  len(passages) if cut is None else cut, focus, cosine) if depth else None)
        try:
            judgement = await judge_positions(reranker, query, passages, only=only)
        except Exception as error:  # ours never raise; a foreign cross encoder may, and the answer must stand
            logger.warning("Reranker raised %s; keeping the first-stage order", type(error).__name__)
            judgement = fallback_judgement(len(passages), reason=f"{type(error).__name__}: {error}")
    return fuse_judgement(first_scores, judgement, method=method, weight=weight, cosine=cosine,
                          cosine_weight=cosine_weight)


def on_positions(asked: Judgement, positions: list[int], candidates: int) -> Judgement:
    """A judgement of a sublist (its position i is `positions[i]`) as one of all `candidates`."""
    return replace(asked, candidates=candidates,
                   evidence={positions[index]: value for index, value in asked.evidence.items()},
                   judged_at_s={positions[index]: seconds for index, seconds in asked.judged_at_s.items()})


async def rerank_positions(reranker: CrossEncoderClient, query: str, passages: list[str]) -> list[tuple[int, float]]:
    """`rank`'s answer by position: (position, score), best first, each position once."""
    if not passages:
        return []
    return [(hit.position, hit.score) for hit in judged_order(await judge_positions(reranker, query, passages))]


def ranked_positions(passages: list[str], ranked: list[tuple[str, float]]) -> list[tuple[int, float]]:
    """A (passage, score) answer as (position, score), best first, each position once.

    Texts map back to positions in first-stage order, so duplicate texts keep both candidates. A
    position the answer left out (it should never) is appended in first-stage order, scored at the
    answer's lowest score, rather than lost."""
    positions: dict[str, deque[int]] = defaultdict(deque)
    for index, passage in enumerate(passages):
        positions[passage].append(index)
    ordered: list[tuple[int, float]] = []
    for passage, score in ranked:
        if positions.get(passage):
            ordered.append((positions[passage].popleft(), float(score)))
    missing = sorted(index for queue in positions.values() for index in queue)
    if missing:
        logger.warning("Reranker returned %d of %d passages; appending the rest", len(ordered), len(passages))
    floor = min((score for _, score in ordered), default=0.0)
    return ordered + [(index, floor) for index in missing]


class Counters(Protocol):
    def add(self, name: str, amount: int = 1) -> None: ...

    def record_error(self, error_class: str, detail: str | None = None) -> None: ...


class GuardedReranker(JudgingCrossEncoder):
    """Base class: subclasses implement `_rank` and `describe`; see the module docstring."""

    # True when `_rank` tells each finished score to the call's JudgedSoFar: then the judged count is
    # exact and a call cut short keeps its finished work.
    reports_progress = False

    def __init__(
        self, *, counters: Counters, deadline_s: float, breaker_threshold: int, breaker_cooldown_s: float,
        budget_s: float = 0.0,
    ) -> None:
        if deadline_s <= 0:
            raise ValueError(f"deadline_s must be > 0, got {deadline_s}")
        if budget_s < 0:
            raise ValueError(f"budget_s must be >= 0 (0: no budget), got {budget_s}")
        self.counters = counters
        self.deadline_s = float(deadline_s)
        self.budget_s = float(budget_s)
        self.breaker = CircuitBreaker(breaker_threshold, breaker_cooldown_s)
        # Warnings carry the implementation's module name (graphiti_llm_rerank.ollama_reranker, ...).
        self.logger = logging.getLogger(type(self).__module__)

    @abstractmethod
    async def _rank(self, query: str, passages: list[str], progress: JudgedSoFar) -> dict[int, float]:
        """The value of every position, higher better, > 0 (equal values order by position); finished
        scores told to `progress` as they arrive. Raise on a failure of the whole call."""

    @abstractmethod
    def describe(self) -> str:
        """What is ranking, for the WARNING of a failed call (never a secret)."""

    def _needs_model(self, query: str, passages: list[str]) -> bool:
        return True

    async def _model_not_ready(self, wait_s: float) -> str | None:
        """Wait while the model is being loaded (graphiti_llm_rerank/warmup.py), at most `wait_s`; why it is not
        ready, else None."""
        return None

    def not_ready(self) -> str | None:
        """Not ready while the breaker skips the model; once its cooldown is over calls try it again."""
        breaker = self.breaker.snapshot()
        if breaker["retry_in_s"] > 0:
            failed = breaker["consecutive_failures"]
            return (f"the reranker's circuit breaker is open: {self.describe()} failed {failed} "
                    f"call{'s' if failed != 1 else ''} in a row and is skipped for {breaker['retry_in_s']:.0f}s more")
        return None

    @property
    def scores_are_relevance(self) -> bool:
        """True when `_rank`'s scores are relevance judgements, False when they only encode its order."""
        return True

    async def judge_positions(self, query: str, passages: list[str]) -> Judgement:
        """One guarded rank call: what the judge made of each position of `passages`. Never raises."""
        started = time.perf_counter()
        judgement = await self._guarded_judgement(query, passages)
        if judgement.candidates:
            observe_rank_call(rank_outcome(judgement), time.perf_counter() - started, judgement.judged)
        return judgement

    async def _guarded_judgement(self, query: str, passages: list[str]) -> Judgement:
        self.counters.add("calls")
        passages = list(passages)
        if not passages:
            return Judgement(0)
        limit_s, limit = self.time_limit()
        progress = JudgedSoFar()
        try:
            needs_model = self._needs_model(query, passages)
            if needs_model and not self.breaker.allow():
                return self._breaker_open(passages)
            if needs_model:  # before the deadline and budget start: loading the model is not judging
                not_ready = await self._model_not_ready(limit_s)
                if not_ready is not None:
                    # The model was not asked: a load in progress is no failure of it, and a breaker
                    # opened by searches during the load would keep readiness red after it.
                    return self._call_failed(passages, MODEL_NOT_READY, not_ready, counts_for_breaker=False)
                progress = JudgedSoFar()  # scores' times count from here, as the deadline does
            async with asyncio.timeout(limit_s):
                evidence = every_position(len(passages), await self._rank(query, passages, progress))
        except TimeoutError:
            return self._out_of_time(passages, progress, limit, limit_s)
        except Exception as exc:  # typed errors and bugs alike: the search must still answer
            return self._call_failed(passages, _error_class(exc), _detail(exc), exc)
        if needs_model:
            self.breaker.record_success()
        judged_at = dict(progress.judged_at_s) if self.reports_progress else dict.fromkeys(
            evidence, progress.elapsed_s())
        return Judgement(len(passages), evidence, judged_at, self.scores_are_relevance)

    def time_limit(self) -> tuple[float, str]:
        """(seconds, BUDGET or DEADLINE): whichever ends a call first."""
        if 0 < self.budget_s < self.deadline_s:
            return self.budget_s, BUDGET
        return self.deadline_s, DEADLINE

    def _out_of_time(self, passages: list[str], progress: JudgedSoFar, limit: str, limit_s: float) -> Judgement:
        """Time is up: keep what was judged (the rest keeps its place); nothing judged is a failed call."""
        if not (self.reports_progress and progress.scores):
            if limit == BUDGET:
                return self._call_failed(passages, BUDGET_EXHAUSTED, f"nothing judged within the {limit_s:g}s budget")
            return self._call_failed(passages, DEADLINE_EXCEEDED, f"no result within {limit_s:g}s")
        self.breaker.record_success()  # the model answers, only not fast enough for all of them
        judged, total = len(progress.scores), len(passages)
        if limit == DEADLINE:
            self.counters.record_error(DEADLINE_EXCEEDED)
            self.logger.warning(
                "Reranker %s passed its %gs deadline after judging %d of %d passages; the finished scores "
                "are used, the rest keep their incoming place", self.describe(), limit_s, judged, total)
        else:
            self.logger.info("Reranker %s: the %gs budget ended after %d of %d passages were judged",
                             self.describe(), limit_s, judged, total)
        return Judgement(total, progress.evidence(), dict(progress.judged_at_s), self.scores_are_relevance,
                         cut_short=limit)

    def guard_stats(self) -> dict[str, Any]:
        return {"deadline_s": self.deadline_s, "budget_s": self.budget_s, "breaker": self.breaker.snapshot()}

    def _breaker_open(self, passages: list[str]) -> Judgement:
        self.counters.add("breaker_skips")
        self.logger.warning(
            "Reranker circuit breaker is open for %s: model skipped for %.1fs more; "
            "%d passages keep their incoming order",
            self.describe(), self.breaker.retry_in_s(), len(passages),
        )
        return fallback_judgement(
            len(passages), reason=f"CircuitBreakerOpen: the model is skipped for {self.breaker.retry_in_s():.1f}s more")

    def _call_failed(
        self, passages: list[str], error_class: str, detail: str, exc: BaseException | None = None,
        *, counts_for_breaker: bool = True,
    ) -> Judgement:
        """The one WARNING of a failed call, breaker bookkeeping, and the incoming-order fallback."""
        self.counters.add("fallbacks")
        # A failed model request or an unusable answer was already counted where it happened.
        if not isinstance(exc, (RerankProviderError, RerankParseError)):
            self.counters.record_error(error_class, detail)
        opened = self.breaker.record_failure() if counts_for_breaker else False
        self.logger.warning(
            "Reranker %s failed (%s: %s); %d passages keep their incoming order%s",
            self.describe(), error_class, detail, len(passages),
            f"; circuit breaker open for {self.breaker.cooldown_s:g}s" if opened else "",
            exc_info=exc if _is_bug(exc) else None,
        )
        return fallback_judgement(len(passages), reason=f"{error_class}: {detail}")


def rank_outcome(judgement: Judgement) -> str:
    """How a rank call ended (observer.RANK_OUTCOMES)."""
    if judgement.fell_back:
        return "fell_back"
    return "cut_short" if judgement.cut_short else "judged"


def _error_class(exc: Exception) -> str:
    return getattr(exc, "error_class", None) or type(exc).__name__


def _detail(exc: Exception) -> str:
    return str(exc) or type(exc).__name__


def _is_bug(exc: BaseException | None) -> bool:
    """Expected failures (model down, bad answer, prompt too big) need no traceback in the log."""
    return exc is not None and (isinstance(exc, RerankStrategyError) or not isinstance(exc, RerankError))


_STRATEGY_COUNTERS = ("unit_fallbacks", "repairs", "ties")


class OllamaReranker(GuardedReranker):
    """LLM-as-judge cross encoder; see the module docstring for its ordering and failure semantics."""

    def __init__(
        self,
        config: RerankerConfig | None = None,
        *,
        judge: LLMJudge | None = None,
        strategy: Any = None,
        embedder: Any = None,
        deadline_s: float | None = None,
        budget_s: float | None = None,
        context_tokens: int | None = None,
        breaker_threshold: int | None = None,
        breaker_cooldown_s: float | None = None,
    ) -> None:
        """`config` (default: a local Ollama's) says what to build; `judge` and `strategy`, when given,
        are used instead of what it would build (`embedder`: for the mmr strategy); the keyword
        numbers override its fields. No network I/O here: an app must start while the model server is down."""
        config = config if config is not None else RerankerConfig()

        def chosen(value: Any, name: str) -> Any:
            return getattr(config, name) if value is None else value

        judge = judge if judge is not None else LLMJudge.from_config(config)
        super().__init__(counters=judge.counters, deadline_s=chosen(deadline_s, "deadline_s"),
                         budget_s=chosen(budget_s, "budget_s"),
                         breaker_threshold=chosen(breaker_threshold, "breaker_threshold"),
                         breaker_cooldown_s=chosen(breaker_cooldown_s, "breaker_cooldown_s"))
        self.judge = judge  # possibly shared: its bound on concurrent requests covers every caller
        self.strategy = strategy if strategy is not None else strategy_from_config(config, embedder=embedder)
        self.context_tokens = chosen(context_tokens, "context_tokens")
        self._strategy_counts: Counter[str] = Counter()
        self._counts_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OllamaReranker({strategy_name(self.strategy)!r}, {self.judge!r})"

    def describe(self) -> str:
        return f"{strategy_name(self.strategy)} with model {self.judge.model!r}"

    @property
    def scores_are_relevance(self) -> bool:
        """Pointwise scores are the judge's relevance; the other strategies' only encode their order."""
        return bool(getattr(self.strategy, "scores_are_relevance", False))

    @property
    def reports_progress(self) -> bool:
        """The pointwise strategy reports each finished score (so partial work is kept)."""
        return isinstance(self.strategy, PointwiseStrategy)

    def stats(self) -> dict[str, Any]:
        with self._counts_lock:
            counts = dict(self._strategy_counts)
        return {
            "provider": "ollama",
            "strategy": strategy_name(self.strategy),
            **self.judge.stats(),
            "strategy_prompt_version": STRATEGY_PROMPT_VERSION,
            "strategy_counters": {name: counts.get(name, 0) for name in _STRATEGY_COUNTERS},
            **self.guard_stats(),
        }

    async def aclose(self) -> None:
        await self.judge.aclose()

    # -- internals --------------------------------------------------------------------------

    def _needs_model(self, query: str, passages: list[str]) -> bool:
        all_cached = getattr(self.strategy, "all_cached", None)
        return not (callable(all_cached) and all_cached(self.judge, query, _judgeable(passages)))

    def start_warmup(self, timeout_s: float) -> None:
        """Warm the judge's model (graphiti_llm_rerank/warmup.py; timeout_s 0: no warm-up)."""
        start_warmup(self.judge, timeout_s)

    async def _model_not_ready(self, wait_s: float) -> str | None:
        warmup = self.judge.warmup  # set by start_warmup when the app built the reranker
        # A search waits for a load no longer than one of its own requests would wait for an answer.
        return None if warmup is None else await warmup.until_ready(min(wait_s, self.judge.timeout_s))

    def not_ready(self) -> str | None:
        """Not ready while the model loads, after a warm-up that got no answer (each such check starts
        another, so the app becomes ready once the model answers), or while the breaker is open."""
        warmup = self.judge.warmup
        reason = warmup.not_ready() if warmup is not None else None
        if reason is not None:
            if warmup.ended:
                start_warmup(self.judge, warmup.timeout_s)
            return reason
        return super().not_ready()

    async def _rank(self, query: str, passages: list[str], progress: JudgedSoFar) -> dict[int, float]:
        rankable = [index for index, passage in enumerate(passages) if passage.strip()]
        documents = [Document(id=str(index), text=passages[index]) for index in rankable]
        # Lenient: a failed window, group or pair keeps its incoming order; only a whole call fails.
        call = JudgeCall(self.judge, strict=False, context_tokens=self.context_tokens, progress=progress)
        # Every passage must come back (graph search applies its own limit): no strategy default cap.
        kept, dropped = await run_checked(self.strategy, query, documents, call, top_k=len(documents))
        self._count(call.stats())
        results = kept + dropped
        order = [rankable[result.original_index] for result in results]
        placed = set(order)
        unjudged = [index for index in range(len(passages)) if index not in placed]
        if self.scores_are_relevance:
            scores = _relevance_scores(results) + _below(len(unjudged), results)
        else:
            scores = [rank_score(rank, len(passages)) for rank in range(1, len(passages) + 1)]
        return dict(zip(order + unjudged, scores))

    def _count(self, stats: dict[str, Any]) -> None:
        with self._counts_lock:
            self._strategy_counts.update(
                unit_fallbacks=stats["fallbacks"], repairs=stats["repairs"], ties=stats["ties"]
            )
        if self.scores_are_relevance:
            self.judge.counters.add("passage_failures", stats["fallbacks"])


def _judgeable(passages: list[str]) -> list[str]:
    return [passage for passage in passages if passage.strip()]


def _relevance_scores(results: list[RerankResult]) -> list[float]:
    """The judge's scores floored above 0; unscored results (already last) share half the lowest."""
    real = [max(result.score, SCORE_FLOOR) for result in results if not result.metadata.get(UNSCORED)]
    failed = min(real, default=2 * SCORE_FLOOR) / 2
    return [failed if result.metadata.get(UNSCORED) else max(result.score, SCORE_FLOOR) for result in results]


def _below(count: int, results: list[RerankResult]) -> list[float]:
    """Scores for passages that could not be judged: below everything else, descending, > 0."""
    lowest = min((max(result.score, SCORE_FLOOR) for result in results), default=1.0) / 4
    return [lowest * (1 - index / (count + 1)) for index in range(count)]
