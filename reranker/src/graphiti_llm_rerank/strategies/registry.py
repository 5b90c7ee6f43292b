"""Strategies by name: `get_strategy(name, **knobs)`, `register_strategy` for custom ones, and
`strategy_from_config` (a RerankerConfig's `strategy` and its knobs)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from graphiti_llm_rerank.config import STRATEGIES, as_config
from graphiti_llm_rerank.strategies.base import RerankStrategy
from graphiti_llm_rerank.strategies.listwise import ListwiseStrategy
from graphiti_llm_rerank.strategies.mmr import MMRStrategy
from graphiti_llm_rerank.strategies.pairwise import PairwiseStrategy
from graphiti_llm_rerank.strategies.pointwise import PointwiseStrategy
from graphiti_llm_rerank.strategies.sliding_window import SlidingWindowStrategy
from graphiti_llm_rerank.strategies.tournament import HALVING, TournamentStrategy


def _mmr(*, base: Any = "pointwise", **knobs: Any) -> MMRStrategy:
    return MMRStrategy(base=get_strategy(base) if isinstance(base, str) else base, **knobs)


_BUILT_IN = (PointwiseStrategy, ListwiseStrategy, SlidingWindowStrategy, PairwiseStrategy, TournamentStrategy)
_FACTORIES: dict[str, Callable[..., RerankStrategy]] = {
    **{strategy.name: strategy for strategy in _BUILT_IN}, MMRStrategy.name: _mmr,
}
# config.STRATEGIES is the list users choose from (RerankerConfig validates it).
if tuple(sorted(_FACTORIES)) != tuple(sorted(STRATEGIES)):
    raise RuntimeError(f"built-in strategies {sorted(_FACTORIES)} differ from config.STRATEGIES")
_lock = threading.Lock()


def strategy_names() -> tuple[str, ...]:
    with _lock:
        return tuple(_FACTORIES)


def register_strategy(name: str, factory: Callable[..., RerankStrategy]) -> None:
    """Make a custom strategy available by name (to `get_strategy` and `strategy_run.rerank`)."""
    if not name or not name.isidentifier():
        raise ValueError(f"strategy names are identifiers, got {name!r}")
    with _lock:
        _FACTORIES[name.lower()] = factory


def get_strategy(name: str, **knobs: Any) -> RerankStrategy:
    """A new strategy instance; unknown names and knobs are refused with a ValueError that names them."""
    with _lock:
        factory = _FACTORIES.get(name.lower()) if isinstance(name, str) else None
    if factory is None:
        raise ValueError(f"unknown rerank strategy {name!r}; available: {list(strategy_names())}")
    try:
        return factory(**knobs)
    except TypeError as error:
        raise ValueError(f"bad options for the {name} strategy ({error})") from None


def config_knobs(config: Any, name: str) -> dict[str, Any]:
    """The config's knobs that apply to one built-in strategy."""
    config = as_config(config)
    knobs: dict[str, Any] = {"max_document_chars": config.max_document_chars}
    if name == "sliding_window":
        knobs.update(window_size=config.window_size, stride=config.window_stride)
    elif name == "pairwise":
        knobs.update(passes=config.pairwise_passes)
    elif name == "tournament":
        # Candidate counts vary per query here, and the paper's default stages need exactly 100.
        knobs.update(rounds=config.tournament_rounds, max_parallel_groups=config.max_parallel,
                     plan=HALVING)
    return knobs


def mmr_settings(config: Any) -> dict[str, Any]:
    """What MMRStrategy is built with from config, besides the embedder."""
    config = as_config(config)
    return {"lambda_": config.mmr_lambda, "duplicate_threshold": config.mmr_duplicate_threshold}


def strategy_settings(config: Any, name: str) -> dict[str, Any]:
    """Every setting `strategy_from_config(config, name)` builds with (mmr: its own and its base's)."""
    config = as_config(config)
    if name != "mmr":
        return config_knobs(config, name)
    return {**mmr_settings(config), "base": config.mmr_base,
            **config_knobs(config, config.mmr_base)}


def strategy_from_config(config: Any, name: str | None = None, *, embedder: Any = None) -> RerankStrategy:
    """The config's strategy (or `name`) with its knobs; mmr wraps `mmr_base` and needs the embedder."""
    config = as_config(config)
    name = (name or config.strategy).lower()
    try:
        if name == "mmr":
            return MMRStrategy(
                base=strategy_from_config(config, config.mmr_base), embedder=embedder, **mmr_settings(config)
            )
        return get_strategy(name, **config_knobs(config, name))
    except ValueError as error:
        raise ValueError(f"RERANKER_STRATEGY={name}: {error}") from None
