"""A graph as a whole: export to JSONL and import from it, exact across the two databases, and
graphs written by another Graphiti application found and adopted (app/graph/transfer.py,
graph_file.py, foreign.py). Real FalkorDB (embedded) and a real local Neo4j, the in-process embedder."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from datetime import datetime, timezone

import pytest
from graphiti_core.edges import EntityEdge, EpisodicEdge
from graphiti_core.embedder.client import EmbedderClient
from graphiti_core.nodes import EntityNode, EpisodeType, EpisodicNode
from graphiti_core.utils.bulk_utils import add_nodes_and_edges_bulk

from bench.load_run import ServedApp
from app.graph import runtime as graph_runtime
from app.graph.graph_file import MAX_RECORDS
from app.graph.loop import run_on_loop
from app.graph.store import cypher_rows
from tests.conftest import unique_graph_id
from tests.support.app_process import BACKEND_DIR, call
from tests.support.db_monitor import ENTITY_WRITE, KillAtCommand
from tests.support.facts import WATER_FACTS
from tests.support.graph_backends import neo4j_env

logger = logging.getLogger(__name__)

DATED_FACTS = WATER_FACTS + [
    {"source": "Mara Lindqvist", "target": "Town Council", "relation": "reports to",
     "fact": "Mara Lindqvist reports to the Town Council every quarter",
     "source_labels": ["Person"], "target_labels": ["Organization", "Government"],
     "target_summary": "The elected council of the harbour town",
     "valid_at": "2021-03-01T09:30:00+02:00", "metadata": {"source_doc": "minutes-2021", "page": 4,
                                                            "confidence": 0.75, "verified": True}},
    {"source": "Harbor Ferry", "target": "Harbor Water Utility", "relation": "buys water from",
     "fact": "The Harbor Ferry bought its drinking water from the utility until 2023",
     "valid_at": "2015-01-01T00:00:00Z", "invalid_at": "2023-06-30T00:00:00Z"},
]


def _run(coro):
    return run_on_loop(coro, timeout=120)


def _runtime():
    return graph_runtime._graphiti


def _add_episodes_and_entity_attributes(graph_id: str) -> None:
    """What fact imports do not write: episodes naming entities, facts citing them, entity attributes."""
    runtime = _runtime()
    driver = runtime.driver_for(graph_id)
    entities = _run(cypher_rows(driver, "MATCH (n:Entity) WHERE n.group_id = $g RETURN n.uuid AS uuid, "
                                        "n.name AS name ORDER BY n.name", g=graph_id))
    facts = _run(cypher_rows(driver, "MATCH ()-[e:RELATES_TO]->() WHERE e.group_id = $g RETURN e.uuid AS uuid "
                                     "ORDER BY e.uuid", g=graph_id))
    when = datetime(2024, 9, 1, 8, 0, tzinfo=timezone.utc)
    episodes = [EpisodicNode(name=f"minutes {i}", group_id=graph_id, source=source, content=f"Meeting {i}: water.",
                             source_description="council minutes", valid_at=when.replace(day=i + 1),
                             created_at=when, entity_edges=[facts[i]["uuid"]])
                for i, source in enumerate((EpisodeType.text, EpisodeType.message, EpisodeType.json))]
    mentions = [EpisodicEdge(source_node_uuid=episode.uuid, target_node_uuid=entity["uuid"], group_id=graph_id,
                             created_at=when)
                for episode, entity in zip(episodes, entities) for _ in (0,)]
    mentions.append(EpisodicEdge(source_node_uuid=episodes[0].uuid, target_node_uuid=entities[-1]["uuid"],
                                 group_id=graph_id, created_at=when))
    _run(add_nodes_and_edges_bulk(driver, episodes, mentions, [], [], runtime.graphiti.embedder))
    _run(cypher_rows(driver, "MATCH ()-[e:RELATES_TO {uuid: $u}]->() SET e.episodes = $episodes",
                     u=facts[0]["uuid"], episodes=[episodes[0].uuid, episodes[1].uuid]))
    _run(cypher_rows(driver, "MATCH (n:Entity {uuid: $u}) SET n.founded = 1987, n.aliases = ['HWU', 'the utility']",
                     u=entities[0]["uuid"]))


def _export(client, graph_id: str) -> bytes:
    response = client.get(f"/api/graph/{graph_id}/export")
    assert response.status_code == 200, response.get_json()
    assert response.mimetype == "application/x-ndjson"
    return response.get_data()


def _import(client, graph_id: str, body: bytes, **query):
    return client.post(f"/api/graph/{graph_id}/import", data=body, content_type="application/x-ndjson",
                       query_string=query)


def _records(body: bytes) -> list[dict]:
    return [json.loads(line) for line in body.decode().splitlines()]


def test_a_graph_goes_falkordb_to_file_to_neo4j_to_file_unchanged(backend, neo4j_server):
    graph_id = unique_graph_id("rt")
    _, falkor = backend(GRAPH_BACKEND="falkordb")
    assert falkor.post("/api/graph", json={"graph_id": graph_id}).status_code == 201
    assert falkor.post(f"/api/graph/{graph_id}/facts", json={"facts": DATED_FACTS}).status_code == 201
    _add_episodes_and_entity_attributes(graph_id)
    first = _export(falkor, graph_id)

    records = _records(first)
    header, entities = records[0], [r for r in records if r["kind"] == "entity"]
    facts = [r for r in records if r["kind"] == "fact"]
    episodes = [r for r in records if r["kind"] == "episode"]
    assert header == {"kind": "header", "format": "mirofish-graph", "version": 1, "graph_id": graph_id,
                      "entities": 11, "facts": 10, "episodes": 3, "embeddings": "excluded"}
    assert (len(entities), len(facts), len(episodes)) == (11, 10, 3)
    council = next(e for e in entities if e["name"] == "Town Council")
    assert council["labels"] == ["Government", "Organization"]
    reports = next(f for f in facts if f["relation"] == "REPORTS_TO")
    assert reports["valid_at"] == "2021-03-01T07:30:00.000000+00:00"  # a fact import stores UTC
    assert reports["attributes"] == {"confidence": 0.75, "page": 4, "source_doc": "minutes-2021", "verified": True}
    assert sum(bool(f["episodes"]) for f in facts) == 1 and sum(len(e["mentions"]) for e in episodes) == 4
    assert any(e["attributes"] == {"aliases": ["HWU", "the utility"], "founded": 1987} for e in entities)
    logger.info("Round-trip graph: %d entities, %d facts, %d episodes, %d bytes",
                len(entities), len(facts), len(episodes), len(first))

    _, neo4j = backend(**neo4j_env(neo4j_server))
    imported = _import(neo4j, graph_id, first)
    assert imported.status_code == 201, imported.get_json()
    assert imported.get_json() == {"graph_id": graph_id, "created": True, "entities": 11, "facts": 10,
                                   "episodes": 3}
    second = _export(neo4j, graph_id)
    assert second == first

    hits = neo4j.post(f"/api/graph/{graph_id}/search", json={"query": "algae bloom reservoir"}).get_json()
    assert "algae bloom" in hits["edges"][0]["fact"]  # the names and facts were embedded again here

    again = _import(neo4j, graph_id, first)  # not into a graph that holds data
    assert again.status_code == 409 and again.get_json()["error"]["code"] == "graph_not_empty"
    copy_id = unique_graph_id("copy")
    clash = _import(neo4j, copy_id, first)  # the same uuids in the one Neo4j database
    assert clash.status_code == 409 and clash.get_json()["error"]["code"] == "uuid_conflict"
    assert neo4j.get(f"/api/graph/{copy_id}/stats").status_code == 404  # the graph it made is gone again
    copied = _import(neo4j, copy_id, first, new_uuids="true")
    assert copied.status_code == 201, copied.get_json()
    copy = _records(_export(neo4j, copy_id))
    assert len(copy) == len(records) and {r["uuid"] for r in copy[1:]}.isdisjoint({r["uuid"] for r in records[1:]})
    assert sorted(r["fact"] for r in copy if r["kind"] == "fact") == sorted(f["fact"] for f in facts)


def test_a_file_made_by_hand_comes_back_byte_for_byte_on_falkordb(client):
    lines = [
        {"kind": "header", "format": "mirofish-graph", "version": 1, "graph_id": "elsewhere", "entities": 2,
         "facts": 1, "episodes": 1, "embeddings": "excluded"},
        {"kind": "entity", "uuid": "e-1", "name": "Ada", "labels": ["Person"], "summary": "A mathematician",
         "created_at": "2020-01-01T00:00:00.000000+00:00", "attributes": {"born": 1815, "tags": ["a", "b"]}},
        {"kind": "entity", "uuid": "e-2", "name": "Engine", "labels": [], "summary": "",
         "created_at": "2020-01-01T00:00:00.000000+00:00", "attributes": {}},
        {"kind": "fact", "uuid": "f-1", "source_uuid": "e-1", "target_uuid": "e-2", "relation": "WROTE_ABOUT",
         "fact": "Ada wrote about the Engine", "valid_at": "1843-01-01T00:00:00.000000+00:00", "invalid_at": None,
         "expired_at": None, "created_at": "2020-01-02T03:04:05.123456+00:00", "reference_time": None,
         "episodes": ["ep-1"], "attributes": {"weight": 0.5}},
        {"kind": "episode", "uuid": "ep-1", "name": "notes", "content": "Ada's notes on the Engine.",
         "source": "text", "source_description": "letters", "valid_at": "1843-01-01T00:00:00.000000+00:00",
         "created_at": "2020-01-02T03:04:05.123456+00:00", "entity_edges": ["f-1"], "mentions": ["e-1", "e-2"]},
    ]
    body = "".join(json.dumps(line, sort_keys=True, separators=(",", ":")) + "\n" for line in lines).encode()
    graph_id = unique_graph_id("hand")
    response = _import(client, graph_id, body, name="Ada's graph")
    assert response.status_code == 201, response.get_json()
    exported = _export(client, graph_id)
    assert exported == body.replace(b'"graph_id":"elsewhere"', f'"graph_id":"{graph_id}"'.encode())
    listed = {g["graph_id"]: g["name"] for g in client.get("/api/graph").get_json()["graphs"]}
    assert listed[graph_id] == "Ada's graph"


@pytest.mark.parametrize("line, message", [
    ('{"kind":"entity","uuid":"x"', "line 2: not valid JSON"),
    ('{"kind":"entity","uuid":"e","name":"A","labels":[],"summary":"","created_at":"2020-01-01T00:00:00Z",'
     '"attributes":{}}', "line 2: 'created_at' must be written '2020-01-01T00:00:00.000000+00:00'"),
    ('{"kind":"entity","uuid":"e","name":"A","labels":[],"summary":"","created_at":'
     '"2020-01-01T00:00:00.000000+00:00","attributes":{},"colour":"red"}', "line 2: unknown keys ['colour']"),
    ('{"kind":"entity","uuid":"e","name":"A","labels":[],"summary":"","created_at":'
     '"2020-01-01T00:00:00.000000+00:00","attributes":{"x":null}}', "line 2: attribute 'x' is null"),
    ('{"kind":"fact","uuid":"f","source_uuid":"a","target_uuid":"b","relation":"R","fact":"t","valid_at":null,'
     '"invalid_at":null,"expired_at":null,"created_at":"2020-01-01T00:00:00.000000+00:00","reference_time":null,'
     '"episodes":[],"attributes":{}}', "line 2: 'source_uuid' 'a' is no entity of the file"),
    ('{"kind":"mystery"}', "line 2: 'kind' must be one of"),
])
def test_a_malformed_line_is_a_400_naming_it_and_nothing_is_created(client, line, message):
    header = '{"kind":"header","format":"mirofish-graph","version":1,"graph_id":"g","entities":1,"facts":0,' \
             '"episodes":0,"embeddings":"excluded"}'
    graph_id = unique_graph_id("bad")
    response = _import(client, graph_id, f"{header}\n{line}\n".encode())
    assert response.status_code == 400
    error = response.get_json()["error"]
    assert error["code"] == "invalid_graph_file" and error["line"] == 2
    assert error["message"].startswith(message), error["message"]
    assert client.get(f"/api/graph/{graph_id}/stats").status_code == 404


def test_a_file_cut_short_or_of_another_format_is_refused(client):
    header = {"kind": "header", "format": "mirofish-graph", "version": 1, "graph_id": "g", "entities": 3,
              "facts": 0, "episodes": 0, "embeddings": "excluded"}
    cut = _import(client, unique_graph_id("cut"), (json.dumps(header) + "\n").encode())
    assert cut.status_code == 400 and "the header says 3 entities but the file holds 0" in cut.get_json()["error"]["message"]
    other = _import(client, unique_graph_id("fmt"), b'{"kind":"header","format":"csv","version":9}\n')
    assert other.status_code == 400 and other.get_json()["error"]["line"] == 1
    too_many = _import(client, unique_graph_id("big"), _synthetic_file(MAX_RECORDS + 1))
    assert too_many.status_code == 413 and too_many.get_json()["error"]["code"] == "too_many_records"
    wrong_type = client.post(f"/api/graph/{unique_graph_id()}/import", data=b"x", content_type="image/png")
    assert wrong_type.status_code == 415
    assert client.get("/api/graph/no_such_graph_here/export").status_code == 404
    assert client.get("/api/graph?include=everything").status_code == 400


def _synthetic_file(entities: int) -> bytes:
    """A graph of `entities` entities in a chain, a fact between each two, and one episode naming the first two."""
    at = "2024-01-01T00:00:00.000000+00:00"
    uuids = [f"node-{i:04d}" for i in range(entities)]
    lines = [{"kind": "header", "format": "mirofish-graph", "version": 1, "graph_id": "chain", "entities": entities,
              "facts": entities - 1, "episodes": 1, "embeddings": "excluded"}]
    lines += [{"kind": "entity", "uuid": u, "name": f"Valve {i}", "labels": ["Valve"], "summary": "",
               "created_at": at, "attributes": {"index": i}} for i, u in enumerate(uuids)]
    lines += [{"kind": "fact", "uuid": f"fact-{i:04d}", "source_uuid": uuids[i], "target_uuid": uuids[i + 1],
               "relation": "FEEDS", "fact": f"Valve {i} feeds valve {i + 1}", "valid_at": None, "invalid_at": None,
               "expired_at": None, "created_at": at, "reference_time": None, "episodes": [], "attributes": {}}
              for i in range(entities - 1)]
    lines += [{"kind": "episode", "uuid": "episode-1", "name": "survey", "content": "Valves 0 and 1.", "source": "text",
               "source_description": "survey", "valid_at": at, "created_at": at, "entity_edges": [],
               "mentions": uuids[:2]}]
    return "".join(json.dumps(line, sort_keys=True, separators=(",", ":")) + "\n" for line in lines).encode()


def test_a_database_killed_mid_import_leaves_the_empty_graph_empty_and_a_second_import_fills_it(client, graph_id):
    body = _synthetic_file(120)
    database = graph_runtime._get_graphiti().embedded_db
    with KillAtCommand(database.port, database.process.pid, (ENTITY_WRITE, graph_id), 3) as killer:
        response = _import(client, graph_id, body)
    assert killer.killed.is_set(), "the database was not killed mid-import"
    assert response.status_code == 503 and response.get_json()["error"]["stored"] == 0, response.get_json()

    stats = client.get(f"/api/graph/{graph_id}/stats").get_json()  # the database is back, the import undone
    assert (stats["nodes"], stats["edges"], stats["episodes"]) == (0, 0, 0), stats
    again = _import(client, graph_id, body)  # into the graph made before: not created by the import
    assert again.status_code == 201 and again.get_json()["created"] is False, again.get_json()
    assert _export(client, graph_id) == body.replace(b'"graph_id":"chain"', f'"graph_id":"{graph_id}"'.encode())


class ShortVectors(EmbedderClient):
    """Another application's embedder: 16-dimensional vectors (not this app's 384)."""

    async def create(self, input_data):
        text = input_data if isinstance(input_data, str) else str(input_data)
        return [float((hash(text) >> shift) & 7) + 1.0 for shift in range(16)]

    async def create_batch(self, input_data_list):
        return [await self.create(text) for text in input_data_list]


async def _write_with_graphiti(runtime, group_id: str, embedder: EmbedderClient) -> None:
    """What a plain graphiti-core application writes: nodes and an edge embedded by its own embedder,
    saved by graphiti's bulk writer through a driver of its own, with an episode naming them."""
    if runtime.is_falkordb:
        from graphiti_core.driver.falkordb_driver import FalkorDriver

        driver = FalkorDriver(host=runtime.embedded_db.host, port=runtime.embedded_db.port, database=group_id)
    else:
        driver = runtime.driver  # the same Neo4j database: graphiti filters it by group_id
    now = datetime.now(timezone.utc)
    ship = EntityNode(name="Seagull", group_id=group_id, labels=["Vessel"], summary="A fishing boat", created_at=now)
    port = EntityNode(name="Old Harbour", group_id=group_id, labels=["Place"], summary="", created_at=now)
    edge = EntityEdge(group_id=group_id, source_node_uuid=ship.uuid, target_node_uuid=port.uuid, name="MOORED_AT",
                      fact="The Seagull is moored at the Old Harbour for the winter", created_at=now, episodes=[])
    episode = EpisodicNode(name="log", group_id=group_id, source=EpisodeType.text, source_description="harbour log",
                           content="Seagull moored for winter.", valid_at=now, created_at=now,
                           entity_edges=[edge.uuid])
    for node in (ship, port):
        await node.generate_name_embedding(embedder)
    await edge.generate_embedding(embedder)
    mentions = [EpisodicEdge(source_node_uuid=episode.uuid, target_node_uuid=n.uuid, group_id=group_id,
                             created_at=now) for n in (ship, port)]
    await add_nodes_and_edges_bulk(driver, [episode], mentions, [ship, port], [edge], embedder)
    if driver is not runtime.driver:
        await driver.close()


@pytest.mark.parametrize("database", ["falkordb", "neo4j"])
def test_a_graph_written_by_graphiti_itself_is_listed_adopted_and_searched(backend, database, request):
    env = neo4j_env(request.getfixturevalue("neo4j_server")) if database == "neo4j" else {"GRAPH_BACKEND": "falkordb"}
    _, client = backend(**env)
    client.get("/api/graph")  # the runtime is started
    runtime = _runtime()
    same, other = unique_graph_id("foreign"), unique_graph_id("foreign")
    _run(_write_with_graphiti(runtime, same, runtime.graphiti.embedder))
    _run(_write_with_graphiti(runtime, other, ShortVectors()))

    listed = client.get("/api/graph?include=foreign").get_json()
    foreign = {g["group_id"]: g for g in listed["foreign"]}
    assert foreign[same] == {"group_id": same, "entities": 2, "facts": 1, "episodes": 1, "adoptable": True}
    assert same not in {g["graph_id"] for g in listed["graphs"]}
    assert client.post(f"/api/graph/{same}/search", json={"query": "boat"}).status_code == 404

    adopted = client.post(f"/api/graph/{same}/adopt", json={"name": "Harbour log"})
    assert adopted.status_code == 201, adopted.get_json()
    assert adopted.get_json()["vector_dimension"] == 384 and adopted.get_json()["facts"] == 1
    hits = client.post(f"/api/graph/{same}/search", json={"query": "where is the fishing boat for the winter"})
    assert hits.get_json()["edges"][0]["fact"] == "The Seagull is moored at the Old Harbour for the winter"
    assert client.post(f"/api/graph/{same}/adopt").status_code == 409
    assert same not in {g["group_id"] for g in client.get("/api/graph?include=foreign").get_json()["foreign"]}
    assert _records(_export(client, same))[0]["facts"] == 1

    refused = client.post(f"/api/graph/{other}/adopt")
    assert refused.status_code == 409
    error = refused.get_json()["error"]
    assert error["code"] == "embedding_mismatch" and (error["stored_dimension"], error["embedder_dimension"]) == (16, 384)
    assert "16-dimensional" in error["message"] and "reembed" in error["message"]
    reembedded = client.post(f"/api/graph/{other}/adopt", json={"reembed": True})
    assert reembedded.status_code == 201, reembedded.get_json()
    hits = client.post(f"/api/graph/{other}/search", json={"query": "where is the fishing boat for the winter"})
    assert hits.get_json()["edges"][0]["fact"] == "The Seagull is moored at the Old Harbour for the winter"

    absent = unique_graph_id("none")
    assert client.post(f"/api/graph/{absent}/adopt").status_code == 404
    if runtime.is_falkordb:  # looking made no graph of that name (a Graphiti driver for it would have)
        assert absent.encode() not in _run(runtime.driver.client.list_graphs())
        assert absent not in _run(runtime.driver.client.list_graphs())
    assert client.post("/api/graph/bad id!/adopt").status_code == 400
    for graph_id in (same, other):
        assert client.delete(f"/api/graph/{graph_id}").status_code in (200, 202)  # 202: goes on as a task


def test_the_commands_export_a_served_graph_and_import_it_as_another(tmp_path):
    app = ServedApp(tmp_path / "data", tmp_path / "serve.log", 4, {"RERANKER_PROVIDER": "none"}).start()
    try:
        base = f"http://127.0.0.1:{app.port}"
        assert call(f"{base}/api/graph", "POST", {"graph_id": "town"})[0] == 201
        assert call(f"{base}/api/graph/town/facts", "POST", {"facts": WATER_FACTS})[0] == 201
        env = {**os.environ, "DOTENV_PATH": os.devnull}

        def flask(*args: str):
            return subprocess.run([sys.executable, "-m", "flask", "--app", "app", *args, "--url", base],
                                  cwd=BACKEND_DIR, env=env, capture_output=True, text=True, timeout=600)

        exported = flask("export-graph", "town", "--out", str(tmp_path / "town.jsonl"))
        assert exported.returncode == 0, exported.stderr
        assert "11 entities, 8 facts, 0 episodes" in exported.stdout
        imported = flask("import-graph", str(tmp_path / "town.jsonl"), "--graph", "town_copy")
        assert imported.returncode == 0, imported.stderr
        assert "Imported into town_copy: 11 entities, 8 facts, 0 episodes." in imported.stdout
        again = flask("export-graph", "town_copy", "--out", str(tmp_path / "copy.jsonl"))
        assert again.returncode == 0, again.stderr
        first, second = (tmp_path / "town.jsonl").read_bytes(), (tmp_path / "copy.jsonl").read_bytes()
        assert second == first.replace(b'"graph_id":"town"', b'"graph_id":"town_copy"', 1)
        refused = flask("import-graph", str(tmp_path / "town.jsonl"), "--graph", "town_copy")
        assert refused.returncode == 1 and "HTTP 409" in refused.stderr and "Traceback" not in refused.stderr
    finally:
        app.stop()
