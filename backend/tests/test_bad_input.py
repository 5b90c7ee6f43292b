"""Bad input, endpoint by endpoint: each row gets a 4xx with {"error": {"code", "message"}} saying
what is wrong, and the stored data is the same afterwards (graphs, edges, entities compared).

Search and fact-import bodies have their own tables in test_graph_api.py; here are the other
endpoints, graph ids with path separators and Cypher/Redis metacharacters on every graph route,
uploads (invalid UTF-8, one broken JSONL line), values the database would reject or silently change,
and the FalkorDB crash triggers found while writing these tests (stopwords in IN-filters)."""

from __future__ import annotations

import io
import json
from urllib.parse import quote

import pytest

from tests.conftest import unique_graph_id
from tests.support.facts import WATER_FACTS
from tests.support.scripted_llm import unused_base_url

NESTED = "[" * 5000 + "]" * 5000
INJECTION_IDS = ["a'}) DETACH DELETE n //", "*", "\r\nFLUSHALL", "x;FLUSHALL", "a b", "..", "the", "IT",
                 "mirofish_registry", "x" * 65, "-leading-dash", "ü",
                 "x\n", "\nx", "x\uff11"]  # '$' matches before a final newline: ids must match in full
# Percent-encoded, so each reaches the router as one path segment (or matches no route at all).
ENCODED = {bad: quote(bad, safe="") for bad in INJECTION_IDS}


@pytest.fixture
def client(on_both_backends):
    """Every test here runs on both databases: the embedded FalkorDB and the real local Neo4j."""
    return on_both_backends[1]


@pytest.fixture(scope="module")
def stored(graph_backend):
    return {}


@pytest.fixture
def water(client, stored):
    if "gid" not in stored:
        gid = unique_graph_id("bad")
        assert client.post("/api/graph", json={"graph_id": gid}).status_code == 201
        assert client.post(f"/api/graph/{gid}/facts", json={"facts": WATER_FACTS}).status_code == 201
        stored["gid"] = gid
    return stored["gid"]


def snapshot(client, gid) -> tuple:
    graphs = sorted(g["graph_id"] for g in client.get("/api/graph").get_json()["graphs"])
    edges = client.get(f"/api/graph/{gid}/edges?limit=500").get_json()["items"]
    nodes = client.get(f"/api/graph/{gid}/nodes?limit=500").get_json()["items"]
    return graphs, sorted((e["uuid"], e["fact"], e["source"], e["target"]) for e in edges), \
        sorted((n["uuid"], n["name"], n["summary"]) for n in nodes)


def refused(response, status, fragment=""):
    assert response.status_code == status, (response.status_code, response.get_data(as_text=True)[:300])
    error = response.get_json()["error"]
    assert error["code"] and error["message"] and fragment in error["message"], error
    return error


@pytest.fixture
def unchanged(client, water):
    """Asserts after the test that nothing stored changed."""
    before = snapshot(client, water)
    yield
    assert snapshot(client, water) == before


def _fact(**changes):
    return {**{"source": "Nobody", "target": "Nowhere", "relation": "visits", "fact": "Nobody visits Nowhere"},
            **changes}


class _Upload:
    """A multipart upload; each use opens a fresh file, so one parameter row serves every database."""

    def __init__(self, data: bytes, filename: str, field: str):
        self.data, self.filename, self.field = data, filename, field

    def kwargs(self) -> dict:
        return {"data": {self.field: (io.BytesIO(self.data), self.filename)}, "content_type": "multipart/form-data"}


def _kwargs(request) -> dict:
    """client.post keyword arguments from a parameter row: a plain dict or an upload."""
    return request.kwargs() if isinstance(request, _Upload) else request


def _upload(data: bytes, filename="facts.jsonl", field="file"):
    return _Upload(data, filename, field)


ROUTES = {
    "delete": lambda c, gid: c.delete(f"/api/graph/{gid}"),
    "facts": lambda c, gid: c.post(f"/api/graph/{gid}/facts", json={"facts": [_fact()]}),
    "episodes": lambda c, gid: c.post(f"/api/graph/{gid}/episodes", json={"text": "hello"}),
    "search": lambda c, gid: c.post(f"/api/graph/{gid}/search", json={"query": "water"}),
    "nodes": lambda c, gid: c.get(f"/api/graph/{gid}/nodes"),
    "node": lambda c, gid: c.get(f"/api/graph/{gid}/nodes/some-node"),
    "edges": lambda c, gid: c.get(f"/api/graph/{gid}/edges"),
    "stats": lambda c, gid: c.get(f"/api/graph/{gid}/stats"),
    "report_tool": lambda c, gid: c.post(f"/api/report/{gid}/tools/search_graph", json={"query": "water"}),
    "report": lambda c, gid: c.post(f"/api/report/{gid}", json={"requirement": "a report"}),
}


@pytest.mark.parametrize("route", list(ROUTES))
def test_bad_and_unknown_graph_ids_on_every_graph_route(client, unchanged, route):
    for bad in INJECTION_IDS:
        response = ROUTES[route](client, ENCODED[bad])
        if "/" in bad:  # a path separator never becomes a graph id: no route matches
            assert refused(response, 404)["code"] == "not_found"
        else:
            refused(response, 400, "graph id")
    refused(ROUTES[route](client, unique_graph_id("missing")), 404, "does not exist")


@pytest.mark.parametrize("body, status, fragment", [
    ({"graph_id": 5}, 400, "graph id must be"),
    ({"graph_id": ""}, 400, "graph id must be"),
    ({"graph_id": "   "}, 400, "graph id must be"),
    ({"graph_id": "a'}) DETACH DELETE n //"}, 400, "graph id must be"),
    ({"graph_id": "\r\nFLUSHALL"}, 400, "graph id must be"),
    ({"graph_id": "the"}, 400, "reserved word"),  # would crash FalkorDB on the first search
    ({"graph_id": "mirofish_registry"}, 400, "reserved"),
    ({"graph_id": "x" * 65}, 400, "1-64 characters"),
    ({"graph_id": "ok\n"}, 400, "graph id must be"),
    ({"name": 5}, 400, "'name' must be a string"),
    ({"name": " \t"}, 400, "must not be empty"),
    ({"name": "x" * 201}, 413, "longer than 200"),
    ({"name": "a\x00b"}, 400, "NUL"),
    ([{"graph_id": "ok"}], 400, "must be an object"),
])
def test_bad_create_bodies(client, unchanged, body, status, fragment):
    refused(client.post("/api/graph", json=body), status, fragment)


def test_bad_create_encodings(client, unchanged):
    refused(client.post("/api/graph", data=NESTED, content_type="application/json"), 400, "nested deeper")
    refused(client.post("/api/graph", data=b"\xff\xfe{}", content_type="application/json"), 400, "not valid JSON")
    refused(client.post("/api/graph", data="graph_id=x", content_type="text/plain"), 415, "JSON body")
    # A form is not "no body": it must not create a graph with a generated id.
    refused(client.post("/api/graph", data={"graph_id": "x"}), 415, "JSON body")
    refused(client.post("/api/graph", data={"file": (io.BytesIO(b"{}"), "g.json")}), 415, "JSON body")
    refused(client.post("/api/graph", data="", content_type="application/x-www-form-urlencoded"), 415, "JSON body")


@pytest.mark.parametrize("fact, fragment", [
    (_fact(metadata={"k": float("nan")}), "finite"),
    (_fact(metadata={"k": float("inf")}), "finite"),
    (_fact(metadata={"k": 10**30}), "64 bits"),  # FalkorDB would store 9223372036854775807
    (_fact(metadata={"k": "a\x00b"}), "NUL"),
    (_fact(metadata={"k": {"nested": 1}}), "short string, number or boolean"),
    (_fact(metadata={"uuid": "x"}), "reserved"),
    (_fact(metadata={"Bad-Key": 1}), "lower_snake_case"),
    (_fact(metadata={f"k{i}": i for i in range(17)}), "at most 16 keys"),
    (_fact(source="x" * 257), "longer than 256"),
    (_fact(fact="x" * 4001), "longer than 4000"),
    (_fact(source_labels=["Person`) DETACH DELETE n //"]), "identifiers"),  # labels are spliced into Cypher
    (_fact(source_labels=["Person\n"]), "identifiers"),
    (_fact(metadata={"k\n": 1}), "lower_snake_case"),
    (_fact(target_labels=[f"L{i}" for i in range(9)]), "at most 8"),
    (_fact(valid_at=20240101), "ISO-8601"),
    (_fact(valid_at="2024-02-01T00:00:00Z", invalid_at="2024-01-01T00:00:00Z"), "before"),
])
def test_facts_the_database_would_reject_or_change(client, water, unchanged, fact, fragment):
    raw = json.dumps({"facts": [WATER_FACTS[0], fact]})  # NaN and Infinity travel as JSON extensions
    refused(client.post(f"/api/graph/{water}/facts", data=raw, content_type="application/json"), 422, fragment)


def test_bad_fact_lists(client, water, unchanged):
    refused(client.post(f"/api/graph/{water}/facts", json={"facts": {"a": 1}}), 400, "non-empty list")
    refused(client.post(f"/api/graph/{water}/facts", json={"facts": [_fact()] * 5001}), 413, "at most 5000")
    refused(client.post(f"/api/graph/{water}/facts", data=NESTED, content_type="application/json"), 400, "nested")


@pytest.mark.parametrize("upload, status, fragment", [
    (_upload(b'{"source": "A\xff"}\n'), 400, "not valid UTF-8"),
    (_upload((json.dumps(_fact()) + "\n" + json.dumps(_fact())[:-5] + "\n").encode()), 400, "line 2"),
    (_upload((json.dumps(_fact()) + "\n[1, 2]\n").encode()), 422, "line 2: must be a JSON object"),
    (_upload((json.dumps(_fact()) + "\n" + NESTED + "\n").encode()), 400, "line 2"),
    (_upload(b"", filename="empty.jsonl"), 400, "no facts"),
    (_upload(b"  \n\n", filename="blank.jsonl"), 400, "no facts"),
    (_upload(json.dumps(_fact()).encode(), filename="facts.exe"), 415, "must end with"),
    (_upload(json.dumps(_fact()).encode(), field="other"), 400, "'file' field"),
])
def test_bad_fact_uploads(client, water, unchanged, upload, status, fragment):
    refused(client.post(f"/api/graph/{water}/facts", **_kwargs(upload)), status, fragment)


@pytest.mark.parametrize("request_kwargs, status, fragment", [
    ({"json": {}}, 400, "'text' is required"),
    ({"json": {"text": 5}}, 400, "must be a string"),
    ({"json": {"text": " \n "}}, 400, "must not be empty"),
    ({"json": {"text": "x" * 200_001}}, 413, "longer than"),
    ({"json": {"text": "ok", "name": ["x"]}}, 400, "'name' must be a string"),
    ({"json": {"text": "a\x00b"}}, 400, "NUL"),
    ({"data": NESTED, "content_type": "application/json"}, 400, "nested"),
    (_upload(b"caf\xe9 au lait", filename="notes.txt"), 400, "not valid UTF-8"),
    (_upload(b"text", filename="notes.pdf"), 415, "must end with"),
    (_upload(b"   ", filename="notes.md"), 400, "empty"),
])
def test_bad_episode_requests_start_no_task(client, water, unchanged, request_kwargs, status, fragment):
    refused(client.post(f"/api/graph/{water}/episodes", **_kwargs(request_kwargs)), status, fragment)


@pytest.mark.parametrize("query, status, fragment", [
    ("offset=-1", 422, "'offset' must be between"),
    ("offset=10000000000", 422, "'offset' must be between"),
    ("limit=0", 422, "'limit' must be between"),
    ("limit=501", 422, "'limit' must be between"),
    ("limit=-5", 422, "'limit' must be between"),
    ("limit=abc", 400, "must be an integer"),
    ("limit=1.5", 400, "must be an integer"),
    ("limit=", 400, "must be an integer"),
    ("limit=%EF%BC%95", 400, "ASCII digits"),  # fullwidth 5: int() would take it
    ("limit=%D9%A5", 400, "ASCII digits"),  # Arabic-Indic 5
    ("limit=1_0", 400, "ASCII digits"),
    ("limit=%2B5", 400, "ASCII digits"),
    ("limit=%205", 400, "ASCII digits"),
    ("offset=99999999999999999999999999", 422, "'offset' must be between"),
])
@pytest.mark.parametrize("listing", ["nodes", "edges"])
def test_bad_paging(client, water, unchanged, listing, query, status, fragment):
    refused(client.get(f"/api/graph/{water}/{listing}?{query}"), status, fragment)


def test_bad_node_and_task_ids(client, water, unchanged):
    refused(client.get(f"/api/graph/{water}/nodes/{'x' * 65}"), 400, "too long")
    for bad in ("*", "x' OR 1=1 //", "%0D%0AFLUSHALL", "$uuid"):
        refused(client.get(f"/api/graph/{water}/nodes/{bad}"), 404, "not found")
    for bad in ("nope", "x'", "%0D%0AFLUSHALL", "t" * 5000):
        refused(client.get(f"/api/tasks/{bad}"), 404, "does not exist")
    refused(client.get("/api/tasks/..%2F..%2Fetc%2Fpasswd"), 404)


def test_metacharacters_in_valid_fields_are_stored_and_searched_verbatim(client):
    gid = unique_graph_id("meta")
    client.post("/api/graph", json={"graph_id": gid, "name": "x'}) DETACH DELETE n //"})
    tricky = ["a'}) DETACH DELETE n //", "\r\nFLUSHALL\r\n", 'quote " and back\\slash', "$graph_id", "*"]
    facts = [_fact(source=f"S{i} {text}", target="T", fact=f"fact {i}: {text}") for i, text in enumerate(tricky)]
    assert client.post(f"/api/graph/{gid}/facts", json={"facts": facts}).status_code == 201
    for text in tricky:
        body = client.post(f"/api/graph/{gid}/search", json={"query": text, "limit": 20}).get_json()
        assert body["error"] is None
    stored_facts = {e["fact"] for e in client.get(f"/api/graph/{gid}/edges").get_json()["items"]}
    assert stored_facts == {f["fact"] for f in facts}  # byte for byte, nothing more, nothing less
    names = {g["graph_id"]: g["name"] for g in client.get("/api/graph").get_json()["graphs"]}
    assert names[gid] == "x'}) DETACH DELETE n //"


def test_stopword_entity_names_do_not_crash_the_database(client):
    """FalkorDB 1.4.1 segfaulted on `n.name IN ["The"]`; the import looked entities up that way."""
    gid = unique_graph_id("stop")
    client.post("/api/graph", json={"graph_id": gid})
    facts = [_fact(source="The", target="it", fact="The is linked to it"), _fact(source="A", target="Is", fact="A is Is")]
    assert client.post(f"/api/graph/{gid}/facts", json={"facts": facts}).status_code == 201
    again = client.post(f"/api/graph/{gid}/facts", json={"facts": facts[:1]}).get_json()
    assert again["entities_created"] == 0  # found again by name
    assert client.get(f"/api/graph/{gid}/stats").get_json()["nodes"] == 4
    assert client.post(f"/api/graph/{gid}/search", json={"query": "the", "scope": "both"}).get_json()["error"] is None


LONE = "\ud800"  # a lone surrogate: JSON may carry it as an escape, UTF-8 cannot encode it
SURROGATES = [  # (path, body with a lone surrogate in one field, the field the 400 must name)
    ("/api/graph", {"name": f"a{LONE}"}, "'name'"),
    ("/api/graph", {"graph_id": f"g{LONE}"}, "'graph_id'"),
    ("/api/graph/{gid}/facts", {"facts": [_fact(), _fact(source=f"S{LONE}")]}, "'facts[1].source'"),
    ("/api/graph/{gid}/facts", {"facts": [_fact(fact=f"{LONE} fact")]}, "'facts[0].fact'"),
    ("/api/graph/{gid}/facts", {"facts": [_fact(relation="\udc00")]}, "'facts[0].relation'"),
    ("/api/graph/{gid}/facts", {"facts": [_fact(metadata={"k": LONE})]}, "'facts[0].metadata.k'"),
    ("/api/graph/{gid}/facts", {"facts": [_fact(metadata={f"k{LONE}": 1})]}, "a key of 'facts[0].metadata'"),
    ("/api/graph/{gid}/facts", {"facts": [_fact(source_labels=[LONE])]}, "'facts[0].source_labels[0]'"),
    ("/api/graph/{gid}/episodes", {"text": f"hello {LONE}"}, "'text'"),
    ("/api/graph/{gid}/episodes", {"text": "hello", "name": LONE}, "'name'"),
    ("/api/graph/{gid}/search", {"query": f"water{LONE}"}, "'query'"),
    ("/api/report/{gid}/tools/search_graph", {"query": f"water{LONE}"}, "'query'"),
    ("/api/report/{gid}/tools/insight_forge", {"question": LONE}, "'question'"),
    ("/api/report/{gid}/tools/interview_entities", {"topic": "water", "questions": ["ok", LONE]}, "'questions[1]'"),
    ("/api/report/{gid}", {"requirement": f"a report {LONE}"}, "'requirement'"),
]


@pytest.mark.parametrize("path, body, field", SURROGATES)
def test_lone_surrogates_are_refused_naming_the_field(client, water, unchanged, path, body, field):
    raw = json.dumps(body)  # ensure_ascii: the surrogate travels as the escape "\ud800", as a client sends it
    assert "\\ud800" in raw or "\\udc00" in raw
    response = client.post(path.format(gid=water), data=raw, content_type="application/json")
    error = refused(response, 400, f"{field} is not valid Unicode")
    assert error["code"] == "invalid_text" and "lone surrogate" in error["message"]


def test_lone_surrogates_in_a_jsonl_upload_are_refused_naming_line_and_field(client, water, unchanged):
    lines = [json.dumps(_fact()), json.dumps(_fact(target=f"T{LONE}"))]
    upload = _upload("\n".join(lines).encode())
    refused(client.post(f"/api/graph/{water}/facts", **_kwargs(upload)), 400, "line 2: 'target' is not valid Unicode")


def test_a_jsonl_upload_with_a_byte_order_mark_is_imported(client):
    gid = unique_graph_id("bom")
    assert client.post("/api/graph", json={"graph_id": gid}).status_code == 201
    facts = [_fact(source="Ann", fact="Ann visits Nowhere"), _fact(source="Bob", fact="Bob visits Nowhere")]
    data = b"\xef\xbb\xbf" + "\n".join(json.dumps(fact) for fact in facts).encode()  # as Windows editors save
    response = client.post(f"/api/graph/{gid}/facts", **_upload(data).kwargs())
    assert response.status_code == 201, response.get_json()
    assert response.get_json()["imported"] == 2
    stored = {edge["source"] for edge in client.get(f"/api/graph/{gid}/edges").get_json()["items"]}
    assert stored == {"Ann", "Bob"}  # the mark did not become part of the first name


def test_a_nul_in_the_query_is_refused_not_a_failed_search(client, water, unchanged):
    refused(client.post(f"/api/graph/{water}/search", json={"query": "water\x00"}), 400, "NUL")


@pytest.mark.parametrize("tool, arguments, fragment", [
    ("search_graph", {}, "'query' is required"),
    ("search_graph", {"query": "   "}, "must not be empty"),
    ("search_graph", {"query": "x" * 1001}, "longer than 1000"),
    ("search_graph", {"query": "water", "limit": -1}, "'limit' must be between"),
    ("search_graph", {"query": "water", "limit": 10**9}, "'limit' must be between"),
    ("search_graph", {"query": "water", "limit": "5"}, "must be an integer"),
    ("search_graph", {"query": "water", "drop": "graph"}, "unknown argument"),
    ("search_graph", {"query": "water\x00"}, "NUL"),  # refused alike by graph search
    ("insight_forge", {"question": "why\x00"}, "NUL"),
    ("panorama_search", {"query": "\x00water"}, "NUL"),
    ("interview_entities", {"topic": "water", "questions": ["ok", "a\x00b"]}, "NUL"),
    ("insight_forge", {"question": ["a"]}, "must be a string"),
    ("panorama_search", {"query": "water", "max_chars": 10}, "'max_chars' must be between"),
    ("interview_entities", {"topic": "water", "questions": [f"q{i}" for i in range(6)]}, "1 to 5"),
    ("interview_entities", {"topic": "water", "questions": [], "entities": ["x"]}, "1 to 5"),
])
def test_bad_report_tool_arguments(client, water, unchanged, tool, arguments, fragment):
    refused(client.post(f"/api/report/{water}/tools/{tool}", json=arguments), 400, fragment)


def test_bad_report_requests(client, water, unchanged):
    refused(client.post(f"/api/report/{water}/tools/drop_graph", json={}), 404, "unknown tool")
    refused(client.post(f"/api/report/{water}/tools/search_graph", data=NESTED, content_type="application/json"),
            400, "nested")
    refused(client.post(f"/api/report/{water}", json={}), 400, "'requirement' is required")
    refused(client.post(f"/api/report/{water}", json={"requirement": "x" * 4001}), 413, "longer than")
    refused(client.post(f"/api/report/{water}", json={"requirement": "r", "max_sections": 0}), 422, "between")
    refused(client.post(f"/api/report/{water}", json={"requirement": "r", "max_sections": 10**6}), 422, "between")
    refused(client.post(f"/api/report/{water}", json={"requirement": "r", "rm": "-rf"}), 400, "unknown field")
    for bad in ("r_zz", "..", "r_0123456789abcdef0", "r_0123456789ABCDEF", "%2E%2E", "r_0123456789abcdef%0A"):
        refused(client.get(f"/api/report/{bad}"), 400, "report id")
    refused(client.get("/api/report/%2E%2E%2Fmeta.json"), 404)  # a separator matches no route
    refused(client.get("/api/report/r_0123456789abcdef"), 404)


RERANK_BAD = [
    ({}, 400, "'query' is required"),
    ({"query": "q"}, 400, "'documents' is required"),
    ({"query": "q", "documents": "text"}, 400, "'documents' as JSONL"),  # a string is JSONL text
    ({"query": "q", "documents": []}, 400, "non-empty list"),
    ({"query": "q", "documents": [5]}, 400, "must be a string or an object"),
    ({"query": "q", "documents": ["  "]}, 422, "has no text"),
    ({"query": "q", "documents": ["a"] * 1001}, 413, "at most 1000"),
    ({"query": "q", "documents": ["x" * 100_001]}, 413, "longer than"),
    ({"query": "q", "documents": [{"id": None, "text": "a"}]}, 400, "must be a string or an integer"),
    ({"query": "q", "documents": ["a"], "top_k": -1}, 422, "'top_k' must be between"),
    ({"query": "q", "documents": ["a"], "top_k": 10**12}, 422, "'top_k' must be between"),
    ({"query": "q", "documents": ["a"], "top_n": "three"}, 400, "must be an integer"),
    ({"query": "q", "documents": ["a"], "strategy": "'; FLUSHALL"}, 422, "'strategy' must be one of"),
    ({"query": "q\x00", "documents": ["a"]}, 400, "NUL"),
    ({"query": "x" * 2001, "documents": ["a"]}, 413, "longer than"),
    ({"query": "q", "documents": ["a"], "top_k": "\uff11"}, 400, "ASCII digits"),
    ({"query": "q\ud800", "documents": ["a"]}, 400, "'query' is not valid Unicode"),
    ({"query": "q", "documents": ["a", "b\udfff"]}, 400, "'documents[1]' is not valid Unicode"),
    ({"query": "q", "documents": [{"id": "x", "text": "t", "metadata": {"k": "\ud800"}}]}, 400,
     "'documents[0].metadata.k' is not valid Unicode"),
    ({"query": "q", "documents": json.dumps({"id": "x", "text": "t\ud800"})}, 400,
     "'documents[0].text' is not valid Unicode"),  # JSONL: the escape decodes only after the body
]


@pytest.mark.parametrize("body, status, fragment", RERANK_BAD)
def test_bad_rerank_requests_never_reach_the_model(backend, body, status, fragment):
    _, client = backend(RERANKER_PROVIDER="ollama", RERANKER_BASE_URL=_DEAD_MODEL_SERVER)
    refused(client.post("/api/rerank", json=body), status, fragment)
    refused(client.post("/api/rerank", data=NESTED, content_type="application/json"), 400, "nested")


_DEAD_MODEL_SERVER = unused_base_url()  # validation must answer before any model request is tried
