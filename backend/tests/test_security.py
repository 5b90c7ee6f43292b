"""Security: loopback by default, the bearer token on every endpoint but /health, request size limits,
no secret in logs, error bodies or /health, and uploads never written anywhere."""

from __future__ import annotations

import http.client
import io
import json
import logging
import re
import uuid
from pathlib import Path

import pytest

from app.config import Config
from app.graph.server_process import listening_addresses
from tests.conftest import unique_graph_id
from tests.support.app_process import BACKEND_DIR, AppProcess, call
from tests.support.facts import WATER_FACTS
from tests.support.scripted_llm import ScriptedLLMServer, error, judge, unused_base_url

TOKEN = "tok-SECRET-9b3c77e1"
SECRETS = {
    "RERANKER_API_KEY": "sk-rerank-SECRET-5a1f03",
    "LLM_API_KEY": "sk-llm-SECRET-77c2a9",
    "EMBEDDING_API_KEY": "sk-emb-SECRET-0d9e44",
    "NEO4J_PASSWORD": "pw-SECRET-4e21bb",
    "API_TOKEN": TOKEN,
}
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _path_for(rule) -> str:
    """The rule's path with every <argument> filled in, e.g. /api/graph/x1/nodes/x1."""
    return re.sub(r"<(?:[^:>]+:)?[^>]+>", "x1", rule.rule)


def test_config_binds_loopback_by_default(monkeypatch):
    monkeypatch.delenv("HOST", raising=False)
    assert Config.from_env().host == "127.0.0.1" == Config().host
    from app.local_llm.server import HOST as local_llm_host

    assert local_llm_host == "127.0.0.1"


def test_served_app_listens_on_loopback_only_and_enforces_token_and_size(tmp_path):
    env = {"API_TOKEN": TOKEN, "MAX_REQUEST_BYTES": "65536"}
    with AppProcess(tmp_path / "data", tmp_path / "app.log", **env) as app:
        assert listening_addresses(app.process.pid) == {("127.0.0.1", app.port)}
        assert {ip for ip, _ in listening_addresses(app.falkordb_pid())} == {"127.0.0.1"}

        assert call(app.url("/health"))[0] == 200
        status, body = call(app.url("/api/graph"))
        assert status == 401 and body["error"]["code"] == "unauthorized"
        assert call(app.url("/api/graph"), headers=AUTH)[0] == 200

        # A chunked body has no Content-Length to refuse up front; the limit still holds.
        connection = http.client.HTTPConnection("127.0.0.1", app.port, timeout=120)  # generous under load
        chunks = (b'{"graph_id": "' + b"x" * 8192 for _ in range(16))
        connection.request("POST", "/api/graph", body=chunks, encode_chunked=True,
                           headers={**AUTH, "Content-Type": "application/json"})
        response = connection.getresponse()
        assert response.status == 413
        assert "larger than 65536 bytes" in json.loads(response.read())["error"]["message"]
        connection.close()
        # A chunked body within the limit is read whole (the server hands it over as a stream).
        connection = http.client.HTTPConnection("127.0.0.1", app.port, timeout=120)
        chunks = (part.encode() for part in ('{"graph_id": ', '"chunked_ok", ', '"name": "' + "n" * 150 + '"}'))
        connection.request("POST", "/api/graph", body=chunks, encode_chunked=True,
                           headers={**AUTH, "Content-Type": "application/json"})
        response = connection.getresponse()
        assert response.status == 201, response.read()
        connection.close()
    assert TOKEN not in app.log_tail(1000)


def test_token_is_required_on_every_endpoint_except_health(backend):
    app, client = backend(API_TOKEN=TOKEN)
    checked = 0
    for rule in app.url_map.iter_rules():
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            path = _path_for(rule)
            if rule.rule in ("/health", "/health/live", "/health/ready"):  # the health checks: open
                assert client.open(path, method=method).status_code == 200
                continue
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN},
                            {"Authorization": f"bearer {TOKEN}"}, {"Authorization": f"Bearer {TOKEN} "},
                            {"Authorization": f"Basic {TOKEN}"}):
                response = client.open(path, method=method, headers=headers, json={})
                assert response.status_code == 401, (method, path, headers)
                assert response.get_json()["error"]["code"] == "unauthorized"
                assert TOKEN not in response.get_data(as_text=True)
            response = client.open(path, method=method, headers=AUTH, json={})
            assert response.status_code != 401, (method, path)
            checked += 1
    assert checked >= 14  # every API route was visited, report and rerank included
    for sneaky in ("/health/", "//health", "/HEALTH", "/health/../api/graph", "/api/../health", "/health/ready/",
                   "/HEALTH/live"):
        assert client.get(sneaky).status_code in (401, 404)
        if client.get(sneaky).status_code != 401:
            assert client.get(sneaky, headers=AUTH).status_code == 404  # it was not a real route either


@pytest.mark.parametrize("make_request", [
    lambda c, gid: c.post("/api/graph", json={"name": "x" * 70_000}),
    lambda c, gid: c.post(f"/api/graph/{gid}/facts", json={"facts": [WATER_FACTS[0]] * 400}),
    lambda c, gid: c.post(f"/api/graph/{gid}/facts", content_type="multipart/form-data",
                          data={"file": (io.BytesIO(b"{}\n" * 30_000), "big.jsonl")}),
    lambda c, gid: c.post("/api/rerank", json={"query": "q", "documents": ["d" * 1000] * 80}),
])
def test_bodies_over_the_limit_are_refused_with_413(backend, make_request):
    _, client = backend(MAX_REQUEST_BYTES=65536, RERANKER_PROVIDER="ollama", RERANKER_BASE_URL=_NO_MODEL_SERVER)
    gid = unique_graph_id("size")
    client.post("/api/graph", json={"graph_id": gid})
    response = make_request(client, gid)
    assert response.status_code == 413
    assert response.get_json()["error"]["message"] == "request body is larger than 65536 bytes"
    assert client.get(f"/api/graph/{gid}/stats").get_json()["edges"] == 0


_NO_MODEL_SERVER = unused_base_url()  # a refused body must never reach the model


def _echoing_server() -> ScriptedLLMServer:
    """A server that puts the caller's key into its error messages, as real APIs do on a 401."""

    def respond(request):
        key = request.headers.get("authorization", "")
        if request.judge_fields is not None and request.index % 2:
            return judge(lambda q, p: error(500, f"upstream failure for {key}"))(request)
        return error(401, f"Incorrect API key provided: {key}")

    return ScriptedLLMServer(respond)


def test_secrets_never_reach_logs_error_bodies_or_health(backend, caplog):
    with _echoing_server() as server:
        app, client = backend(RERANKER_PROVIDER="ollama", RERANKER_BASE_URL=server.base_url,
                              LLM_BASE_URL=server.base_url, RERANKER_TIMEOUT_S=2, RERANKER_DEADLINE_S=4,
                              RERANKER_BREAKER_THRESHOLD=2, LLM_TIMEOUT_S=2, **SECRETS)
        gid = unique_graph_id("sec")
        bodies = []
        with caplog.at_level(logging.DEBUG):
            for method, path, body in [
                ("POST", "/api/graph", {"graph_id": gid}),
                ("POST", f"/api/graph/{gid}/facts", {"facts": WATER_FACTS}),
                *[("POST", f"/api/graph/{gid}/search", {"query": q}) for q in ("water", "bakery", "ferry")],
                ("POST", "/api/rerank", {"query": "water", "documents": ["a", "b"]}),
                ("POST", f"/api/report/{gid}/tools/insight_forge", {"question": "who runs the water utility?"}),
                ("POST", f"/api/report/{gid}/tools/interview_entities", {"topic": "water", "questions": ["why?"]}),
                ("GET", "/api/graph", None),
                ("GET", "/health", None),
            ]:
                response = client.open(path, method=method, json=body, headers=AUTH)
                assert response.status_code < 500 or response.get_json()["error"], path
                bodies.append(response.get_data(as_text=True))
            bodies.append(client.get("/api/graph", headers={"Authorization": "Bearer nope"}).get_data(as_text=True))
        assert server.count > 0 and any(SECRETS["RERANKER_API_KEY"] in h.get("authorization", "")
                                        for h in server.request_headers)  # the key really was sent
    health = json.loads(bodies[-2])
    assert health["reranker"]["stats"]["errors"]  # the faults happened and were counted
    logged = caplog.text + "\n".join(str(record.__dict__) for record in caplog.records)
    for name, secret in SECRETS.items():
        assert secret not in logged, f"{name} in the log"
        for body in bodies:
            assert secret not in body, f"{name} in a response body"


def test_uploads_are_never_written_to_disk(client, tmp_path):
    gid = unique_graph_id("upl")
    client.post("/api/graph", json={"graph_id": gid})
    marker = f"evil-{uuid.uuid4().hex[:12]}"
    lines = "\n".join(json.dumps(fact) for fact in WATER_FACTS[:2]).encode()
    data_dir = Path(client.application.config["APP_CONFIG"].data_dir)
    names = [f"../../../../{marker}.jsonl", f"/tmp/{marker}.jsonl", f"..\\..\\{marker}.jsonl",
             f"{data_dir}/../{marker}.jsonl"]
    answers = []
    for name in names:
        response = client.post(f"/api/graph/{gid}/facts", content_type="multipart/form-data",
                               data={"file": (io.BytesIO(lines), name)})
        assert response.status_code == 201
        answers.append(response.get_json())
    # Where a name like these could land if it were ever used as a path.
    bases = [Path.cwd(), BACKEND_DIR, data_dir, data_dir / "uploads", data_dir / "falkordb"]
    candidates = {(base / name.replace("\\", "/")).resolve() for base in bases for name in names}
    assert [path for path in candidates if path.exists()] == []
    found = [*Path("/tmp").glob(f"*{marker}*"), *BACKEND_DIR.parent.glob(f"*{marker}*"),
             *data_dir.parent.rglob(f"*{marker}*")]
    assert found == []
    # Every upload was read from memory: the first stored both facts, the others found them there.
    assert client.get(f"/api/graph/{gid}/stats").get_json()["edges"] == 2
    assert [answer["skipped_duplicates"] for answer in answers] == [0] + [2] * (len(names) - 1)


# -- CORS: browsers on the listed origins only, the token still required ---------------------------

ALLOWED_ORIGIN = "https://app.example.com"
PREFLIGHT = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization, content-type"}


def test_cors_is_off_by_default(backend):
    _, client = backend()
    response = client.get("/api/graph", headers={"Origin": ALLOWED_ORIGIN})
    assert response.status_code == 200 and "Access-Control-Allow-Origin" not in response.headers
    preflight = client.options("/api/graph", headers={"Origin": ALLOWED_ORIGIN, **PREFLIGHT})
    assert "Access-Control-Allow-Origin" not in preflight.headers


def test_cors_lets_listed_origins_call_with_the_token_and_no_other(backend):
    _, client = backend(API_TOKEN=TOKEN, CORS_ORIGINS=f"{ALLOWED_ORIGIN}/, http://localhost:3000")
    # The preflight carries no token (browsers never send one on it) and is answered anyway.
    preflight = client.options("/api/graph", headers={"Origin": ALLOWED_ORIGIN, **PREFLIGHT})
    assert preflight.status_code == 200, preflight.get_data(as_text=True)
    assert preflight.headers["Access-Control-Allow-Origin"] == ALLOWED_ORIGIN
    assert {"GET", "POST"} <= {m.strip() for m in preflight.headers["Access-Control-Allow-Methods"].split(",")}
    assert preflight.headers["Access-Control-Allow-Headers"] == "authorization, content-type"
    assert "Origin" in preflight.headers["Vary"]
    assert TOKEN not in preflight.get_data(as_text=True)

    # The request itself still needs the token; the 401 is readable by the page (it names the origin).
    refused = client.get("/api/graph", headers={"Origin": ALLOWED_ORIGIN})
    assert refused.status_code == 401 and refused.headers["Access-Control-Allow-Origin"] == ALLOWED_ORIGIN
    answered = client.get("/api/graph", headers={"Origin": "http://localhost:3000", **AUTH})
    assert answered.status_code == 200
    assert answered.headers["Access-Control-Allow-Origin"] == "http://localhost:3000"
    assert "Retry-After" in answered.headers["Access-Control-Expose-Headers"]

    # Any other origin, or an allowed one on another scheme or port, gets no CORS header at all.
    for other in ("https://evil.example.com", "http://app.example.com", "https://app.example.com:8443",
                  "null", "https://app.example.com.evil.net"):
        preflight = client.options("/api/graph", headers={"Origin": other, **PREFLIGHT})
        response = client.get("/api/graph", headers={"Origin": other, **AUTH})
        assert response.status_code == 200  # the server answers; the browser keeps it from the page
        for answer in (preflight, response):
            cors_headers = [name for name in answer.headers.keys() if name.startswith("Access-Control-")]
            assert cors_headers == [], (other, cors_headers)

    # A preflight is not a way around the token: only OPTIONS passes, and it reads nothing.
    assert client.open("/api/graph", method="GET", headers={"Origin": ALLOWED_ORIGIN, **PREFLIGHT}).status_code == 401
    assert client.post("/api/graph", json={"graph_id": unique_graph_id("cors")},
                       headers={"Origin": ALLOWED_ORIGIN, **PREFLIGHT}).status_code == 401


@pytest.mark.parametrize("value", ["*", "app.example.com", "https://app.example.com/path", "ftp://files.example.com"])
def test_cors_origins_must_be_web_origins(monkeypatch, value):
    monkeypatch.setenv("CORS_ORIGINS", f"https://ok.example.com,{value}")
    with pytest.raises(ValueError, match=r"CORS_ORIGINS: .* is not a web origin such as https://app.example.com"):
        Config.from_env()
