"""Reranking strategies behind one small protocol (see base.py), selectable by name.

    from graphiti_llm_rerank.strategies import get_strategy
    strategy = get_strategy("sliding_window", window_size=20, stride=10)
    strategy.estimate_calls(50)  # -> 5, known before anything is spent

`base.run_checked` runs one on a per-call `JudgeCall` (base.py), checks its answer and types every
failure: graph search's OllamaReranker calls it directly, /api/rerank through `graphiti_llm_rerank.rerank`
(graphiti_llm_rerank/strategy_run.py), which also validates the request and resolves names.
"""

from graphiti_llm_rerank.strategies.base import RerankStrategy
from graphiti_llm_rerank.strategies.listwise import ListwiseStrategy
from graphiti_llm_rerank.strategies.mmr import MMRStrategy
from graphiti_llm_rerank.strategies.pairwise import PairwiseStrategy
from graphiti_llm_rerank.strategies.pointwise import PointwiseStrategy
from graphiti_llm_rerank.strategies.registry import (
    config_knobs, get_strategy, register_strategy, strategy_from_config, strategy_names,
)
from graphiti_llm_rerank.strategies.sliding_window import SlidingWindowStrategy
from graphiti_llm_rerank.strategies.tournament import Stage, TournamentStrategy

__all__ = [
    "ListwiseStrategy", "MMRStrategy", "PairwiseStrategy", "PointwiseStrategy", "RerankStrategy",
    "SlidingWindowStrategy", "Stage", "TournamentStrategy",
    "config_knobs", "get_strategy", "register_strategy", "strategy_from_config", "strategy_names",
]
