"""What a reranker is built from: `RerankerConfig`, and every list of allowed values and size default
the reranker has, defined here once (an app that reads its own settings imports them from here).

    reranker = OllamaReranker(RerankerConfig(base_url="http://localhost:11434/v1", model="qwen2.5:3b"))

The fields mirror graphiti-core's `LLMConfig` (`base_url`, `model`, `api_key`) plus what ranking needs.
An app that keeps its settings as `reranker_<field>` attributes (one settings object for the whole app)
hands them over with `RerankerConfig.from_prefixed(settings)`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

# Which reranker `build_reranker` makes: the LLM judge on any OpenAI-compatible server, a dedicated
# reranker behind POST /rerank, or none (the first-stage order kept).
PROVIDERS = ("ollama", "rerank_api", "none")
# rerank_api's request body: `auto` tries the common {model, query, documents, top_n} body and switches
# to TEI's {query, texts} when the server says so.
API_STYLES = ("auto", "cohere", "tei")
SCORE_MODES = ("auto", "logprobs", "json", "graded")
STRATEGIES = ("pointwise", "listwise", "sliding_window", "pairwise", "tournament", "mmr")
MMR_BASE_STRATEGIES = tuple(name for name in STRATEGIES if name != "mmr")
# How a caller combines the judge's evidence with its first stage's order (graphiti_llm_rerank/fusion.py).
FUSIONS = ("none", "rrf", "linear", "zscore")
# Which candidates a cascade asks the judge about (fusion.cascade_positions).
JUDGE_FOCI = ("top", "cut", "disagree")

DEFAULT_BASE_URL = "http://localhost:11434/v1"  # a local Ollama's OpenAI-compatible API
DEFAULT_MAX_DOCUMENT_CHARS = 1000  # passages are cut to this length inside prompts
DEFAULT_CONTEXT_TOKENS = 8192  # the model's context window; larger prompts are refused


@dataclass(frozen=True)
class RerankerConfig:
    """Everything a reranker is built from; every field has a working default for a local Ollama.
    `RerankerConfig.ALLOWED` names the values each choice field takes."""

    ALLOWED: ClassVar[dict[str, tuple[str, ...]]] = {
        "provider": PROVIDERS, "score_mode": SCORE_MODES, "strategy": STRATEGIES, "mmr_base": MMR_BASE_STRATEGIES,
        "api_style": API_STYLES, "fusion": FUSIONS, "judge_focus": JUDGE_FOCI,
    }

    provider: str = "ollama"
    base_url: str = DEFAULT_BASE_URL
    model: str = "qwen2.5:3b"
    api_key: str | None = field(default=None, repr=False)  # None: the placeholder a local server ignores
    score_mode: str = "auto"
    strategy: str = "pointwise"
    max_parallel: int = 4  # model requests in flight at once, for every call on the same judge
    timeout_s: float = 30.0  # one model request
    deadline_s: float = 120.0  # one rank call; past it the finished scores are used
    budget_s: float = 0.0  # judging time per rank call, then the finished scores are used (0: none)
    warmup_timeout_s: float = 120.0  # the background request that loads the model (0: no warm-up)
    cache_size: int = 4096  # scores kept per judge (0: no cache)
    max_tokens: int = 16
    breaker_threshold: int = 3  # failed calls in a row that open the circuit breaker
    breaker_cooldown_s: float = 30.0  # how long an open breaker skips the model
    instructions: str | None = None  # extra text for the judge's system prompt
    max_document_chars: int = DEFAULT_MAX_DOCUMENT_CHARS
    context_tokens: int = DEFAULT_CONTEXT_TOKENS
    # Strategy knobs
    window_size: int = 20  # sliding_window
    window_stride: int = 10  # sliding_window; smaller than the window size
    pairwise_passes: int = 10  # pairwise: full passes over every adjacent pair
    tournament_rounds: int = 2  # tournament
    mmr_lambda: float = 0.7  # mmr: relevance weight, 1 - lambda for diversity
    mmr_base: str = "pointwise"  # mmr: the strategy that gives relevance
    mmr_duplicate_threshold: float = 0.95  # mmr: cosine similarity that makes a near-duplicate
    # rerank_api provider
    api_style: str = "auto"
    api_max_documents: int = 0  # documents per request; 0: no cap (split only when refused)
    # How a caller fuses the judgement with its first stage (fusion.fuse_judgement, rank_candidates)
    fusion: str = "linear"
    fusion_weight: float = 0.7  # the judge's share in rrf, linear and zscore fusion
    cosine_weight: float = 0.3  # the embedder cosine's share
    judge_depth: int = 0  # the cascade: candidates the judge reads (0: all)
    judge_focus: str = "top"

    def __post_init__(self) -> None:
        for name, allowed in self.ALLOWED.items():
            value = getattr(self, name)
            if value not in allowed:
                raise ValueError(f"RerankerConfig.{name}={value!r}; allowed: {allowed}")

    @classmethod
    def from_prefixed(cls, settings: Any, prefix: str = "reranker_") -> RerankerConfig:
        """The fields read from `settings.<prefix><field>`; a field `settings` lacks keeps its default."""
        if isinstance(settings, RerankerConfig):
            return settings
        values = {f.name: getattr(settings, prefix + f.name) for f in dataclasses.fields(cls)
                  if hasattr(settings, prefix + f.name)}
        return cls(**values)


def as_config(settings: Any) -> RerankerConfig:
    """A `RerankerConfig`, or the one an app's `reranker_*` settings object describes."""
    return RerankerConfig.from_prefixed(settings)
