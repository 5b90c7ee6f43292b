"""Every request's id and its access line, on the real app (Flask's client).

The id: the client's X-Request-ID when it is a short token of safe characters, else a new uuid4 hex;
in the answer's header, in every error body, and in every log line written while the request is
handled, also on the graph loop and in the background work it starts ("-" outside a request). The
access line: one INFO line per request on `app.access`, without the query string or any header.
"""

from __future__ import annotations

import io
import logging
import os
import re
import subprocess
import sys

import pytest

from app import LOG_FORMAT
from app.graph.loop import run_on_loop
from app.request_id import (
    HEADER, MAX_LENGTH, NO_REQUEST, RequestIdFilter, accepted_request_id, bound_request_id, current_request_id,
)
from tests.support.app_process import BACKEND_DIR

NEW_ID = re.compile(r"[0-9a-f]{32}")
TOKEN = "tok-SECRET-request-log-41c9"


@pytest.fixture
def log_lines():
    """The lines root logging writes from now on, formatted as configure_logging formats them."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    handler.addFilter(RequestIdFilter())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield lambda: stream.getvalue().splitlines()
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def access_records(caplog, request_id: str) -> list[logging.LogRecord]:
    return [record for record in caplog.records
            if record.name == "app.access" and f"request_id={request_id} " in record.getMessage()]


def test_an_answer_without_a_client_id_gets_a_new_one_each_time(client):
    first, second = client.get("/no/such/path"), client.delete("/health")
    assert NEW_ID.fullmatch(first.headers[HEADER]) and NEW_ID.fullmatch(second.headers[HEADER])
    assert first.headers[HEADER] != second.headers[HEADER]
    assert first.get_json()["error"]["request_id"] == first.headers[HEADER]
    assert current_request_id() is None  # the test's own context is left as it was


@pytest.mark.parametrize("supplied", ["abc-123", "58303e1a-d378-420f-8b49-ae47ab26f8dc", "01HZX3V4K9M2Q8:trace.7/span+1==",
                                      "a" * MAX_LENGTH])
def test_a_safe_client_id_is_kept(client, supplied):
    response = client.get("/no/such/path", headers={HEADER: supplied})
    assert response.headers[HEADER] == supplied
    assert response.get_json()["error"]["request_id"] == supplied


@pytest.mark.parametrize("supplied", ["a" * (MAX_LENGTH + 1), "has space", 'quote"d', "semi;colon", "naïve",
                                      "<script>"])
def test_an_unsafe_client_id_is_replaced(client, supplied):
    response = client.get("/no/such/path", headers={HEADER: supplied})
    assert NEW_ID.fullmatch(response.headers[HEADER])
    assert response.get_json()["error"]["request_id"] == response.headers[HEADER]


def test_ids_a_header_cannot_carry_are_replaced_too():
    # Werkzeug's client refuses to send these; a raw socket could.
    for supplied in ("line\nbreak", "tab\there", "", None, "nul\x00"):
        assert NEW_ID.fullmatch(accepted_request_id(supplied))


def test_every_kind_of_error_body_names_the_request(backend):
    app, client = backend(API_TOKEN=TOKEN)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    answers = {
        "401 refused by the token check": client.get("/api/graph", headers={HEADER: "err-401"}),
        "404 no route": client.get("/no/such", headers={**auth, HEADER: "err-404"}),
        "405 wrong method": client.put("/health", headers={**auth, HEADER: "err-405"}),
        "400 bad input": client.post("/api/graph", data="{not json", content_type="application/json",
                                     headers={**auth, HEADER: "err-400"}),
        "404 unknown task": client.get("/api/tasks/t_nope", headers={**auth, HEADER: "err-task"}),
        "503 reranking off": client.post("/api/rerank", json={"query": "q", "documents": ["a"]},
                                         headers={**auth, HEADER: "err-503"}),
    }
    expected = {"401 refused by the token check": (401, "err-401"), "404 no route": (404, "err-404"),
                "405 wrong method": (405, "err-405"), "400 bad input": (400, "err-400"),
                "404 unknown task": (404, "err-task"), "503 reranking off": (503, "err-503")}
    assert {name: (response.status_code, response.get_json()["error"]["request_id"])
            for name, response in answers.items()} == expected
    assert all(response.headers[HEADER] == expected[name][1] for name, response in answers.items())
    assert all({"code", "message"} <= set(response.get_json()["error"]) for response in answers.values())


def test_the_lines_written_for_a_request_name_it_and_the_others_show_a_dash(client, log_lines):
    logging.getLogger("app.test").info("before any request")
    client.get("/no/such/path", headers={HEADER: "req-lines-1"})
    logging.getLogger("app.test").info("after the request")
    lines = log_lines()
    assert [line for line in lines if "app.access" in line and "[req-lines-1]: " in line]
    assert [line for line in lines if line.endswith(f"[{NO_REQUEST}]: before any request")]
    assert [line for line in lines if line.endswith(f"[{NO_REQUEST}]: after the request")]


def test_work_on_the_graph_loop_runs_under_the_callers_request_id(log_lines):
    async def log_and_answer():
        logging.getLogger("app.test").warning("on the graph loop")
        return current_request_id()

    with bound_request_id("loop-req-7"):
        assert run_on_loop(log_and_answer(), timeout=30) == "loop-req-7"
    assert run_on_loop(log_and_answer(), timeout=30) is None
    on_loop = [line for line in log_lines() if line.endswith(": on the graph loop")]
    assert [line.split(" app.test ")[1] for line in on_loop] == [
        "[loop-req-7]: on the graph loop", f"[{NO_REQUEST}]: on the graph loop"]


def test_one_access_line_per_request_without_query_string_or_headers(backend, caplog):
    _, client = backend(API_TOKEN=TOKEN)
    with caplog.at_level(logging.INFO, logger="app.access"):
        response = client.get("/no/such/p%20q?api_key=sk-SECRET-in-query&x=1",
                              headers={"Authorization": f"Bearer {TOKEN}", HEADER: "acc-1"},
                              environ_base={"REMOTE_ADDR": "10.1.2.3"})
        refused = client.get("/api/graph?token=sk-SECRET-2", headers={HEADER: "acc-2"})
    assert response.status_code == 404 and refused.status_code == 401
    [line] = [record.getMessage() for record in access_records(caplog, "acc-1")]
    assert re.fullmatch(r"method=GET path=/no/such/p%20q status=404 duration_ms=\d+\.\d request_id=acc-1 "
                        r"remote_addr=10\.1\.2\.3", line), line
    [line] = [record.getMessage() for record in access_records(caplog, "acc-2")]
    assert line.startswith("method=GET path=/api/graph status=401 ")
    assert all(record.levelno == logging.INFO for record in caplog.records if record.name == "app.access")
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "SECRET" not in logged and "api_key" not in logged and "Bearer" not in logged


def test_a_path_cannot_forge_a_log_line(client, caplog):
    with caplog.at_level(logging.INFO, logger="app.access"):
        client.get("/a%0Ab%20status=200%22/" + "x" * 2000, headers={HEADER: "acc-forge"})
    [line] = [record.getMessage() for record in access_records(caplog, "acc-forge")]
    assert "\n" not in line and '"' not in line and " status=200" not in line.split(" status=404 ")[0]
    assert line.startswith("method=GET path=/a%0Ab%20status=200%22/xxx") and "... status=404 " in line
    assert len(line) < 700


def test_access_log_off_writes_no_access_line_but_keeps_the_id(backend, caplog):
    _, client = backend(ACCESS_LOG="off")
    with caplog.at_level(logging.INFO, logger="app.access"):
        response = client.get("/no/such/path", headers={HEADER: "acc-off"})
    assert response.headers[HEADER] == "acc-off"
    assert [record for record in caplog.records if record.name == "app.access"] == []


def test_configure_logging_gives_every_line_its_request_id():
    """The entry points' logging (serve, WSGI, CLI), in a fresh interpreter: "-" outside a request,
    the id inside one."""
    script = (
        "import logging\n"
        "from app import configure_logging\n"
        "from app.request_id import bound_request_id\n"
        "configure_logging('INFO')\n"
        "logging.getLogger('graphiti_core.x').warning('outside')\n"
        "with bound_request_id('cli-req-9'):\n"
        "    logging.getLogger('app.y').info('inside')\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=BACKEND_DIR, capture_output=True, text=True,
                            timeout=120, env={**os.environ, "DOTENV_PATH": os.devnull})
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.endswith(("outside", "inside"))]
    assert [line.split(" ", 2)[2] for line in lines] == [
        "WARNING graphiti_core.x [-]: outside", "INFO app.y [cli-req-9]: inside"]
