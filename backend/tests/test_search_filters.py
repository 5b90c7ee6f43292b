"""Graph search narrowed by filters (relation types, entity labels, source and target, time windows,
`as_of`, `current_only`) and centred on an entity, on both databases: dated facts imported through the
real import API and searched through the real search API, with the passthrough reranker."""

from __future__ import annotations

import pytest

from app.graph.runtime import GraphitiAdapter
from app.report.tools import ReportTools
from tests.conftest import unique_graph_id

QUERY = "engineer works for company in Port Alder"


def fact(source, relation, target, text, valid_at=None, invalid_at=None, source_labels=(), target_labels=()):
    return {"source": source, "target": target, "relation": relation, "fact": text, "valid_at": valid_at,
            "invalid_at": invalid_at, "source_labels": list(source_labels), "target_labels": list(target_labels)}


PERSON, COMPANY, CITY = ["Person"], ["Company"], ["City"]
FACTS = [
    fact("Ana", "works for", "Acme", "Ana worked for Acme as an engineer", "2019-01-01T00:00:00Z",
         "2022-06-30T00:00:00Z", PERSON, COMPANY),  # no longer true: invalidated and expired
    fact("Ana", "works for", "Globex", "Ana works for Globex as an engineer", "2022-07-01T00:00:00Z", None,
         PERSON, COMPANY),
    fact("Ben", "works for", "Acme", "Ben works for Acme as an engineer", "2020-03-01T00:00:00Z", None,
         PERSON, COMPANY),
    fact("Acme", "located in", "Port Alder", "Acme is a company located in Port Alder", None, None,
         COMPANY, CITY),  # undated
    fact("Globex", "located in", "Port Alder", "Globex is a company located in Port Alder",
         "2015-01-01T00:00:00Z", None, COMPANY, CITY),
    fact("Ana", "lives in", "Port Alder", "Ana the engineer lives in Port Alder", "2018-01-01T00:00:00Z",
         "2030-01-01T00:00:00Z", PERSON, CITY),  # ends in the future: still true
    fact("Ben", "knows", "Ana", "Ben the engineer knows Ana the engineer", "2021-05-05T00:00:00Z", None,
         PERSON, PERSON),
    # Far from Acme: two steps away at least, sharing the query's words.
    fact("Zed", "works for", "Initech", "Zed works for Initech as an engineer", "2021-01-01T00:00:00Z", None,
         PERSON, COMPANY),
    fact("Initech", "located in", "Springfield", "Initech is a company located in Springfield",
         "2010-01-01T00:00:00Z", None, COMPANY, CITY),
]
TEXTS = {item["fact"] for item in FACTS}
ENDED = "Ana worked for Acme as an engineer"


@pytest.fixture(scope="module")
def dated_graphs():
    return {}


@pytest.fixture
def dated(on_both_backends, graph_backend, dated_graphs):
    """(client, graph id) of the dated graph on the module's current database."""
    app, client = on_both_backends
    key = graph_backend["GRAPH_BACKEND"]
    if key not in dated_graphs:
        graph_id = unique_graph_id("dated")
        assert client.post("/api/graph", json={"graph_id": graph_id}).status_code == 201
        response = client.post(f"/api/graph/{graph_id}/facts", json={"facts": FACTS})
        assert response.status_code == 201 and response.get_json()["imported"] == len(FACTS), response.get_json()
        dated_graphs[key] = graph_id
    return app, client, dated_graphs[key]


def search(client, graph_id, **body):
    response = client.post(f"/api/graph/{graph_id}/search", json={"query": QUERY, "limit": 20, **body})
    assert response.status_code == 200, response.get_json()
    return response.get_json()


def facts_of(answer) -> set[str]:
    return {edge["fact"] for edge in answer["edges"]}


def by_text(*texts) -> set[str]:
    assert set(texts) <= TEXTS
    return set(texts)


def test_the_whole_graph_answers_without_filters_and_marks_what_no_longer_holds(dated):
    _, client, graph_id = dated
    answer = search(client, graph_id)
    assert facts_of(answer) == TEXTS and answer["filters"] == {} and answer["center"] is None
    current = {edge["fact"]: edge["current"] for edge in answer["edges"]}
    assert current[ENDED] is False and sum(not value for value in current.values()) == 1
    ended = next(edge for edge in answer["edges"] if edge["fact"] == ENDED)
    assert ended["invalid_at"].startswith("2022-06-30") and ended["expired_at"] is not None
    future = next(edge for edge in answer["edges"] if edge["fact"] == "Ana the engineer lives in Port Alder")
    assert future["current"] is True and future["invalid_at"].startswith("2030-01-01")


def test_current_only_leaves_out_what_no_longer_holds(dated):
    _, client, graph_id = dated
    answer = search(client, graph_id, current_only=True)
    assert facts_of(answer) == TEXTS - {ENDED} and all(edge["current"] for edge in answer["edges"])
    assert answer["filters"] == {"current_only": True}


def test_relation_types_match_the_names_given_at_import(dated):
    _, client, graph_id = dated
    answer = search(client, graph_id, relation_types=["works for", "KNOWS"])
    assert {edge["relation"] for edge in answer["edges"]} == {"WORKS_FOR", "KNOWS"}
    assert facts_of(answer) == {text for text in TEXTS if " works for " in f" {text} " or "worked for" in text
                                or "knows" in text}
    assert search(client, graph_id, relation_types=["owes money to"])["edges"] == []  # unknown: matches nothing


def test_entity_labels_keep_entities_and_facts_between_them(dated):
    _, client, graph_id = dated
    answer = search(client, graph_id, entity_labels=["Person"], scope="both")
    assert answer["nodes"] and all("Person" in node["labels"] for node in answer["nodes"])
    assert {node["name"] for node in answer["nodes"]} <= {"Ana", "Ben", "Zed"}
    # Graphiti's meaning: both ends carry one of the labels.
    assert facts_of(answer) == by_text("Ben the engineer knows Ana the engineer")
    both = search(client, graph_id, entity_labels=["Person", "City"])
    assert facts_of(both) == by_text("Ana the engineer lives in Port Alder", "Ben the engineer knows Ana the engineer")


def test_source_and_target_by_name_or_uuid(dated):
    _, client, graph_id = dated
    from_ana = search(client, graph_id, source="Ana")
    assert {edge["source"] for edge in from_ana["edges"]} == {"Ana"} and len(from_ana["edges"]) == 3
    acme_uuid = next(edge["target_uuid"] for edge in from_ana["edges"] if edge["target"] == "Acme")
    to_acme = search(client, graph_id, target=acme_uuid)
    assert facts_of(to_acme) == by_text(ENDED, "Ben works for Acme as an engineer")
    both = search(client, graph_id, source="Ben", target="Acme")
    assert facts_of(both) == by_text("Ben works for Acme as an engineer")


def test_time_windows_keep_facts_whose_time_lies_inside(dated):
    _, client, graph_id = dated
    window = search(client, graph_id, valid_at={"from": "2020-01-01", "to": "2021-12-31T23:59:59Z"})
    assert facts_of(window) == by_text("Ben works for Acme as an engineer", "Ben the engineer knows Ana the engineer",
                                       "Zed works for Initech as an engineer")
    assert facts_of(search(client, graph_id, valid_at={"to": "2014-12-31"})) == by_text(
        "Initech is a company located in Springfield")
    ended = search(client, graph_id, invalid_at={"from": "2022-01-01"})
    assert facts_of(ended) == by_text(ENDED, "Ana the engineer lives in Port Alder")
    assert search(client, graph_id, created_at={"from": "2999-01-01"})["edges"] == []
    assert facts_of(search(client, graph_id, created_at={"to": "2999-01-01"})) == TEXTS


def test_as_of_keeps_the_facts_valid_then(dated):
    _, client, graph_id = dated
    mid_2020 = search(client, graph_id, as_of="2020-06-01T00:00:00Z")
    assert facts_of(mid_2020) == by_text(
        ENDED, "Ben works for Acme as an engineer", "Acme is a company located in Port Alder",
        "Globex is a company located in Port Alder", "Ana the engineer lives in Port Alder",
        "Initech is a company located in Springfield")
    # The answer still says what holds today: the Acme job held then, not now.
    assert {edge["fact"]: edge["current"] for edge in mid_2020["edges"]}[ENDED] is False
    early_2023 = search(client, graph_id, as_of="2023-01-01", relation_types=["works for"])
    assert facts_of(early_2023) == by_text("Ana works for Globex as an engineer", "Ben works for Acme as an engineer",
                                           "Zed works for Initech as an engineer")
    # Combined with a window on the same time: both hold.
    both = search(client, graph_id, as_of="2023-01-01", valid_at={"from": "2021-01-01"})
    assert facts_of(both) == by_text("Ben the engineer knows Ana the engineer", "Ana works for Globex as an engineer",
                                     "Zed works for Initech as an engineer")


def test_centre_search_answers_what_lies_around_the_entity(dated):
    _, client, graph_id = dated
    answer = search(client, graph_id, center="Acme", scope="both")
    near = {"Acme", "Ana", "Ben", "Port Alder"}
    assert answer["edges"] and all({edge["source"], edge["target"]} & near for edge in answer["edges"])
    assert not facts_of(answer) & by_text("Zed works for Initech as an engineer",
                                          "Initech is a company located in Springfield")
    # The centre's own facts first, then those of its neighbours.
    at_centre = [("Acme" in (edge["source"], edge["target"])) for edge in answer["edges"]]
    assert at_centre == sorted(at_centre, reverse=True) and at_centre[0]
    assert {edge["fact"] for edge, own in zip(answer["edges"], at_centre) if own} == by_text(
        ENDED, "Ben works for Acme as an engineer", "Acme is a company located in Port Alder")
    assert {node["name"] for node in answer["nodes"]} <= near
    # With filters: around Acme, only what holds now.
    current = search(client, graph_id, center="Acme", current_only=True)
    assert ENDED not in facts_of(current) and "Ben works for Acme as an engineer" in facts_of(current)


@pytest.mark.parametrize("body, field", [
    ({"foo": 1}, "foo"),
    ({"as_of": "last tuesday"}, "as_of"),
    ({"as_of": 20240101}, "as_of"),
    ({"valid_at": {"from": "2024-02-01", "to": "2024-01-01"}}, "valid_at"),
    ({"valid_at": "2024-01-01"}, "valid_at"),
    ({"invalid_at": {"since": "2024-01-01"}}, "invalid_at"),
    ({"created_at": {"from": "yesterday"}}, "created_at.from"),
    ({"relation_types": 5}, "relation_types"),
    ({"relation_types": [""]}, "relation_types"),
    ({"entity_labels": ["Person) DETACH DELETE n //"]}, "entity_labels"),
    ({"current_only": "yes"}, "current_only"),
    ({"source": 7}, "source"),
])
def test_bad_filters_answer_400_naming_the_field(dated, body, field):
    _, client, graph_id = dated
    response = client.post(f"/api/graph/{graph_id}/search", json={"query": QUERY, **body})
    assert response.status_code == 400, response.get_json()
    error = response.get_json()["error"]
    assert field.split(".")[0] in error["message"]
    assert error.get("field") == field or error.get("fields") == [field]


@pytest.mark.parametrize("body, field", [({"center": "Nobody"}, "center"), ({"source": "Nobody"}, "source"),
                                         ({"target": "00000000-0000-0000-0000-000000000000"}, "target")])
def test_an_entity_the_graph_does_not_hold_is_a_404_naming_the_field(dated, body, field):
    _, client, graph_id = dated
    response = client.post(f"/api/graph/{graph_id}/search", json={"query": QUERY, **body})
    assert response.status_code == 404
    error = response.get_json()["error"]
    assert error["code"] == "entity_not_found" and error["field"] == field and field in error["message"]


def test_report_tools_take_the_filters(dated):
    app, client, graph_id = dated
    tools = ReportTools(app.config["APP_CONFIG"])
    before = tools.run(graph_id, "search_graph", {"query": QUERY, "limit": 20, "scope": "edges",
                                                  "as_of": "2020-06-01T00:00:00Z"})
    assert {fact.fact for fact in before.facts} == facts_of(search(client, graph_id, as_of="2020-06-01T00:00:00Z"))
    now = tools.run(graph_id, "panorama_search", {"query": QUERY, "current_only": True})
    listed = {fact.fact for fact in now.current + now.historical}
    assert listed == TEXTS - {ENDED}  # with filters: the search's hits alone, not every stored fact
    works = tools.run(graph_id, "interview_entities", {"topic": QUERY, "questions": ["Where do you work?"],
                                                      "entities": ["Ana"], "relation_types": ["works for"],
                                                      "valid_at": {"from": "2022-01-01"}})
    assert [fact.fact for fact in works.interviews[0].facts] == ["Ana works for Globex as an engineer"]
    # Over HTTP, with the same checks as the search API's.
    response = client.post(f"/api/report/{graph_id}/tools/search_graph", json={"query": QUERY, "as_of": "soon"})
    assert response.status_code == 400 and "as_of" in response.get_json()["error"]["message"]
    response = client.post(f"/api/report/{graph_id}/tools/insight_forge",
                           json={"question": QUERY, "max_sub_queries": 1, "created_at": {"to": "2000-01-01"}})
    assert response.status_code == 200 and response.get_json()["result"]["facts"] == []
