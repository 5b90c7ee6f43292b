"""Reranking strategies behind one small protocol (see base.py), selectable by name.

    from app.rerank.strategies import get_strategy
    strategy = get_strategy("sliding_window", window_size=20, stride=10)
    strategy.estimate_calls(50)  # -> 5, known before anything is spent

`base.run_checked` runs one on a per-call `JudgeCall` (base.py), checks its answer and types every
failure: graph search's OllamaReranker calls it directly, /api/rerank through `app.rerank.rerank`
(app/rerank/strategy_run.py), which also validates the request and resolves names.
"""

from app.rerank.strategies.base import RerankStrategy
from app.rerank.strategies.listwise import ListwiseStrategy
from app.rerank.strategies.mmr import MMRStrategy
from app.rerank.strategies.pairwise import PairwiseStrategy
from app.rerank.strategies.pointwise import PointwiseStrategy
from app.rerank.strategies.registry import (
    config_knobs, get_strategy, register_strategy, strategy_from_config, strategy_names,
)
from app.rerank.strategies.sliding_window import SlidingWindowStrategy
from app.rerank.strategies.tournament import Stage, TournamentStrategy

__all__ = [
    "ListwiseStrategy", "MMRStrategy", "PairwiseStrategy", "PointwiseStrategy", "RerankStrategy",
    "SlidingWindowStrategy", "Stage", "TournamentStrategy",
    "config_knobs", "get_strategy", "register_strategy", "strategy_from_config", "strategy_names",
]
