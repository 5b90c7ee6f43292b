import os
import re
import types
import typing
from pathlib import Path

import pytest
from dotenv import dotenv_values

from app.config import Config, Settings


def test_defaults_point_at_ollama_and_embedded_falkordb(monkeypatch):
    for key in ("EMBEDDING_PROVIDER", "RERANKER_PROVIDER"):
        monkeypatch.delenv(key, raising=False)
    config = Config.from_env()
    assert config.graph_backend == "falkordb"
    assert config.falkordb_url is None
    assert config.reranker_provider == "ollama"
    assert config.reranker_model == "qwen2.5:3b"
    assert config.reranker_base_url == "http://localhost:11434/v1"
    assert config.embedding_provider == "openai"
    assert config.llm_small_model_name == config.llm_model_name


def test_switches_are_case_insensitive(monkeypatch):
    monkeypatch.setenv("GRAPH_BACKEND", "Neo4J")
    monkeypatch.setenv("RERANKER_PROVIDER", "NONE")
    monkeypatch.setenv("EMBEDDING_PROVIDER", "Local")
    monkeypatch.setenv("GRAPHITI_LLM_PROVIDER", "OpenAI_Generic")
    config = Config.from_env()
    assert (config.graph_backend, config.reranker_provider) == ("neo4j", "none")
    assert (config.embedding_provider, config.graphiti_llm_provider) == ("local", "openai_generic")


@pytest.mark.parametrize(
    "name, value, allowed",
    [
        ("GRAPH_BACKEND", "kuzu", "('falkordb', 'neo4j')"),
        ("RERANKER_PROVIDER", "olama", "('ollama', 'rerank_api', 'none')"),
        ("EMBEDDING_PROVIDER", "cohere", "('openai', 'local')"),
        ("GRAPHITI_LLM_PROVIDER", "anthropic", "('openai', 'openai_generic')"),
        ("RERANKER_SCORE_MODE", "vibes", "('auto', 'logprobs', 'json', 'graded')"),
        ("RERANKER_STRATEGY", "bubble", "('pointwise', 'listwise', 'sliding_window', 'pairwise', 'tournament', 'mmr')"),
        ("LOCAL_LLM_MODEL", "gpt-4", "('qwen2.5-coder-1.5b', 'qwen2.5-coder-0.5b')"),
        ("LOG_LEVEL", "loud", "('debug', 'info', 'warning', 'error')"),
    ],
)
def test_unknown_switch_values_name_the_allowed_ones(monkeypatch, name, value, allowed):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError) as error:
        Config.from_env()
    assert str(error.value) == f"Unknown {name}={value!r}; allowed: {allowed}"


def test_reranker_endpoint_follows_the_embedding_settings(monkeypatch):
    monkeypatch.setenv("EMBEDDING_BASE_URL", "http://gpu-box:11434/v1")
    monkeypatch.setenv("EMBEDDING_API_KEY", "secret-embed")
    config = Config.from_env()
    assert config.reranker_base_url == "http://gpu-box:11434/v1"
    assert config.reranker_api_key == "secret-embed"
    monkeypatch.setenv("RERANKER_BASE_URL", "http://judge:8088/v1")
    assert Config.from_env().reranker_base_url == "http://judge:8088/v1"


def test_small_model_defaults_to_the_model(monkeypatch):
    monkeypatch.setenv("LLM_MODEL_NAME", "qwen2.5-coder-1.5b")
    assert Config.from_env().llm_small_model_name == "qwen2.5-coder-1.5b"
    monkeypatch.setenv("LLM_SMALL_MODEL_NAME", "tiny")
    assert Config.from_env().llm_small_model_name == "tiny"


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("RERANKER_TIMEOUT_S", "0", "RERANKER_TIMEOUT_S must be >= 0.01"),
        ("RERANKER_CANDIDATES", "0", "RERANKER_CANDIDATES must be >= 1"),
        ("RERANKER_CACHE_SIZE", "-1", "RERANKER_CACHE_SIZE must be >= 0"),
        ("RERANKER_BREAKER_THRESHOLD", "0", "RERANKER_BREAKER_THRESHOLD must be >= 1"),
        ("MAX_REQUEST_BYTES", "10", "MAX_REQUEST_BYTES must be >= 1024"),
        ("REPORT_AGENT_MAX_TOOL_CALLS", "x", "REPORT_AGENT_MAX_TOOL_CALLS must be an integer"),
    ],
)
def test_number_bounds_name_the_setting(monkeypatch, name, value, message):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=message):
        Config.from_env()


def test_numbers_are_validated(monkeypatch):
    monkeypatch.setenv("RERANKER_MAX_PARALLEL", "0")
    with pytest.raises(ValueError, match="RERANKER_MAX_PARALLEL must be >= 1"):
        Config.from_env()
    monkeypatch.setenv("RERANKER_MAX_PARALLEL", "four")
    with pytest.raises(ValueError, match="must be an integer"):
        Config.from_env()


@pytest.mark.parametrize("value", ["30m", "1h30m", "300", "-1", "2.5h", "45s"])
def test_ollama_keep_alive_takes_what_ollama_takes(monkeypatch, value):
    monkeypatch.setenv("OLLAMA_LOCAL_KEEP_ALIVE", value)
    assert Config.from_env().ollama_local_keep_alive == value


@pytest.mark.parametrize("value", ["30 minutes", "m30", "1d", "30m5"])
def test_ollama_keep_alive_refuses_what_ollama_would_not_parse(monkeypatch, value):
    monkeypatch.setenv("OLLAMA_LOCAL_KEEP_ALIVE", value)
    with pytest.raises(ValueError, match="OLLAMA_LOCAL_KEEP_ALIVE must be seconds or a duration"):
        Config.from_env()


def test_instructions_may_come_from_a_file(monkeypatch, tmp_path: Path):
    guidance = tmp_path / "guidance.txt"
    guidance.write_text("Prefer official reference documents.\n")
    monkeypatch.setenv("RERANKER_INSTRUCTIONS", str(guidance))
    assert Config.from_env().reranker_instructions == "Prefer official reference documents."
    monkeypatch.setenv("RERANKER_INSTRUCTIONS", "Prefer recent facts.")
    assert Config.from_env().reranker_instructions == "Prefer recent facts."


def test_config_repr_holds_no_secrets(monkeypatch):
    for name in ("RERANKER_API_KEY", "API_TOKEN", "LLM_API_KEY", "EMBEDDING_API_KEY", "NEO4J_PASSWORD"):
        monkeypatch.setenv(name, f"{name.lower()}-very-secret")
    monkeypatch.setenv("FALKORDB_URL", "redis://:falkordb-very-secret@falkor.internal:6379")
    shown = repr(Config.from_env())
    assert "very-secret" not in shown
    assert "reranker_model" in shown


# Every number setting with its bounds, as Config declares them (`Annotated[int, Field(ge=..., le=...)]`),
# read from the settings class so that a new number is tested too.
def _number_bounds() -> list[tuple[str, str, float, float | None]]:
    bounds = []
    for name, declared in Settings.model_fields.items():
        annotation, metadata = declared.annotation, list(declared.metadata)
        if typing.get_origin(annotation) in (typing.Union, types.UnionType):  # `int | None`: the int's bounds
            (annotation,) = [arm for arm in typing.get_args(annotation) if arm is not type(None)]
            if typing.get_origin(annotation) is typing.Annotated:
                annotation, *inner = typing.get_args(annotation)
                metadata += [bound for info in inner for bound in getattr(info, "metadata", [info])]
        if annotation in (int, float):
            low = next((bound.ge for bound in metadata if hasattr(bound, "ge")), None)
            high = next((bound.le for bound in metadata if hasattr(bound, "le")), None)
            bounds.append((annotation.__name__, declared.validation_alias, low, high))
    return bounds


BOUNDS = _number_bounds()


def test_every_number_setting_has_a_lower_bound():
    unbounded = [name for _, name, low, _ in BOUNDS if low is None]
    assert unbounded == [] and len(BOUNDS) >= 25
    assert ("int", "WORKER_METRICS_PORT", 1, 65535) in BOUNDS  # found inside `int | None` too


@pytest.mark.parametrize("kind, name, low, high", BOUNDS, ids=[bound[1] for bound in BOUNDS])
def test_every_number_below_its_minimum_is_refused_by_name(monkeypatch, kind, name, low, high):
    below = str(int(low) - 1) if kind == "int" else str(low - 0.001)
    monkeypatch.setenv(name, below)
    with pytest.raises(ValueError, match=rf"^{name} must be >= {low}, got {below}$"):
        Config.from_env()
    if high is not None:
        above = str(int(high) + 1) if kind == "int" else str(high + 0.001)
        monkeypatch.setenv(name, above)
        with pytest.raises(ValueError, match=rf"^{name} must be <= {high}, got {above}$"):
            Config.from_env()


def test_values_are_stripped_and_a_blank_one_keeps_the_default(monkeypatch):
    monkeypatch.setenv("RERANKER_MODEL", "  qwen2.5:7b \t")
    monkeypatch.setenv("RERANKER_MAX_PARALLEL", " 8 ")
    monkeypatch.setenv("RERANKER_TIMEOUT_S", "   ")
    monkeypatch.setenv("LLM_MODEL_NAME", "")
    config = Config.from_env()
    assert (config.reranker_model, config.reranker_max_parallel) == ("qwen2.5:7b", 8)
    assert config.reranker_timeout_s == Config().reranker_timeout_s
    assert config.llm_model_name == config.llm_small_model_name == Config().llm_model_name


def test_only_the_upper_case_name_is_read(monkeypatch):
    monkeypatch.delenv("GRAPH_BACKEND", raising=False)
    monkeypatch.setenv("graph_backend", "neo4j")
    assert Config.from_env().graph_backend == "falkordb"


def test_several_bad_settings_make_one_line_naming_each(monkeypatch):
    monkeypatch.setenv("RERANKER_STRATEGY", "bubble")
    monkeypatch.setenv("PORT", "-5")
    monkeypatch.setenv("ACCESS_LOG", "yes")
    with pytest.raises(ValueError) as error:
        Config.from_env()
    assert str(error.value) == ("Unknown RERANKER_STRATEGY='bubble'; allowed: ('pointwise', 'listwise', "
                                "'sliding_window', 'pairwise', 'tournament', 'mmr') (also wrong: PORT, ACCESS_LOG)")


def _unset(monkeypatch, name: str) -> None:
    """Unset for this test, and unset again after it, whatever the test's `.env` put there meanwhile."""
    monkeypatch.setenv(name, "placeholder")
    monkeypatch.delenv(name)


def test_env_file_is_read_into_the_environment_below_what_is_set(monkeypatch, tmp_path: Path):
    env_file = tmp_path / "settings.env"
    env_file.write_text("RERANKER_MODEL=from-the-file\nRERANKER_CANDIDATES=5\nLOG_LEVEL=debug\n")
    monkeypatch.setenv("DOTENV_PATH", str(env_file))
    for name in ("RERANKER_MODEL", "RERANKER_CANDIDATES"):
        _unset(monkeypatch, name)
    monkeypatch.setenv("LOG_LEVEL", "warning")
    config = Config.from_env()
    assert (config.reranker_model, config.reranker_candidates, config.log_level) == ("from-the-file", 5, "WARNING")
    assert os.environ["RERANKER_MODEL"] == "from-the-file"  # the processes the app starts see it too


def test_a_bad_value_in_the_env_file_names_the_setting(monkeypatch, tmp_path: Path):
    env_file = tmp_path / "settings.env"
    env_file.write_text("RERANKER_CANDIDATES=lots\n")
    monkeypatch.setenv("DOTENV_PATH", str(env_file))
    _unset(monkeypatch, "RERANKER_CANDIDATES")
    with pytest.raises(ValueError, match=r"^RERANKER_CANDIDATES must be an integer, got 'lots'$"):
        Config.from_env()


# -- One default per setting: .env.example, docker-compose.yml and Config agree -----------------------

REPO = Path(__file__).resolve().parents[2]


def _env_example() -> dict[str, str]:
    return {name: value for name, value in dotenv_values(REPO / ".env.example").items() if value is not None}


def _clean_environment(monkeypatch) -> None:
    for name in list(os.environ):
        monkeypatch.delenv(name)
    monkeypatch.setenv("DOTENV_PATH", os.devnull)


def test_every_value_in_env_example_is_the_default(monkeypatch):
    """Copying .env.example to .env changes nothing: each value it shows is the one the code uses unset."""
    _clean_environment(monkeypatch)
    defaults = Config.from_env()
    shown = _env_example()
    assert len(shown) >= 60
    for name, value in shown.items():
        monkeypatch.setenv(name, value)
    assert Config.from_env() == defaults


def test_compose_defaults_are_the_settings_defaults(monkeypatch):
    """Where docker-compose.yml falls back on a default (`${NAME:-default}`) for one of the app's settings,
    it is the app's own default and the one .env.example shows."""
    _clean_environment(monkeypatch)
    defaults = Config.from_env()
    compose = (REPO / "docker-compose.yml").read_text(encoding="utf-8")
    shown = _env_example()
    checked = set()
    for name, default in re.findall(r"\$\{(\w+):-([^}]*)\}", compose):
        if name not in shown:
            continue  # not one of the app's settings (OLLAMA_NUM_PARALLEL is Ollama's own)
        assert default == shown[name], name
        monkeypatch.setenv(name, default)
        assert Config.from_env() == defaults, name
        monkeypatch.delenv(name)
        checked.add(name)
    assert {"NEO4J_PASSWORD", "NEO4J_DATABASE"} <= checked


# -- What serving needs beyond each setting ----------------------------------------------------------


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.53", "::1", "[::1]", "localhost", "LOCALHOST"])
def test_serving_on_loopback_needs_no_token(monkeypatch, host):
    monkeypatch.setenv("HOST", host)
    Config.from_env().check_serving()


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "backend.internal", "fe80::1"])
def test_serving_beyond_loopback_needs_api_token(monkeypatch, host):
    monkeypatch.setenv("HOST", host)
    config = Config.from_env()  # reading the settings is fine: the CLI tools and the health check do
    with pytest.raises(ValueError) as error:
        config.check_serving()
    assert str(error.value) == (f"API_TOKEN is required: HOST={host} listens beyond this machine "
                                "(set API_TOKEN, or HOST=127.0.0.1)")
    monkeypatch.setenv("API_TOKEN", "tok-7f3a")
    Config.from_env().check_serving()


def test_more_than_one_worker_needs_a_database_server(monkeypatch):
    monkeypatch.setenv("API_WORKERS", "3")
    with pytest.raises(ValueError, match=r"API_WORKERS=3 needs a database server \(FALKORDB_URL\): the embedded "
                                         r"FalkorDB the app starts itself serves one process"):
        Config.from_env().check_serving()
    monkeypatch.setenv("FALKORDB_URL", "redis://falkordb.internal:6379")
    Config.from_env().check_serving()
    monkeypatch.setenv("GRAPH_BACKEND", "neo4j")
    with pytest.raises(ValueError, match=r"\(NEO4J_URI\): the local Neo4j"):
        Config.from_env().check_serving()
    monkeypatch.setenv("NEO4J_URI", "bolt://neo4j.internal:7687")
    Config.from_env().check_serving()
    assert Config.from_env().api_workers == 3
