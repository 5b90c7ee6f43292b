"""Health that tells the truth: GET /health/live answers whenever the process does, asking nothing;
GET /health/ready answers 200 only when the graph database answers now and the reranker can judge,
else 503 in the API's one error shape naming why (`graph_unavailable` or `reranker_not_ready`), with
Retry-After. Both are open without API_TOKEN, as /health is.

Real parts: replicas as production runs them (the image's gunicorn command, `flask serve`) on a
FalkorDB reached by FALKORDB_URL that is killed and started again (tests/support/falkordb_server.py)
and on the session's local Neo4j stopped and started again; the scripted model server over HTTP. The
readiness tests of the model's warm-up are in tests/test_reranker_warmup.py.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
import urllib.error

import pytest

from app.graph import runtime as graph_runtime
from app.graph.server_process import die_with_parent, free_port
from tests.conftest import unique_graph_id
from tests.support.app_process import BACKEND_DIR, AppProcess, call
from tests.support.facts import WATER_FACTS
from tests.support.falkordb_server import FalkorDBServer
from tests.support.graph_backends import neo4j_env
from tests.support.scripted_llm import ScriptedLLMServer, always, hang, server_error

logger = logging.getLogger(__name__)

TOKEN = "health-token-5ecret"


class WsgiReplica:
    """The image's command, gunicorn with app/cli/gunicorn_conf.py, on a free port with its own DATA_DIR;
    its worker runs the start step first, so it takes requests only once its database answered."""

    def __init__(self, tmp_path, **env: str) -> None:
        self.port = free_port()
        self.log_path = tmp_path / "replica.log"
        self.env = {**os.environ, "DOTENV_PATH": os.devnull, "DATA_DIR": str(tmp_path / "replica-data"),
                    "HOST": "127.0.0.1", "PORT": str(self.port), "API_THREADS": "8",
                    "EMBEDDING_PROVIDER": "local", "RERANKER_PROVIDER": "none", "LOG_LEVEL": "INFO",
                    "GRAPHITI_TELEMETRY_ENABLED": "false", **env}
        self.process: subprocess.Popen | None = None

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def __enter__(self) -> "WsgiReplica":
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "gunicorn", "--config", "python:app.cli.gunicorn_conf", "app.wsgi:app"],
                cwd=BACKEND_DIR, env=self.env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log_path.read_text()[-3000:]
            try:
                if call(self.url("/health/live"), timeout=2)[0] == 200:
                    return self
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.2)
        self.__exit__()
        raise AssertionError(f"the replica did not answer: {self.log_path.read_text()[-3000:]}")

    def __exit__(self, *exc_info: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


def ready_after(url, seconds: float, status: int) -> tuple[float, dict]:
    """Poll readiness until it answers `status`: (seconds it took, the body)."""
    started = time.monotonic()
    while True:
        answer, body = call(url("/health/ready"), timeout=10)
        if answer == status:
            return time.monotonic() - started, body
        assert time.monotonic() - started < seconds, (answer, body)
        time.sleep(0.1)


def assert_database_not_ready(url, says: str) -> None:
    status, body = call(url("/health/ready"), timeout=10)
    assert status == 503, body
    assert body["status"] == "not_ready" and says in body["database"], body
    assert body["error"]["code"] == "graph_unavailable" and body["error"]["message"] == body["database"]
    assert call(url("/health/live"))[0] == 200  # the process still answers: nothing to restart


# --- in-process --------------------------------------------------------------------------------

@pytest.fixture
def forget_failed_starts():
    yield
    graph_runtime._failed_starts.forget()
    graph_runtime.reset_graphiti()


def test_liveness_asks_nothing_readiness_names_the_database_and_neither_needs_the_token(backend,
                                                                                     forget_failed_starts):
    dead = free_port()
    _, client = backend(FALKORDB_URL=f"redis://127.0.0.1:{dead}", API_TOKEN=TOKEN)
    live = client.get("/health/live")
    assert live.status_code == 200 and live.get_json() == {"status": "alive"}

    ready = client.get("/health/ready")
    body = ready.get_json()
    assert ready.status_code == 503 and ready.headers["Retry-After"] == "5", body
    says = f"FalkorDB at 127.0.0.1:{dead} does not answer"
    assert body["error"]["code"] == "graph_unavailable" and says in body["error"]["message"]
    assert body["status"] == "not_ready" and body["database"] == body["error"]["message"]
    assert body["reranker"] == "unknown"
    assert client.get("/api/graph").status_code == 401  # the token guards everything else
    assert client.get("/health").status_code == 503  # and /health, as before, asks the database too


def test_readiness_is_503_while_the_breaker_skips_the_model_and_200_after_its_cooldown(backend, water_graph):
    cooldown_s = 4.0
    with ScriptedLLMServer(always(server_error())) as server:
        _, client = backend(RERANKER_PROVIDER="ollama", RERANKER_BASE_URL=server.base_url, RERANKER_MODEL="judge-model",
                            RERANKER_SCORE_MODE="logprobs", RERANKER_TIMEOUT_S=2, RERANKER_BREAKER_THRESHOLD=1,
                            RERANKER_BREAKER_COOLDOWN_S=cooldown_s, RERANKER_CACHE_SIZE=0)
        ready = client.get("/health/ready")  # no warm-up (the tests' default): nothing to wait for yet
        assert ready.status_code == 200 and ready.get_json()["reranker"] == "ready", ready.get_json()

        search = client.post(f"/api/graph/{water_graph}/search", json={"query": "water utility", "limit": 3})
        assert search.get_json()["reranked"] is False and search.get_json()["rerank_fallback"]
        opened = time.monotonic()
        ready = client.get("/health/ready")
        body = ready.get_json()
        assert ready.status_code == 503, body
        assert body["error"]["code"] == "reranker_not_ready" and body["database"] == "ready"
        assert body["reranker"].startswith("the reranker's circuit breaker is open: pointwise with model "
                                           "'judge-model' failed 1 call in a row and is skipped for")

        while client.get("/health/ready").status_code != 200:
            assert time.monotonic() - opened < cooldown_s + 10
            time.sleep(0.1)
        assert time.monotonic() - opened >= cooldown_s - 0.5  # not before the cooldown was over


def test_without_a_reranker_readiness_is_the_database_alone(backend):
    _, client = backend()
    ready = client.get("/health/ready")
    assert ready.status_code == 200
    assert ready.get_json() == {"status": "ready", "database": "ready", "reranker": "none", "queue": "ready"}


def test_readiness_says_when_a_broker_apart_from_the_database_does_not_answer(backend, tmp_path):
    broker = FalkorDBServer(tmp_path / "broker").start()
    try:
        _, client = backend(QUEUE_URL=broker.url())
        assert client.get("/health/ready").get_json()["queue"] == "ready"
        broker.kill()
        refused = client.get("/health/ready")
        body = refused.get_json()
        assert refused.status_code == 503 and body["error"]["code"] == "queue_unavailable"
        assert body["database"] == "ready" and body["queue"].startswith("the task broker does not answer")
        broker.start()
        assert client.get("/health/ready").status_code == 200
    finally:
        broker.kill()


# --- replicas: the database stops and comes back -----------------------------------------------

def test_a_wsgi_replica_on_falkordb_is_ready_again_soon_after_its_database_comes_back(tmp_path):
    database = FalkorDBServer(tmp_path / "falkordb", password="falkor-5ecret").start()
    try:
        with WsgiReplica(tmp_path, GRAPH_BACKEND="falkordb", FALKORDB_URL=database.url()) as replica:
            ready_after(replica.url, 30, 200)
            database.kill()
            ready_after(replica.url, 30, 503)
            assert_database_not_ready(replica.url, f"FalkorDB at 127.0.0.1:{database.port} does not answer")
            database.start()  # answers PING again when this returns
            recovered, body = ready_after(replica.url, 60, 200)
            logger.info("readiness back %.2fs after FalkorDB answered again", recovered)
            assert body == {"status": "ready", "database": "ready", "reranker": "none", "queue": "ready"}
            assert recovered < 15
            graph_id = unique_graph_id("back")
            assert call(replica.url("/api/graph"), "POST", {"graph_id": graph_id})[0] == 201
    finally:
        database.kill()


def test_a_replica_on_neo4j_is_ready_again_soon_after_its_database_comes_back(neo4j_server, tmp_path):
    with AppProcess(tmp_path / "data", tmp_path / "app.log", **neo4j_env(neo4j_server)) as replica:
        ready_after(replica.url, 30, 200)
        neo4j_server.stop()
        try:
            ready_after(replica.url, 30, 503)
            assert_database_not_ready(replica.url, f"Neo4j at 127.0.0.1:{neo4j_server.port} does not answer")
        finally:
            neo4j_server.start()  # same data and port; answers Bolt when this returns
        recovered, body = ready_after(replica.url, 60, 200)
        logger.info("readiness back %.2fs after Neo4j answered again", recovered)
        assert body == {"status": "ready", "database": "ready", "reranker": "none", "queue": "ready"}
        assert recovered < 15
        assert call(replica.url("/api/graph"), "POST", {"graph_id": unique_graph_id("back")})[0] == 201


# --- a replica whose model server hangs -----------------------------------------------------------

def test_a_replica_started_against_a_hanging_model_server_keeps_searches_within_the_timeout(tmp_path):
    """Before, this start's first search waited out the 120 s warm-up (115.7 s measured)."""
    timeout_s = 3.0
    with ScriptedLLMServer(always(hang())) as model_server, WsgiReplica(
            tmp_path, RERANKER_PROVIDER="ollama", RERANKER_BASE_URL=model_server.base_url,
            RERANKER_MODEL="judge-model", RERANKER_SCORE_MODE="logprobs", RERANKER_TIMEOUT_S=str(timeout_s),
            RERANKER_WARMUP_TIMEOUT_S="120") as replica:
        status, body = call(replica.url("/health/ready"))
        assert status == 503 and body["error"]["code"] == "reranker_not_ready", body
        assert body["database"] == "ready" and "'judge-model' is loading" in body["reranker"]

        graph_id = unique_graph_id("hang")
        assert call(replica.url("/api/graph"), "POST", {"graph_id": graph_id})[0] == 201
        assert call(replica.url(f"/api/graph/{graph_id}/facts"), "POST", {"facts": WATER_FACTS})[0] == 201
        started = time.monotonic()
        status, found = call(replica.url(f"/api/graph/{graph_id}/search"), "POST",
                             {"query": "harbor water utility", "limit": 4}, timeout=120)
        elapsed = time.monotonic() - started
        logger.info("first search during a hanging warm-up: %.2fs (RERANKER_TIMEOUT_S=%gs)", elapsed, timeout_s)

        assert status == 200, found
        assert found["reranked"] is False and found["rerank_fallback"].startswith("ModelNotReady: the model is still "
                                                                                  "loading"), found
        assert elapsed < timeout_s + 10
        assert model_server.count == 1  # the warm-up alone: the search sent the loading model nothing
        assert call(replica.url("/health/ready"))[0] == 503  # still loading: traffic stays away
