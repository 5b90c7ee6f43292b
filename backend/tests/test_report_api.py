"""The report HTTP API over a real FalkorDB and the scripted LLM: tools one by one, a report from
start to stored markdown, and clear 4xx answers for bad input."""

from __future__ import annotations

import json
import re
import time

import pytest

from app.report import prompts
from app.report.agent import ReportAgent
from app.report.protocol import InvalidCall
from app.report.tool_registry import TOOLS
from tests.conftest import unique_graph_id
from tests.support.report_scripts import REPORT_FACTS, as_json, interview_facts, judge_or_chat, purpose
from tests.support.scripted_llm import ScriptedLLMServer
from tests.support.tasks import wait_for_task


def chat_for_api(messages, body):
    kind = purpose(messages)
    if kind == "sub_queries":
        return as_json({"sub_queries": ["algae bloom", "reservoir closure"]})
    if kind == "interview":
        uuid, _fact = interview_facts(messages)[0]
        return as_json({"answers": [{"question_index": 1, "answer": "We run it.", "fact_uuids": [uuid]}]})
    if kind == "outline":
        return as_json({"title": "Ferries", "sections": [
            {"title": "Service", "goal": "How often the ferry takes people to the island"}]})
    if kind == "section":
        if "slowly" in str(messages):  # a report to cancel while it runs: each of its turns takes a while
            time.sleep(0.5)
            return as_json({"action": "tool", "tool": "search_graph", "arguments": {"query": "ferry"}})
        if not any(m["role"] == "assistant" for m in messages):
            return as_json({"action": "tool", "tool": "search_graph", "arguments": {"query": "ferry"}})
        shown = re.search(r"\[(F\d+)\]", messages[1]["content"])  # a fact the planned calls showed
        return as_json({"action": "write", "content": "The ferry runs hourly.", "sources": [shown.group(1)]})
    return "unexpected"


@pytest.fixture(scope="module")
def scripted_llm():
    """One scripted server for the module: the settings stay equal, so the graph runtime is built once."""
    with ScriptedLLMServer(judge_or_chat(chat_fn=chat_for_api)) as server:
        yield server


@pytest.fixture(scope="module")
def module_graph() -> dict:
    return {}


@pytest.fixture
def api(backend, scripted_llm, module_graph):
    """(client, graph_id): the app with the scripted chat LLM, and a graph holding the report facts."""
    _, client = backend(LLM_BASE_URL=scripted_llm.base_url, LLM_MODEL_NAME="writer", LLM_TIMEOUT_S=10)
    if "id" not in module_graph:  # read-only for the tests, so imported once
        gid = unique_graph_id("api")
        assert client.post("/api/graph", json={"graph_id": gid}).status_code == 201
        assert client.post(f"/api/graph/{gid}/facts", json={"facts": REPORT_FACTS}).status_code == 201
        module_graph["id"] = gid
    scripted_llm.reset()
    return client, module_graph["id"]


def run_tool(client, gid, tool, **arguments):
    return client.post(f"/api/report/{gid}/tools/{tool}", json=arguments)


def test_each_tool_answers_with_its_result_and_text(api):
    client, gid = api
    search = run_tool(client, gid, "search_graph", query="who directs the water utility", limit=3)
    assert search.status_code == 200
    body = search.get_json()
    assert body["tool"] == "search_graph" and len(body["result"]["facts"]) == 3
    assert body["result"]["facts"][0]["uuid"] in body["text"] and body["result"]["reranked"] is False

    insight = run_tool(client, gid, "insight_forge", question="What closed the reservoir?").get_json()
    assert insight["result"]["sub_queries"] == ["What closed the reservoir?", "algae bloom", "reservoir closure"]
    assert "Relationship chains" in insight["text"]

    panorama = run_tool(client, gid, "panorama_search", query="water", max_chars=1000).get_json()
    assert panorama["result"]["total_edges"] == len(REPORT_FACTS) and len(panorama["text"]) <= 1000
    assert panorama["result"]["text_truncated"] is True and "[truncated" in panorama["text"]
    assert len(panorama["result"]["historical_facts"]) == 3

    interview = run_tool(client, gid, "interview_entities", topic="ferry service", questions="How often?",
                         max_entities=1).get_json()
    answers = interview["result"]["interviews"][0]["answers"]
    assert answers[0]["knows"] is True and answers[0]["answer"] == "We run it."


@pytest.mark.parametrize("tool, arguments, status, message", [
    ("search_graph", {}, 400, "'query' is required"),
    ("search_graph", {"query": "x", "limit": 0}, 400, "'limit' must be between 1 and 50"),
    ("search_graph", {"query": "x", "limit": "5"}, 400, "'limit' must be an integer"),
    ("search_graph", {"query": "x", "scope": "everything"}, 400, "'scope' must be one of"),
    ("search_graph", {"query": "   "}, 400, "'query' must not be empty"),
    ("search_graph", {"query": "x" * 1001}, 400, "longer than 1000 characters"),
    ("panorama_search", {"query": "x", "max_chars": 10}, 400, "'max_chars' must be between 500 and 50000"),
    ("interview_entities", {"topic": "t", "questions": []}, 400, "'questions' must be a list of 1 to 5"),
    ("interview_entities", {"topic": "t", "questions": [1]}, 400, "'questions' must be a string"),
    ("insight_forge", {"question": "q", "graph_id": "other"}, 400, "unknown argument(s) ['graph_id']"),
    ("fortune_teller", {"query": "x"}, 404, "unknown tool 'fortune_teller'"),
])
def test_bad_tool_arguments_are_refused_clearly(api, scripted_llm, tool, arguments, status, message):
    client, gid = api
    response = run_tool(client, gid, tool, **arguments)
    assert response.status_code == status
    error = response.get_json()["error"]
    assert message in error["message"] and error["code"] in ("invalid_arguments", "unknown_tool")
    assert scripted_llm.count == 0


def test_tool_requests_need_a_json_object_and_a_known_graph(api):
    client, gid = api
    assert client.post(f"/api/report/{gid}/tools/search_graph", data="query=x").status_code == 415
    assert client.post(f"/api/report/{gid}/tools/search_graph", json=["x"]).status_code == 400
    missing = run_tool(client, unique_graph_id(), "search_graph", query="x")
    assert missing.status_code == 404 and missing.get_json()["error"]["code"] == "graph_not_found"
    assert run_tool(client, "bad id!", "search_graph", query="x").status_code == 400


def listed_to_the_model() -> dict[str, list[str]]:
    """Each tool's argument names as the agent's system prompt lists them, in the prompt's order."""
    listed = {}
    for line in prompts.section_system_prompt().splitlines():
        tool = re.match(r"- (\w+): .*?\. Arguments: (.*)$", line)
        if tool:
            listed[tool.group(1)] = re.findall(r"(?:^|, )(\w+)\??: ", tool.group(2))
    return listed


def test_the_model_and_the_api_know_the_same_tools_with_the_same_arguments(api):
    """A call the model writes from its prompt is one the API runs, and the agent and the API refuse an
    argument with the same words: both read the tool's one definition."""
    client, gid = api
    agent = ReportAgent(client.application.config["APP_CONFIG"])
    listed = listed_to_the_model()
    assert list(listed) == list(TOOLS)
    for name, arguments in listed.items():
        params = {param.name: param for param in TOOLS[name].parameters}
        assert arguments and set(arguments) <= set(params)
        assert set(params) - set(arguments) <= set(prompts.AGENT_HIDDEN_ARGUMENTS)  # never shown, still valid
        example = {"texts": ["Who runs it?"], "time": "2024-05-01T00:00:00Z"}  # a value each kind takes
        call = {argument: example.get(params[argument].kind, "ferry") for argument in arguments}
        kind, tool, checked = agent._action_of(json.dumps({"action": "tool", "tool": name, "arguments": call}))
        assert (kind, tool) == ("tool", TOOLS[name]) and set(call) <= set(checked)
        answer = run_tool(client, gid, name, **call)
        assert answer.status_code == 200 and answer.get_json()["tool"] == name

        refused = run_tool(client, gid, name, **call, unknown=1).get_json()["error"]["message"]
        with pytest.raises(InvalidCall) as problem:
            agent._action_of(json.dumps({"action": "tool", "tool": name, "arguments": {**call, "unknown": 1}}))
        assert str(problem.value) == refused and f"allowed: {list(params)}" in refused
    agent.close()


def test_a_report_from_request_to_markdown(api):
    client, gid = api
    started = client.post(f"/api/report/{gid}", json={"requirement": "How do people reach the island?",
                                                      "max_sections": 2})
    assert started.status_code == 202
    report_id, task_id = started.get_json()["report_id"], started.get_json()["task_id"]
    task = wait_for_task(client, task_id)
    assert task["state"] == "done" and task["kind"] == "report"
    assert task["progress"]["section"] == task["progress"]["sections_total"] == 1
    # Three calls the agent planned itself as the section opened (PLANNED_CALLS), then the model's own search.
    assert task["progress"]["tool_calls"] == 4 and task["progress"]["invalid_calls"] == 0

    report = client.get(f"/api/report/{report_id}")
    assert report.status_code == 200
    body = report.get_json()
    assert body["report_id"] == report_id and body["status"] == "done" and body["graph_id"] == gid
    assert body["markdown"].startswith("# Ferries") and "The ferry runs hourly." in body["markdown"]
    assert [step["kind"] for step in body["log"]] == [
        "plan", "tool", "tool", "tool", "tool", "write", "complete", "final"]
    assert [step.get("planned", False) for step in body["log"][1:5]] == [True, True, True, False]
    assert body["log"][1]["arguments"]["query"] == "How do people reach the island"
    assert body["log"][4]["arguments"]["query"] == "ferry" and body["sections"][0]["title"] == "Service"


@pytest.mark.parametrize("body, status, message", [
    ({}, 400, "'requirement' is required"),
    ({"requirement": 5}, 400, "'requirement' must be a string"),
    ({"requirement": "x" * 4001}, 413, "longer than 4000 characters"),
    ({"requirement": "x", "max_sections": 0}, 422, "'max_sections' must be between 1 and 6"),
    ({"requirement": "x", "sections": 2}, 400, "unknown field(s) ['sections']"),
])
def test_bad_report_requests_are_refused(api, body, status, message):
    client, gid = api
    response = client.post(f"/api/report/{gid}", json=body)
    assert response.status_code == status and message in response.get_json()["error"]["message"]


def test_report_ids_are_checked_before_any_file_is_read(api):
    client, gid = api
    assert client.post(f"/api/report/{unique_graph_id()}", json={"requirement": "x"}).status_code == 404
    for bad in ("r_123", "R_0123456789ABCDEF", "..", "r_0123456789abcdef.json", "meta.json"):
        response = client.get(f"/api/report/{bad}")
        assert response.status_code == 400, bad
        assert response.get_json()["error"]["code"] == "invalid_report_id"
    assert client.get("/api/report/..%2F..%2Fmeta.json").status_code in (400, 404)
    unknown = client.get("/api/report/r_0123456789abcdef")
    assert unknown.status_code == 404 and unknown.get_json()["error"]["code"] == "report_not_found"


def report_status(client, report_id: str, statuses: tuple[str, ...], timeout_s: float = 60) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        body = client.get(f"/api/report/{report_id}").get_json()
        if body["status"] in statuses:
            return body
        assert time.monotonic() < deadline, f"report never reached {statuses}: {body['status']}"
        time.sleep(0.1)


def test_reports_are_listed_newest_first_canceled_while_they_run_and_deleted(api):
    client, gid = api
    first = client.post(f"/api/report/{gid}", json={"requirement": "How often does the ferry run?"}).get_json()
    assert wait_for_task(client, first["task_id"])["state"] == "done"
    slow = client.post(f"/api/report/{gid}", json={"requirement": "Tell it slowly: the ferry"}).get_json()
    listed = client.get(f"/api/report?graph_id={gid}&limit=2").get_json()["reports"]  # other tests' reports after
    assert [r["report_id"] for r in listed] == [slow["report_id"], first["report_id"]]
    assert "markdown" not in listed[0] and listed[1]["status"] == "done"

    report_status(client, slow["report_id"], ("running",))
    canceled = client.post(f"/api/report/{slow['report_id']}/cancel")
    assert canceled.status_code == 200
    body = report_status(client, slow["report_id"], ("canceled",), timeout_s=30)
    assert body["markdown"] is None and body["log"]  # what it wrote before it stopped is kept
    assert wait_for_task(client, slow["task_id"])["state"] == "canceled"
    again = client.post(f"/api/report/{first['report_id']}/cancel").get_json()
    assert again["status"] == "done"  # a finished report stays as it is

    assert client.delete(f"/api/report/{slow['report_id']}").get_json() == {"deleted": slow["report_id"]}
    assert client.get(f"/api/report/{slow['report_id']}").status_code == 404
    assert client.delete(f"/api/report/{slow['report_id']}").status_code == 404
    listed = [r["report_id"] for r in client.get(f"/api/report?graph_id={gid}").get_json()["reports"]]
    assert slow["report_id"] not in listed and listed[0] == first["report_id"]


@pytest.mark.parametrize("path, method, status, message", [
    ("/api/report?limit=0", "GET", 422, "'limit' must be between 1 and 200"),
    ("/api/report?graph_id=../x", "GET", 400, "graph id"),
    ("/api/report?sort=new", "GET", 400, "unknown parameter(s) ['sort']"),
    ("/api/report/r_nothex/cancel", "POST", 400, "report id must look like"),
    ("/api/report/r_0123456789abcdef/cancel", "POST", 404, "does not exist"),
    ("/api/report/r_0123456789abcdef", "DELETE", 404, "does not exist"),
    ("/api/tasks/t_0123456789abcdef/cancel", "POST", 404, "does not exist"),
])
def test_bad_report_and_task_requests_are_refused_clearly(api, path, method, status, message):
    client, _ = api
    response = client.open(path, method=method)
    assert response.status_code == status and message in response.get_json()["error"]["message"]
