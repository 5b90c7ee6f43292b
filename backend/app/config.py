"""All settings in one place, read from the environment (and `.env` at the repo root).

Every other module reads settings through `Config`; nothing else calls `os.environ.get`
for an application setting. `Config` declares each setting once: its field name is the variable's
name in lower case, its type says what the variable may hold (a bound, a list of allowed values, a
check), its default is the value an unset variable gets. `Config.from_env()` reads the variables
through `Settings`, the pydantic-settings class made from those declarations, so a typo such as
`RERANKER_PROVIDER=olama` fails at startup with one line that names the setting and the allowed
values, not at the first search. `Config` itself stays a plain frozen dataclass: the app builds
variants of it with `dataclasses.replace`, and values given in code are not read again.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, get_type_hints

from dotenv import load_dotenv
from graphiti_llm_rerank import RerankerConfig
from pydantic import AfterValidator, BeforeValidator, Field, ValidationError, ValidationInfo, create_model
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, EnvSettingsSource, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict

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
# What the judge reads of a fact's validity beside its text (app/graph/search.py `edge_passage`): nothing,
# its dates, or its dates and whether it still holds at the time of the search.
RERANKER_PASSAGE_TIMES = ("off", "dates", "status")
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
    """Load `.env` (DOTENV_PATH, default the repo root's); variables already set win.

    Into the environment itself: the processes the app starts (workers, model servers) and the
    commands `stack_env` runs see the same values."""
    load_dotenv(os.environ.get("DOTENV_PATH") or REPO_ROOT / ".env", override=False)


# -- The checks a setting's type carries ------------------------------------------------------------
# Each reads the setting's name from pydantic (`info.field_name`), so its message names the variable.


def _variable(info: ValidationInfo) -> str:
    return (info.field_name or "").upper()


def one_of(allowed: tuple[str, ...]) -> BeforeValidator:
    """A switch: one of `allowed`, in any case."""

    def check(value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, str):
            return value
        chosen = value.strip().lower()
        if chosen not in allowed:
            raise ValueError(f"Unknown {_variable(info)}={chosen!r}; allowed: {allowed}")
        return chosen

    return BeforeValidator(check)


def _on_or_off(value: Any, info: ValidationInfo) -> Any:
    if not isinstance(value, str):
        return value
    chosen = value.strip().lower()
    if chosen not in ("on", "off"):
        raise ValueError(f"Unknown {_variable(info)}={chosen!r}; allowed: ('on', 'off')")
    return chosen == "on"


ON_OFF = BeforeValidator(_on_or_off)  # a bool set as `on` or `off`

# What Ollama takes for OLLAMA_KEEP_ALIVE: whole seconds, or a Go duration such as 30m or 1h30m; negative
# keeps the model loaded for good.
_DURATION = re.compile(r"-?(?:\d+|(?:\d+(?:\.\d+)?(?:ns|us|µs|ms|s|m|h))+)")


def _ollama_duration(value: str, info: ValidationInfo) -> str:
    if not _DURATION.fullmatch(value):
        raise ValueError(f"{_variable(info)} must be seconds or a duration such as 30m or 1h30m, got {value!r}")
    return value


def _absolute_path(path: Path) -> Path:
    return path.expanduser().resolve()


def _writable_directory(path: Path | None, info: ValidationInfo) -> Path | None:
    """A directory that must exist and be writable when set: the processes write into it from their
    first request on, so a wrong one fails at start, not in the middle of a request. No ~ expanded:
    prometheus_client reads the same variable as it is."""
    if path is not None and not (path.is_dir() and os.access(path, os.W_OK)):
        raise ValueError(f"{_variable(info)} must be an existing, writable directory, got {str(path)!r}")
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


def _web_origins(value: Any, info: ValidationInfo) -> Any:
    """A comma-separated list of web origins, each as a browser sends it (lower case, no path)."""
    if not isinstance(value, str):
        return value
    origins = []
    for part in value.split(","):
        origin = part.strip().lower().removesuffix("/")
        if not origin:
            continue
        if not _ORIGIN.fullmatch(origin):
            raise ValueError(f"{_variable(info)}: {part.strip()!r} is not a web origin such as "
                             "https://app.example.com (scheme://host[:port], no path; several are separated by commas)")
        origins.append(origin)
    return tuple(dict.fromkeys(origins))


def _text_or_file(value: str | None) -> str | None:
    """RERANKER_INSTRUCTIONS is free text, or the path of a file that holds it."""
    if value is None:
        return None
    candidate = Path(value).expanduser()
    if len(value) < 4096 and candidate.is_file():
        return candidate.read_text(encoding="utf-8").strip() or None
    return value


@dataclass(frozen=True)
class Config:
    """Every setting: the field `name` is the variable NAME, its default the value NAME unset gives.

    A field's `Annotated` type holds the check `from_env` makes (`Field(ge=..., le=...)`, `one_of(...)`,
    `ON_OFF`, a validator); values given in code (`Config(...)`, `dataclasses.replace`) are taken as they are."""

    # Graph database
    graph_backend: Annotated[str, one_of(GRAPH_BACKENDS)] = "falkordb"
    # The semantic half of the first stage reads an HNSW index over the facts' vectors instead of
    # computing the cosine against every fact (app/graph/vector_index.py), for graphs of at least
    # graph_vector_index_min_facts facts (0: every graph); smaller ones answer exactly, as fast, and on
    # FalkorDB get no index. The price: FalkorDB builds a large graph's index again while it loads it,
    # before it answers (100,000 facts: a start of 21.5 s with it, 3.6 s without; docs/bench/SCALE.md).
    graph_vector_index: Annotated[bool, ON_OFF] = True
    graph_vector_index_min_facts: Annotated[int, Field(ge=0)] = 5000
    # Unset: the app starts its own embedded FalkorDB. May carry a password (redis://:secret@host:6379).
    falkordb_url: str | None = field(default=None, repr=False)
    neo4j_uri: str | None = None  # unset: the app starts its own local Neo4j (app/graph/local_neo4j.py)
    neo4j_user: str = "neo4j"
    # The same default in .env.example and docker-compose.yml (tests/test_config.py holds them to it).
    neo4j_password: str = field(default="change-me-please", repr=False)
    neo4j_database: str = "neo4j"  # the database every graph lives in (Neo4j 4+ serves several)
    data_dir: Annotated[Path, AfterValidator(_absolute_path)] = REPO_ROOT / "data"
    # The local Neo4j (NEO4J_URI unset): Maven's jars cached here, Bolt on this port (0: a free one)
    neo4j_cache_dir: Annotated[Path, AfterValidator(Path.expanduser)] = Path.home() / ".cache" / "mirofish"
    neo4j_local_port: Annotated[int, Field(ge=0, le=65535)] = 0
    neo4j_local_heap_mb: Annotated[int, Field(ge=256)] = 1024
    neo4j_local_page_cache_mb: Annotated[int, Field(ge=16)] = 512
    # A graph's lock outlives a dead holder by at most this (app/graph/graph_locks.py)
    graph_lock_lease_s: Annotated[float, Field(ge=1)] = 30.0

    # LLM used by Graphiti for episode extraction and by the report tools
    llm_api_key: str = field(default="ollama", repr=False)
    llm_base_url: str = _DEFAULT_OLLAMA_V1
    llm_model_name: str = "qwen2.5:3b"
    llm_small_model_name: str = "qwen2.5:3b"
    graphiti_llm_provider: Annotated[str, one_of(LLM_PROVIDERS)] = "openai"
    llm_timeout_s: Annotated[float, Field(ge=1)] = 120.0

    # Embeddings
    embedding_provider: Annotated[str, one_of(EMBEDDING_PROVIDERS)] = "openai"
    embedding_base_url: str = _DEFAULT_OLLAMA_V1
    embedding_model: str = "mxbai-embed-large"
    embedding_api_key: str = field(default="ollama", repr=False)
    embedding_dim: Annotated[int, Field(ge=1)] = 1024

    # Reranker
    reranker_provider: Annotated[str, one_of(RERANKER_PROVIDERS)] = "ollama"
    reranker_model: str = "qwen2.5:3b"
    reranker_base_url: str = _DEFAULT_OLLAMA_V1
    reranker_api_key: str = field(default="ollama", repr=False)
    reranker_score_mode: Annotated[str, one_of(RERANKER_SCORE_MODES)] = "auto"
    reranker_strategy: Annotated[str, one_of(RERANKER_STRATEGIES)] = "pointwise"
    reranker_max_parallel: Annotated[int, Field(ge=1)] = 4
    reranker_timeout_s: Annotated[float, Field(ge=0.01)] = 30.0
    reranker_deadline_s: Annotated[float, Field(ge=0.01)] = 120.0
    reranker_budget_s: Annotated[float, Field(ge=0)] = 0.0  # judging time per rank call, then the finished scores are used (0: none)
    # When the graph runtime builds the reranker, one tiny judge request in the background loads the model
    # (Ollama loads it on its first request, which can take longer than RERANKER_TIMEOUT_S), given this long to
    # answer; until it does, readiness is 503 and a rank call waits for it at most RERANKER_TIMEOUT_S; 0: off.
    reranker_warmup_timeout_s: Annotated[float, Field(ge=0)] = 120.0
    # The three shares (judge, the embedder's cosine, the first stage: the rest) were chosen on development
    # queries only (DL19 21-43, SciFact claims 16-45) by the rule in docs/bench/FUSION.md: the judge 0.7 and
    # the cosine 0.3 beat the judge with the first stage alone and the cosine alone on both sets, with MRR@10
    # no lower, in both development runs, and a fact only the judge finds still comes first (the report's
    # neighbourhood search needs that; rank fusion cannot do it). The first stage picks the candidates; the
    # cosine is read from the vector stored with each fact, so it costs no model call.
    reranker_fusion: Annotated[str, one_of(RERANKER_FUSIONS)] = "linear"
    reranker_fusion_weight: Annotated[float, Field(ge=0, le=1)] = 0.7  # the judge's share in rrf, linear and zscore fusion
    reranker_cosine_weight: Annotated[float, Field(ge=0, le=1)] = 0.3  # the cosine's share; it also orders what the judge is not asked about
    # The cascade: the judge reads only the first N candidates of the cheap order (first stage fused
    # with the cosine), the rest keep that order; 0 asks it about every candidate. The same rule found
    # no depth that kept 90% of the gain on both development sets, so by default every candidate is judged.
    reranker_judge_depth: Annotated[int, Field(ge=0)] = 0
    # Which N: `top`, the cheap order's first N; `cut`, the N around the answer's cut (its limit), which
    # decide what makes the answer, while the cheap order's clear leaders keep their places.
    reranker_judge_focus: Annotated[str, one_of(RERANKER_JUDGE_FOCI)] = "top"
    # A fact's validity in the passage the judge reads, so "who runs it now" can prefer the fact that still
    # holds over one superseded (docs/bench/TEMPORAL.md).
    reranker_passage_time: Annotated[str, one_of(RERANKER_PASSAGE_TIMES)] = "status"
    reranker_cache_size: Annotated[int, Field(ge=0)] = 4096
    reranker_candidates: Annotated[int, Field(ge=1)] = 2
    reranker_max_tokens: Annotated[int, Field(ge=1)] = 16
    reranker_breaker_threshold: Annotated[int, Field(ge=1)] = 3
    reranker_breaker_cooldown_s: Annotated[float, Field(ge=0)] = 30.0
    reranker_instructions: Annotated[str | None, AfterValidator(_text_or_file)] = None
    # Strategy knobs (see graphiti_llm_rerank/strategies/)
    reranker_max_document_chars: Annotated[int, Field(ge=1)] = DEFAULT_MAX_DOCUMENT_CHARS
    reranker_context_tokens: Annotated[int, Field(ge=256)] = DEFAULT_CONTEXT_TOKENS
    reranker_window_size: Annotated[int, Field(ge=2)] = 20  # sliding_window
    reranker_window_stride: Annotated[int, Field(ge=1)] = 10  # sliding_window; smaller than the window size
    reranker_pairwise_passes: Annotated[int, Field(ge=1)] = 10  # pairwise: full passes over every adjacent pair (2 * passes * (n-1) calls)
    reranker_tournament_rounds: Annotated[int, Field(ge=1)] = 2  # tournament (settings build the single-group halving plan)
    reranker_mmr_lambda: Annotated[float, Field(ge=0, le=1)] = 0.7  # mmr: relevance weight, 1 - lambda for diversity
    reranker_mmr_base: Annotated[str, one_of(MMR_BASE_STRATEGIES)] = "pointwise"  # mmr: the strategy that gives relevance
    reranker_mmr_duplicate_threshold: Annotated[float, Field(ge=0, le=1)] = 0.95  # mmr: cosine similarity that makes a near-duplicate
    # rerank_api provider (a dedicated reranker behind POST {base}/rerank)
    reranker_api_style: Annotated[str, one_of(RERANKER_API_STYLES)] = "auto"
    reranker_api_max_documents: Annotated[int, Field(ge=0)] = 0  # documents per request; 0: no cap (split only when refused)

    # `python -m app.local_llm.ensure_models` (the compose file's one-shot before the backend): how long
    # it waits for each Ollama that a *_BASE_URL names to answer before it reports that none does
    ollama_wait_s: Annotated[float, Field(ge=0)] = 120.0

    # Local model kit (llama.cpp's llama-server)
    local_llm_model: Annotated[str, one_of(LOCAL_LLM_MODELS)] = "qwen2.5-coder-1.5b"
    local_llm_port: Annotated[int, Field(ge=1)] = 8088
    # Compute threads of the kit's model servers (llama-server's --threads and --threads-batch, the Ollama
    # model's num_thread); 0: one per core this process may run on. On a machine that also runs other work
    # fewer is faster: llama.cpp's threads spin at each step until the slowest one arrives, so a thread
    # that loses its core holds up the rest (2 cores, one busy: 6.4 generated tokens/s with 1 thread
    # against 4.2 with 2; docs/bench/SERVERS.md, "Threads on a busy machine").
    local_llm_threads: Annotated[int, Field(ge=0, le=1024)] = 0
    model_cache_dir: Annotated[Path, AfterValidator(Path.expanduser)] = Path.home() / ".cache" / "mirofish" / "models"
    # The kit's Ollama (app/local_llm/ollama.py): built under the cache, serving LOCAL_LLM_MODEL's GGUF on
    # 127.0.0.1 at this port, which keeps the model loaded this long after a request (an Ollama duration)
    ollama_cache_dir: Annotated[Path, AfterValidator(Path.expanduser)] = Path.home() / ".cache" / "mirofish"
    ollama_local_port: Annotated[int, Field(ge=1, le=65535)] = 11434
    ollama_local_keep_alive: Annotated[str, AfterValidator(_ollama_duration)] = "30m"
    # Its slots (OLLAMA_NUM_PARALLEL). One: on CPU the slots share the same cores, and the 1.5B judged a
    # passage in 3.1 s with one slot against 7.3 s with four (2 cores, 4 requests in flight, the prompt
    # prefix reused alike; docs/bench/SERVERS.md). Extra requests queue in Ollama.
    ollama_local_num_parallel: Annotated[int, Field(ge=1, le=64)] = 1

    # HTTP server and API
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0)] = 5001
    api_token: str | None = field(default=None, repr=False)
    # The server (gunicorn, app/cli/server.py; how many of each: docs/DEPLOY.md). Worker processes, each
    # with its own graph runtime and reranker (RERANKER_MAX_PARALLEL and the score cache are per
    # process), and the requests one worker serves at once (a search holds its thread until it answers).
    api_workers: Annotated[int, Field(ge=1, le=64)] = 1
    api_threads: Annotated[int, Field(ge=1, le=1000)] = 16
    # On SIGTERM new connections are refused at once and the requests in flight get this long to finish;
    # what still runs then is cut off. 60: a reranked search on a CPU judge took 25 s at p50 here and 52 s
    # on a slower VM (README); an import batch cut off is rolled back, and import-facts sends it again.
    shutdown_grace_s: Annotated[int, Field(ge=1, le=86400)] = 60
    # Web origins (scheme://host[:port]) whose pages may call the API from a browser (CORS); none by default.
    cors_origins: Annotated[tuple[str, ...], NoDecode, BeforeValidator(_web_origins)] = ()
    max_request_bytes: Annotated[int, Field(ge=1024)] = 16 * 1024 * 1024
    search_timeout_s: Annotated[float, Field(ge=1)] = 180.0

    # Report agent
    report_agent_max_tool_calls: Annotated[int, Field(ge=1)] = 6
    # With a reranker, a section's citations and completion's offers are judged against the section's
    # question, and a fact it scores under this floor is not cited (0 turns it off). 0.02: the judge
    # is all but sure the fact does not help (P(yes) in logprobs mode; a grade or score of 0 otherwise).
    report_citation_floor: Annotated[float, Field(ge=0, le=1)] = 0.02
    # With the floor, a fact must also clear it for the section's question with its names taken out
    # ("what part did it play in the outbreak"), so a fact that shares only a name with the question
    # is not cited or listed (app/report/citation_floor.py). One more judgement per section.
    report_floor_without_names: Annotated[bool, ON_OFF] = True
    # With a reranker, a fact the agent adds on its own (offered to the writer after a section is written,
    # or listed beneath it) must score at least this for the section's question, as asked and, with the
    # above, without its names; the writer's own citations only need REPORT_CITATION_FLOOR. Adding asks
    # the judge to lean towards the fact, keeping only asks it not to rule the fact out. 0.05: on the
    # three tuned sample requirements (their reports replayed) the gold facts completion could add
    # scored 0.087 and more for their own part (a cause scored 0.023 for the responses part, 0.100 for
    # the causes), the planted one it added (AquaPure's water for the polo club) 0.032.
    report_added_facts_floor: Annotated[float, Field(ge=0, le=1)] = 0.05
    # With a reranker, the first-stage candidates the judge reads for a section's own question (its
    # opening search, or InsightForge's search of the question itself); other searches read the usual
    # RERANKER_CANDIDATES per hit. A section's answers often share few words with its question
    # ("what caused ..." against "floodwater entered Well 4"): the first stage ranks them 30th to
    # 60th, the judge higher. 100: on the three tuned sample requirements' five section questions the
    # search's top 8 held 14 gold points, against 11 with the usual 16 and 11 with 64.
    # 0 reads the usual number; at most MAX_JUDGED_CANDIDATES.
    report_question_candidates: Annotated[int, Field(ge=0, le=MAX_JUDGED_CANDIDATES)] = 100
    # With a reranker, after a section is written and completed, the facts its question judged best
    # (at or above REPORT_CITATION_FLOOR) that the report does not cite yet are listed under it, up to
    # this many (0: none). A 1.5B writer leaves out about a third of the gold facts it is shown even
    # when they are offered to it again (on the tuned sample reports: shown 41 of 60 gold points, cited 28); the
    # judge's order has them, so the report lists them, each in the fact's own words with its time,
    # rather than losing them.
    report_listed_facts: Annotated[int, Field(ge=0, le=MAX_LISTED_FACTS)] = 6

    # Background tasks (GET /api/tasks/<id>) queue on QUEUE_URL, else on the FalkorDB server, else on a
    # broker the app starts (app/graph/task_broker.py); a finished task is forgotten after TASK_TTL_S,
    # one running longer than TASK_TIMEOUT_S is stopped. An app whose broker is its own runs
    # TASK_WORKERS worker processes itself; with a shared broker they run apart (`flask worker`).
    queue_url: str | None = field(default=None, repr=False)
    task_ttl_s: Annotated[float, Field(ge=1)] = DEFAULT_TASK_TTL_S
    task_timeout_s: Annotated[float, Field(ge=1)] = DEFAULT_TASK_TIMEOUT_S
    task_workers: Annotated[int, Field(ge=0, le=16)] = 1
    # A worker's own /metrics (its tasks' outcomes), for workers that share no PROMETHEUS_MULTIPROC_DIR with
    # the API (their own containers); None: none.
    worker_metrics_port: Annotated[int, Field(ge=1, le=65535)] | None = None

    log_level: Annotated[str, one_of(LOG_LEVELS), AfterValidator(str.upper)] = "INFO"
    # Monitoring: one INFO line per request on the `app.access` logger; and, when several processes
    # serve one API (gunicorn workers, job workers), the directory they share for Prometheus metrics
    # (prometheus_client's multiprocess mode; app/metrics.py). Unset: each process counts on its own.
    access_log: Annotated[bool, ON_OFF] = True
    prometheus_multiproc_dir: Annotated[Path | None, AfterValidator(_writable_directory)] = None

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
        try:
            read = Settings()
        except ValidationError as error:
            raise ValueError(_one_line(error)) from None
        return cls(**_with_followed_defaults(read))


# -- Reading the environment ------------------------------------------------------------------------


class _TrimmedEnvironment(EnvSettingsSource):
    """The environment as the app reads it: each value stripped, and a blank one counts as unset (as
    compose's `${NAME:-}` and an empty line in `.env` leave it), so the setting keeps its default."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        value, key, is_complex = super().get_field_value(field, field_name)
        if isinstance(value, str):
            value = value.strip() or None
        return value, key, is_complex


class _EnvironmentSettings(BaseSettings):
    # Variables by their exact upper-case name; the defaults are Config's own, trusted as they are.
    model_config = SettingsConfigDict(case_sensitive=True, validate_default=False, extra="ignore",
                                      protected_namespaces=())

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource,
                                   dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource,
                                   ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The environment only: `.env` is already in it (load_env_file), below what was set before.
        return (_TrimmedEnvironment(settings_cls),)


def _setting(declared: dataclasses.Field, annotation: Any) -> tuple[Any, FieldInfo]:
    return annotation, Field(default=declared.default, validation_alias=declared.name.upper(), repr=declared.repr)


_DECLARED = get_type_hints(Config, include_extras=True)
# Config's fields as pydantic-settings reads them: FIELD_NAME from the environment, checked by its type.
Settings: type[BaseSettings] = create_model(
    "Settings", __base__=_EnvironmentSettings, __module__=__name__,
    **{declared.name: _setting(declared, _DECLARED[declared.name]) for declared in dataclasses.fields(Config)})


def setting_names() -> tuple[str, ...]:
    """Every variable the app reads for its settings, in Config's order."""
    return tuple(declared.name.upper() for declared in dataclasses.fields(Config))


def _with_followed_defaults(read: BaseSettings) -> dict[str, Any]:
    """The values read, with the settings whose default is another setting's value filled in when unset."""
    values = {name: getattr(read, name) for name in type(read).model_fields}
    given = read.model_fields_set
    if "llm_small_model_name" not in given:
        # Graphiti falls back to a hard-coded OpenAI model when no small model is given.
        values["llm_small_model_name"] = values["llm_model_name"]
    if "reranker_base_url" not in given:  # the reranker usually lives on the same Ollama as the embedder
        values["reranker_base_url"] = values["embedding_base_url"]
    if "reranker_api_key" not in given:
        # The judge shares the embedder's server and key. A rerank_api server is someone else's (TEI,
        # Cohere, Jina): it never gets the embedder's key, only its own or none.
        own_key = values["reranker_provider"] in RERANKER_PROVIDERS_WITH_OWN_KEY
        values["reranker_api_key"] = "" if own_key else values["embedding_api_key"]
    return values


def _one_line(error: ValidationError) -> str:
    """The first bad setting in words that name it (the others only by name): one line at start."""
    problems = error.errors(include_url=False)
    others = [str(problem["loc"][0]) for problem in problems[1:]]
    return _described(problems[0]) + (f" (also wrong: {', '.join(others)})" if others else "")


def _described(problem: Any) -> str:
    name, kind, given = str(problem["loc"][0]), problem["type"], problem["input"]
    context = problem.get("ctx", {})
    if kind == "value_error":  # the setting's own check, whose message names it
        return str(context["error"])
    if kind == "greater_than_equal":
        return f"{name} must be >= {_as_declared(context['ge'])}, got {given}"
    if kind == "less_than_equal":
        return f"{name} must be <= {_as_declared(context['le'])}, got {given}"
    if kind.startswith("int_"):
        return f"{name} must be an integer, got {given!r}"
    if kind.startswith("float_"):
        return f"{name} must be a number, got {given!r}"
    return f"{name}: {problem['msg']}"


def _as_declared(bound: float) -> float:
    """A bound as the declaration writes it: pydantic gives a float setting's `ge=1` as 1.0."""
    return int(bound) if isinstance(bound, float) and bound.is_integer() else bound
