"""All settings in one place, read from the environment (and `.env` at the repo root).

Every other module reads settings through `Config`; nothing else calls `os.environ.get`
for an application setting. `Config.from_env()` validates the switches, so a typo such as
`RERANKER_PROVIDER=olama` fails at startup with the allowed values, not at the first search.
"""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from dotenv import load_dotenv
from graphiti_llm_rerank import RerankerConfig

REPO_ROOT = Path(__file__).resolve().parents[2]

GRAPH_BACKENDS = ("falkordb", "neo4j")
LLM_PROVIDERS = ("openai", "openai_generic")
EMBEDDING_PROVIDERS = ("openai", "local")
# The reranker's lists of allowed values and size defaults are the package's own (RerankerConfig.ALLOWED).
RERANKER_PROVIDERS = RerankerConfig.ALLOWED["provider"]
# Providers whose server is someone else's (TEI, Cohere, Jina behind POST /rerank): RERANKER_API_KEY
# never defaults to the embedder's key for them. The others talk to the embedder's kind of server.
RERANKER_PROVIDERS_WITH_OWN_KEY = ("rerank_api",)
RERANKER_API_STYLES = RerankerConfig.ALLOWED["api_style"]
RERANKER_SCORE_MODES = RerankerConfig.ALLOWED["score_mode"]
RERANKER_STRATEGIES = RerankerConfig.ALLOWED["strategy"]
MMR_BASE_STRATEGIES = RerankerConfig.ALLOWED["mmr_base"]
RERANKER_FUSIONS = RerankerConfig.ALLOWED["fusion"]
RERANKER_JUDGE_FOCI = RerankerConfig.ALLOWED["judge_focus"]
LOG_LEVELS = ("debug", "info", "warning", "error")
# HOST names that reach only this machine; any other HOST needs API_TOKEN (`Config.check_serving`).
LOOPBACK_NAMES = ("localhost",)
LOCAL_LLM_MODELS = ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b")

_DEFAULT_OLLAMA_V1 = "http://localhost:11434/v1"
DEFAULT_MAX_DOCUMENT_CHARS = RerankerConfig.max_document_chars  # passages are cut to this length inside prompts
DEFAULT_CONTEXT_TOKENS = RerankerConfig.context_tokens  # the model's context window; larger prompts are refused
DEFAULT_TASK_TTL_S = 3600.0  # finished background tasks are kept this long
DEFAULT_TASK_TIMEOUT_S = 3600.0  # a task still running after this long is stopped and fails
MAX_JUDGED_CANDIDATES = 200  # first-stage candidates one search may have judged (each is one model call)
MAX_LISTED_FACTS = 20  # facts a report section may list beneath its text (REPORT_LISTED_FACTS)


def load_env_file() -> None:
    """Load `.env` (DOTENV_PATH, default the repo root's); variables already set win."""
    load_dotenv(os.environ.get("DOTENV_PATH") or REPO_ROOT / ".env", override=False)


def _env(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return default
    return value.strip()


def _reranker_api_key(provider: str, embedding_api_key: str) -> str:
    """RERANKER_API_KEY; unset, the judge shares the embedder's server and key. A rerank_api server
    is someone else's (TEI, Cohere, Jina): it never gets the embedder's key, only its own or none."""
    shared = "" if provider in RERANKER_PROVIDERS_WITH_OWN_KEY else embedding_api_key
    return _env("RERANKER_API_KEY", shared) or ""


def _choice(name: str, default: str, allowed: tuple[str, ...]) -> str:
    value = (_env(name, default) or default).lower()
    if value not in allowed:
        raise ValueError(f"Unknown {name}={value!r}; allowed: {allowed}")
    return value


def _int(name: str, default: int | None, minimum: int | None = None, maximum: int | None = None) -> int | None:
    raw = _env(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")
    return value


def _float(name: str, default: float, minimum: float | None = None, maximum: float | None = None) -> float:
    raw = _env(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")
    return value


# What Ollama takes for OLLAMA_KEEP_ALIVE: whole seconds, or a Go duration such as 30m or 1h30m; negative
# keeps the model loaded for good.
_DURATION = re.compile(r"-?(?:\d+|(?:\d+(?:\.\d+)?(?:ns|us|µs|ms|s|m|h))+)")


def _duration(name: str, default: str) -> str:
    value = _env(name, default) or default
    if not _DURATION.fullmatch(value):
        raise ValueError(f"{name} must be seconds or a duration such as 30m or 1h30m, got {value!r}")
    return value


def _shared_directory(name: str) -> Path | None:
    """A directory that must exist and be writable when set: the processes write into it from their
    first request on, so a wrong one fails at start, not in the middle of a request."""
    raw = _env(name)
    if raw is None:
        return None
    path = Path(raw)  # as prometheus_client reads it: no ~ expanded
    if not path.is_dir() or not os.access(path, os.W_OK):
        raise ValueError(f"{name} must be an existing, writable directory, got {raw!r}")
    return path


def _is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a name: it may resolve to anything
        return False


# What a browser sends as Origin: scheme://host[:port], nothing after it.
_ORIGIN = re.compile(r"https?://(\[[0-9a-f:.]+\]|[a-z0-9.-]+)(:\d{1,5})?")


def _origins(name: str) -> tuple[str, ...]:
    """A comma-separated list of web origins, each as a browser sends it (lower case, no path)."""
    origins = []
    for part in (_env(name) or "").split(","):
        origin = part.strip().lower().removesuffix("/")
        if not origin:
            continue
        if not _ORIGIN.fullmatch(origin):
            raise ValueError(f"{name}: {part.strip()!r} is not a web origin such as https://app.example.com "
                             "(scheme://host[:port], no path; several are separated by commas)")
        origins.append(origin)
    return tuple(dict.fromkeys(origins))


def _instructions(raw: str | None) -> str | None:
    """RERANKER_INSTRUCTIONS is free text, or the path of a file that holds it."""
    if raw is None:
        return None
    candidate = Path(raw).expanduser()
    if len(raw) < 4096 and candidate.is_file():
        return candidate.read_text(encoding="utf-8").strip() or None
    return raw


@dataclass(frozen=True)
class Config:
    # Graph database
    graph_backend: str = "falkordb"
    # The semantic half of the first stage reads an HNSW index over the facts' vectors instead of
    # computing the cosine against every fact (app/graph/vector_index.py), for graphs of at least
    # graph_vector_index_min_facts facts (0: every graph); smaller ones answer exactly, as fast, and on
    # FalkorDB get no index. The price: FalkorDB builds a large graph's index again while it loads it,
    # before it answers (100,000 facts: a start of 21.5 s with it, 3.6 s without; docs/bench/SCALE.md).
    graph_vector_index: bool = True
    graph_vector_index_min_facts: int = 5000
    # Unset: the app starts its own embedded FalkorDB. May carry a password (redis://:secret@host:6379).
    falkordb_url: str | None = field(default=None, repr=False)
    neo4j_uri: str | None = None  # unset: the app starts its own local Neo4j (app/graph/local_neo4j.py)
    neo4j_user: str = "neo4j"
    # The same default in .env.example and docker-compose.yml (tests/test_config.py holds them to it).
    neo4j_password: str = field(default="change-me-please", repr=False)
    neo4j_database: str = "neo4j"  # the database every graph lives in (Neo4j 4+ serves several)
    data_dir: Path = REPO_ROOT / "data"
    # The local Neo4j (NEO4J_URI unset): Maven's jars cached here, Bolt on this port (0: a free one)
    neo4j_cache_dir: Path = Path.home() / ".cache" / "mirofish"
    neo4j_local_port: int = 0
    neo4j_local_heap_mb: int = 1024
    neo4j_local_page_cache_mb: int = 512
    # A graph's lock outlives a dead holder by at most this (app/graph/graph_locks.py)
    graph_lock_lease_s: float = 30.0

    # LLM used by Graphiti for episode extraction and by the report tools
    llm_api_key: str = field(default="ollama", repr=False)
    llm_base_url: str = _DEFAULT_OLLAMA_V1
    llm_model_name: str = "qwen2.5:3b"
    llm_small_model_name: str = "qwen2.5:3b"
    graphiti_llm_provider: str = "openai"
    llm_timeout_s: float = 120.0

    # Embeddings
    embedding_provider: str = "openai"
    embedding_base_url: str = _DEFAULT_OLLAMA_V1
    embedding_model: str = "mxbai-embed-large"
    embedding_api_key: str = field(default="ollama", repr=False)
    embedding_dim: int = 1024

    # Reranker
    reranker_provider: str = "ollama"
    reranker_model: str = "qwen2.5:3b"
    reranker_base_url: str = _DEFAULT_OLLAMA_V1
    reranker_api_key: str = field(default="ollama", repr=False)
    reranker_score_mode: str = "auto"
    reranker_strategy: str = "pointwise"
    reranker_max_parallel: int = 4
    reranker_timeout_s: float = 30.0
    reranker_deadline_s: float = 120.0
    reranker_budget_s: float = 0.0  # judging time per rank call, then the finished scores are used (0: none)
    # When the graph runtime builds the reranker, one tiny judge request in the background loads the model
    # (Ollama loads it on its first request, which can take longer than RERANKER_TIMEOUT_S), given this long to
    # answer; until it does, readiness is 503 and a rank call waits for it at most RERANKER_TIMEOUT_S; 0: off.
    reranker_warmup_timeout_s: float = 120.0
    # The three shares (judge, the embedder's cosine, the first stage: the rest) were chosen on development
    # queries only (DL19 21-43, SciFact claims 16-45) by the rule in docs/bench/FUSION.md: the judge 0.7 and
    # the cosine 0.3 beat the judge with the first stage alone and the cosine alone on both sets, with MRR@10
    # no lower, in both development runs, and a fact only the judge finds still comes first (the report's
    # neighbourhood search needs that; rank fusion cannot do it). The first stage picks the candidates; the
    # cosine is read from the vector stored with each fact, so it costs no model call.
    reranker_fusion: str = "linear"
    reranker_fusion_weight: float = 0.7  # the judge's share in rrf, linear and zscore fusion
    reranker_cosine_weight: float = 0.3  # the cosine's share; it also orders what the judge is not asked about
    # The cascade: the judge reads only the first N candidates of the cheap order (first stage fused
    # with the cosine), the rest keep that order; 0 asks it about every candidate. The same rule found
    # no depth that kept 90% of the gain on both development sets, so by default every candidate is judged.
    reranker_judge_depth: int = 0
    # Which N: `top`, the cheap order's first N; `cut`, the N around the answer's cut (its limit), which
    # decide what makes the answer, while the cheap order's clear leaders keep their places.
    reranker_judge_focus: str = "top"
    reranker_cache_size: int = 4096
    reranker_candidates: int = 2
    reranker_max_tokens: int = 16
    reranker_breaker_threshold: int = 3
    reranker_breaker_cooldown_s: float = 30.0
    reranker_instructions: str | None = None
    # Strategy knobs (see graphiti_llm_rerank/strategies/)
    reranker_max_document_chars: int = DEFAULT_MAX_DOCUMENT_CHARS
    reranker_context_tokens: int = DEFAULT_CONTEXT_TOKENS
    reranker_window_size: int = 20  # sliding_window
    reranker_window_stride: int = 10  # sliding_window; smaller than the window size
    reranker_pairwise_passes: int = 10  # pairwise: full passes over every adjacent pair (2 * passes * (n-1) calls)
    reranker_tournament_rounds: int = 2  # tournament (settings build the single-group halving plan)
    reranker_mmr_lambda: float = 0.7  # mmr: relevance weight, 1 - lambda for diversity
    reranker_mmr_base: str = "pointwise"  # mmr: the strategy that gives relevance
    reranker_mmr_duplicate_threshold: float = 0.95  # mmr: cosine similarity that makes a near-duplicate
    # rerank_api provider (a dedicated reranker behind POST {base}/rerank)
    reranker_api_style: str = "auto"
    reranker_api_max_documents: int = 0  # documents per request; 0: no cap (split only when refused)

    # `python -m app.local_llm.ensure_models` (the compose file's one-shot before the backend): how long
    # it waits for each Ollama that a *_BASE_URL names to answer before it reports that none does
    ollama_wait_s: float = 120.0

    # Local model kit (llama.cpp's llama-server)
    local_llm_model: str = "qwen2.5-coder-1.5b"
    local_llm_port: int = 8088
    model_cache_dir: Path = Path.home() / ".cache" / "mirofish" / "models"
    # The kit's Ollama (app/local_llm/ollama.py): built under the cache, serving LOCAL_LLM_MODEL's GGUF on
    # 127.0.0.1 at this port, which keeps the model loaded this long after a request (an Ollama duration)
    ollama_cache_dir: Path = Path.home() / ".cache" / "mirofish"
    ollama_local_port: int = 11434
    ollama_local_keep_alive: str = "30m"
    # Its slots (OLLAMA_NUM_PARALLEL). One: on CPU the slots share the same cores, and the 1.5B judged a
    # passage in 3.1 s with one slot against 7.3 s with four (2 cores, 4 requests in flight, the prompt
    # prefix reused alike; docs/bench/SERVERS.md). Extra requests queue in Ollama.
    ollama_local_num_parallel: int = 1

    # HTTP server and API
    host: str = "127.0.0.1"
    port: int = 5001
    api_token: str | None = field(default=None, repr=False)
    # The server (gunicorn, app/cli/server.py; how many of each: docs/DEPLOY.md). Worker processes, each
    # with its own graph runtime and reranker (RERANKER_MAX_PARALLEL and the score cache are per
    # process), and the requests one worker serves at once (a search holds its thread until it answers).
    api_workers: int = 1
    api_threads: int = 16
    # On SIGTERM new connections are refused at once and the requests in flight get this long to finish;
    # what still runs then is cut off. 60: a reranked search on a CPU judge took 25 s at p50 here and 52 s
    # on a slower VM (README); an import batch cut off is rolled back, and import-facts sends it again.
    shutdown_grace_s: int = 60
    # Web origins (scheme://host[:port]) whose pages may call the API from a browser (CORS); none by default.
    cors_origins: tuple[str, ...] = ()
    max_request_bytes: int = 16 * 1024 * 1024
    search_timeout_s: float = 180.0

    # Report agent
    report_agent_max_tool_calls: int = 6
    # With a reranker, a section's citations and completion's offers are judged against the section's
    # question, and a fact it scores under this floor is not cited (0 turns it off). 0.02: the judge
    # is all but sure the fact does not help (P(yes) in logprobs mode; a grade or score of 0 otherwise).
    report_citation_floor: float = 0.02
    # With the floor, a fact must also clear it for the section's question with its names taken out
    # ("what part did it play in the outbreak"), so a fact that shares only a name with the question
    # is not cited or listed (app/report/citation_floor.py). One more judgement per section.
    report_floor_without_names: bool = True
    # With a reranker, a fact the agent adds on its own (offered to the writer after a section is written,
    # or listed beneath it) must score at least this for the section's question, as asked and, with the
    # above, without its names; the writer's own citations only need REPORT_CITATION_FLOOR. Adding asks
    # the judge to lean towards the fact, keeping only asks it not to rule the fact out. 0.05: on the
    # three tuned sample requirements (their reports replayed) the gold facts completion could add
    # scored 0.087 and more for their own part (a cause scored 0.023 for the responses part, 0.100 for
    # the causes), the planted one it added (AquaPure's water for the polo club) 0.032.
    report_added_facts_floor: float = 0.05
    # With a reranker, the first-stage candidates the judge reads for a section's own question (its
    # opening search, or InsightForge's search of the question itself); other searches read the usual
    # RERANKER_CANDIDATES per hit. A section's answers often share few words with its question
    # ("what caused ..." against "floodwater entered Well 4"): the first stage ranks them 30th to
    # 60th, the judge higher. 100: on the three tuned sample requirements' five section questions the
    # search's top 8 held 14 gold points, against 11 with the usual 16 and 11 with 64.
    # 0 reads the usual number; at most MAX_JUDGED_CANDIDATES.
    report_question_candidates: int = 100
    # With a reranker, after a section is written and completed, the facts its question judged best
    # (at or above REPORT_CITATION_FLOOR) that the report does not cite yet are listed under it, up to
    # this many (0: none). A 1.5B writer leaves out about a third of the gold facts it is shown even
    # when they are offered to it again (on the tuned sample reports: shown 41 of 60 gold points, cited 28); the
    # judge's order has them, so the report lists them, each in the fact's own words with its time,
    # rather than losing them.
    report_listed_facts: int = 6

    # Background tasks (GET /api/tasks/<id>) queue on QUEUE_URL, else on the FalkorDB server, else on a
    # broker the app starts (app/graph/task_broker.py); a finished task is forgotten after TASK_TTL_S,
    # one running longer than TASK_TIMEOUT_S is stopped. An app whose broker is its own runs
    # TASK_WORKERS worker processes itself; with a shared broker they run apart (`flask worker`).
    queue_url: str | None = field(default=None, repr=False)
    task_ttl_s: float = DEFAULT_TASK_TTL_S
    task_timeout_s: float = DEFAULT_TASK_TIMEOUT_S
    task_workers: int = 1
    # A worker's own /metrics (its tasks' outcomes), for workers that share no PROMETHEUS_MULTIPROC_DIR with
    # the API (their own containers); None: none.
    worker_metrics_port: int | None = None

    log_level: str = "INFO"
    # Monitoring: one INFO line per request on the `app.access` logger; and, when several processes
    # serve one API (gunicorn workers, job workers), the directory they share for Prometheus metrics
    # (prometheus_client's multiprocess mode; app/metrics.py). Unset: each process counts on its own.
    access_log: bool = True
    prometheus_multiproc_dir: Path | None = None

    def __post_init__(self) -> None:
        if self.reranker_fusion_weight + self.reranker_cosine_weight > 1.0 + 1e-9:
            raise ValueError(
                f"RERANKER_FUSION_WEIGHT ({self.reranker_fusion_weight}) + RERANKER_COSINE_WEIGHT "
                f"({self.reranker_cosine_weight}) must be <= 1: they are the judge's and the cosine's shares")

    @property
    def starts_own_database(self) -> bool:
        """Whether the app starts its graph database itself (the embedded FalkorDB, the local Neo4j)."""
        return (self.falkordb_url if self.graph_backend == "falkordb" else self.neo4j_uri) is None

    def check_serving(self) -> None:
        """What serving the API needs beyond each setting's own check; ValueError naming the setting.

        Only the server asks: the CLI tools, compose's model one-shot and the health check read the same
        settings (HOST=0.0.0.0 in the image) without listening anywhere."""
        if not _is_loopback(self.host) and not self.api_token:
            raise ValueError(f"API_TOKEN is required: HOST={self.host} listens beyond this machine "
                             "(set API_TOKEN, or HOST=127.0.0.1)")
        if self.api_workers > 1 and self.starts_own_database:
            setting, own = (("FALKORDB_URL", "embedded FalkorDB") if self.graph_backend == "falkordb"
                            else ("NEO4J_URI", "local Neo4j"))
            raise ValueError(f"API_WORKERS={self.api_workers} needs a database server ({setting}): the {own} "
                             "the app starts itself serves one process (or set API_WORKERS=1)")

    @classmethod
    def from_env(cls) -> "Config":
        """Read and validate every setting; raises ValueError naming the bad one."""
        load_env_file()
        embedding_base_url = _env("EMBEDDING_BASE_URL", _DEFAULT_OLLAMA_V1)
        embedding_api_key = _env("EMBEDDING_API_KEY", "ollama")
        llm_model = _env("LLM_MODEL_NAME", cls.llm_model_name)
        reranker_provider = _choice("RERANKER_PROVIDER", cls.reranker_provider, RERANKER_PROVIDERS)
        return cls(
            graph_backend=_choice("GRAPH_BACKEND", "falkordb", GRAPH_BACKENDS),
            graph_vector_index=_choice("GRAPH_VECTOR_INDEX", "on", ("on", "off")) == "on",
            graph_vector_index_min_facts=_int("GRAPH_VECTOR_INDEX_MIN_FACTS", cls.graph_vector_index_min_facts, 0),
            falkordb_url=_env("FALKORDB_URL"),
            neo4j_uri=_env("NEO4J_URI"),
            neo4j_user=_env("NEO4J_USER", cls.neo4j_user),
            neo4j_password=_env("NEO4J_PASSWORD", cls.neo4j_password),
            neo4j_database=_env("NEO4J_DATABASE", cls.neo4j_database),
            data_dir=Path(_env("DATA_DIR", str(REPO_ROOT / "data"))).expanduser().resolve(),
            neo4j_cache_dir=Path(_env("NEO4J_CACHE_DIR", str(cls.neo4j_cache_dir))).expanduser(),
            neo4j_local_port=_int("NEO4J_LOCAL_PORT", cls.neo4j_local_port, 0, 65535),
            neo4j_local_heap_mb=_int("NEO4J_LOCAL_HEAP_MB", cls.neo4j_local_heap_mb, 256),
            neo4j_local_page_cache_mb=_int("NEO4J_LOCAL_PAGE_CACHE_MB", cls.neo4j_local_page_cache_mb, 16),
            graph_lock_lease_s=_float("GRAPH_LOCK_LEASE_S", cls.graph_lock_lease_s, 1),
            llm_api_key=_env("LLM_API_KEY", "ollama"),
            llm_base_url=_env("LLM_BASE_URL", _DEFAULT_OLLAMA_V1),
            llm_model_name=llm_model,
            # Graphiti falls back to a hard-coded OpenAI model when no small model is given.
            llm_small_model_name=_env("LLM_SMALL_MODEL_NAME", llm_model),
            graphiti_llm_provider=_choice("GRAPHITI_LLM_PROVIDER", "openai", LLM_PROVIDERS),
            llm_timeout_s=_float("LLM_TIMEOUT_S", cls.llm_timeout_s, 1),
            embedding_provider=_choice("EMBEDDING_PROVIDER", "openai", EMBEDDING_PROVIDERS),
            embedding_base_url=embedding_base_url,
            embedding_model=_env("EMBEDDING_MODEL", cls.embedding_model),
            embedding_api_key=embedding_api_key,
            embedding_dim=_int("EMBEDDING_DIM", cls.embedding_dim, 1),
            reranker_provider=reranker_provider,
            reranker_model=_env("RERANKER_MODEL", cls.reranker_model),
            # The reranker usually lives on the same Ollama as the embedder.
            reranker_base_url=_env("RERANKER_BASE_URL", embedding_base_url),
            reranker_api_key=_reranker_api_key(reranker_provider, embedding_api_key),
            reranker_score_mode=_choice("RERANKER_SCORE_MODE", cls.reranker_score_mode, RERANKER_SCORE_MODES),
            reranker_strategy=_choice("RERANKER_STRATEGY", cls.reranker_strategy, RERANKER_STRATEGIES),
            reranker_max_parallel=_int("RERANKER_MAX_PARALLEL", cls.reranker_max_parallel, 1),
            reranker_timeout_s=_float("RERANKER_TIMEOUT_S", cls.reranker_timeout_s, 0.01),
            reranker_deadline_s=_float("RERANKER_DEADLINE_S", cls.reranker_deadline_s, 0.01),
            reranker_budget_s=_float("RERANKER_BUDGET_S", cls.reranker_budget_s, 0),
            reranker_warmup_timeout_s=_float("RERANKER_WARMUP_TIMEOUT_S", cls.reranker_warmup_timeout_s, 0),
            reranker_fusion=_choice("RERANKER_FUSION", cls.reranker_fusion, RERANKER_FUSIONS),
            reranker_fusion_weight=_float("RERANKER_FUSION_WEIGHT", cls.reranker_fusion_weight, 0, 1),
            reranker_cosine_weight=_float("RERANKER_COSINE_WEIGHT", cls.reranker_cosine_weight, 0, 1),
            reranker_judge_depth=_int("RERANKER_JUDGE_DEPTH", cls.reranker_judge_depth, 0),
            reranker_judge_focus=_choice("RERANKER_JUDGE_FOCUS", cls.reranker_judge_focus, RERANKER_JUDGE_FOCI),
            reranker_cache_size=_int("RERANKER_CACHE_SIZE", cls.reranker_cache_size, 0),
            reranker_candidates=_int("RERANKER_CANDIDATES", cls.reranker_candidates, 1),
            reranker_max_tokens=_int("RERANKER_MAX_TOKENS", cls.reranker_max_tokens, 1),
            reranker_breaker_threshold=_int(
                "RERANKER_BREAKER_THRESHOLD", cls.reranker_breaker_threshold, 1
            ),
            reranker_breaker_cooldown_s=_float(
                "RERANKER_BREAKER_COOLDOWN_S", cls.reranker_breaker_cooldown_s, 0
            ),
            reranker_instructions=_instructions(_env("RERANKER_INSTRUCTIONS")),
            reranker_max_document_chars=_int(
                "RERANKER_MAX_DOCUMENT_CHARS", cls.reranker_max_document_chars, 1
            ),
            reranker_context_tokens=_int("RERANKER_CONTEXT_TOKENS", cls.reranker_context_tokens, 256),
            reranker_window_size=_int("RERANKER_WINDOW_SIZE", cls.reranker_window_size, 2),
            reranker_window_stride=_int("RERANKER_WINDOW_STRIDE", cls.reranker_window_stride, 1),
            reranker_pairwise_passes=_int("RERANKER_PAIRWISE_PASSES", cls.reranker_pairwise_passes, 1),
            reranker_tournament_rounds=_int(
                "RERANKER_TOURNAMENT_ROUNDS", cls.reranker_tournament_rounds, 1
            ),
            reranker_mmr_lambda=_float("RERANKER_MMR_LAMBDA", cls.reranker_mmr_lambda, 0, 1),
            reranker_mmr_base=_choice("RERANKER_MMR_BASE", cls.reranker_mmr_base, MMR_BASE_STRATEGIES),
            reranker_mmr_duplicate_threshold=_float(
                "RERANKER_MMR_DUPLICATE_THRESHOLD", cls.reranker_mmr_duplicate_threshold, 0, 1
            ),
            reranker_api_style=_choice("RERANKER_API_STYLE", cls.reranker_api_style, RERANKER_API_STYLES),
            reranker_api_max_documents=_int("RERANKER_API_MAX_DOCUMENTS", cls.reranker_api_max_documents, 0),
            ollama_wait_s=_float("OLLAMA_WAIT_S", cls.ollama_wait_s, 0),
            local_llm_model=_choice("LOCAL_LLM_MODEL", cls.local_llm_model, LOCAL_LLM_MODELS),
            local_llm_port=_int("LOCAL_LLM_PORT", cls.local_llm_port, 1),
            model_cache_dir=Path(
                _env("MODEL_CACHE_DIR", str(cls.model_cache_dir))
            ).expanduser(),
            ollama_cache_dir=Path(_env("OLLAMA_CACHE_DIR", str(cls.ollama_cache_dir))).expanduser(),
            ollama_local_port=_int("OLLAMA_LOCAL_PORT", cls.ollama_local_port, 1, 65535),
            ollama_local_keep_alive=_duration("OLLAMA_LOCAL_KEEP_ALIVE", cls.ollama_local_keep_alive),
            ollama_local_num_parallel=_int("OLLAMA_LOCAL_NUM_PARALLEL", cls.ollama_local_num_parallel, 1, 64),
            host=_env("HOST", cls.host),
            port=_int("PORT", cls.port, 0),
            api_token=_env("API_TOKEN"),
            api_workers=_int("API_WORKERS", cls.api_workers, 1, 64),
            api_threads=_int("API_THREADS", cls.api_threads, 1, 1000),
            shutdown_grace_s=_int("SHUTDOWN_GRACE_S", cls.shutdown_grace_s, 1, 86400),
            cors_origins=_origins("CORS_ORIGINS"),
            max_request_bytes=_int("MAX_REQUEST_BYTES", cls.max_request_bytes, 1024),
            search_timeout_s=_float("SEARCH_TIMEOUT_S", cls.search_timeout_s, 1),
            log_level=_choice("LOG_LEVEL", "INFO", LOG_LEVELS).upper(),
            access_log=_choice("ACCESS_LOG", "on", ("on", "off")) == "on",
            prometheus_multiproc_dir=_shared_directory("PROMETHEUS_MULTIPROC_DIR"),
            report_agent_max_tool_calls=_int(
                "REPORT_AGENT_MAX_TOOL_CALLS", cls.report_agent_max_tool_calls, 1
            ),
            report_citation_floor=_float("REPORT_CITATION_FLOOR", cls.report_citation_floor, 0, 1),
            report_added_facts_floor=_float("REPORT_ADDED_FACTS_FLOOR", cls.report_added_facts_floor, 0, 1),
            report_floor_without_names=_choice("REPORT_FLOOR_WITHOUT_NAMES", "on", ("on", "off")) == "on",
            report_question_candidates=_int("REPORT_QUESTION_CANDIDATES", cls.report_question_candidates, 0, MAX_JUDGED_CANDIDATES),
            report_listed_facts=_int("REPORT_LISTED_FACTS", cls.report_listed_facts, 0, MAX_LISTED_FACTS),
            queue_url=_env("QUEUE_URL"),
            task_ttl_s=_float("TASK_TTL_S", cls.task_ttl_s, 1),
            task_timeout_s=_float("TASK_TIMEOUT_S", cls.task_timeout_s, 1),
            task_workers=_int("TASK_WORKERS", cls.task_workers, 0, 16),
            worker_metrics_port=_int("WORKER_METRICS_PORT", cls.worker_metrics_port, 1, 65535),
        )
