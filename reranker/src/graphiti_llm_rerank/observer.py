"""What the reranker tells an app about its work, for its metrics: a hook, no metrics library.

    set_observer(my_metrics)   # any object with the three methods below (a module will do)

`RerankObserver` names what is reported: each guarded rank call (how it ended, its seconds, the
passages judged), each score-cache lookup, and each state a reported circuit breaker enters. Until an
app sets one, nothing is reported. The observer is process-wide, as the judge and breaker it watches are.
"""

from __future__ import annotations

import logging
from typing import Protocol

logger = logging.getLogger(__name__)

# How a rank call ended: every passage judged as asked; the budget or deadline ended it with some
# scores kept; or it fell back to the incoming order (model failure, breaker open, model not ready).
RANK_OUTCOMES = ("judged", "cut_short", "fell_back")
BREAKER_STATES = ("closed", "half_open", "open")


class RerankObserver(Protocol):
    def observe_rank_call(self, outcome: str, seconds: float, judged: int) -> None: ...

    def score_cache_lookup(self, hit: bool, count: int = 1) -> None: ...

    def breaker_state(self, state: str) -> None: ...


class _Silent:
    def observe_rank_call(self, outcome: str, seconds: float, judged: int) -> None:
        pass

    def score_cache_lookup(self, hit: bool, count: int = 1) -> None:
        pass

    def breaker_state(self, state: str) -> None:
        pass


_observer: RerankObserver = _Silent()


def set_observer(observer: RerankObserver | None) -> None:
    """Report to `observer` from now on (None: report nothing)."""
    global _observer
    _observer = observer if observer is not None else _Silent()


def observer() -> RerankObserver:
    return _observer


def observe_rank_call(outcome: str, seconds: float, judged: int) -> None:
    _observer.observe_rank_call(outcome, seconds, judged)


def score_cache_lookup(hit: bool, count: int = 1) -> None:
    if count:
        _observer.score_cache_lookup(hit, count)


def breaker_state(state: str) -> None:
    _observer.breaker_state(state)
