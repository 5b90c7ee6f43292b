"""A restarted embedded FalkorDB rebuilds its graphs' indexes in the background, after it already
answers. The app must not search before they are built: a half-built full-text index answers the
same query differently a moment later (the flaky first-stage results of an earlier CI run). On the
real server, with a graph large enough that the rebuild takes a while."""

from __future__ import annotations

import os
import threading

import redis

from app.graph.embedded_falkordb import EmbeddedFalkorDB

GRAPH = "rebuild_probe"
NODES = 40_000


def index_states(server: EmbeddedFalkorDB) -> list[str]:
    client = redis.Redis(host=server.host, port=server.port)
    try:
        _, rows, *_ = client.execute_command(
            "GRAPH.RO_QUERY", GRAPH, "CALL db.indexes() YIELD status RETURN status")
        return [row[0].decode() for row in rows]
    finally:
        client.close()


def search_hits(server: EmbeddedFalkorDB) -> int:
    client = redis.Redis(host=server.host, port=server.port)
    try:
        _, rows, *_ = client.execute_command(
            "GRAPH.RO_QUERY", GRAPH,
            "CALL db.idx.fulltext.queryNodes('Entity', 'harbor') YIELD node RETURN count(node)")
        return rows[0][0]
    finally:
        client.close()


def test_a_restarted_server_answers_only_once_its_indexes_are_built(tmp_path):
    server = EmbeddedFalkorDB(tmp_path)
    server.start()
    try:
        client = redis.Redis(host=server.host, port=server.port)
        client.execute_command("GRAPH.QUERY", GRAPH, "CREATE INDEX FOR (n:Entity) ON (n.uuid, n.name)")
        client.execute_command("GRAPH.QUERY", GRAPH, "CREATE FULLTEXT INDEX FOR (n:Entity) ON (n.name)")
        client.execute_command(
            "GRAPH.QUERY", GRAPH,
            f"UNWIND range(1, {NODES}) AS i CREATE (:Entity {{uuid: 'u' + toString(i), "
            "name: 'harbor pilot ' + toString(i) + ' meets the board'})")
        client.close()
        assert search_hits(server) == NODES
        server.stop()

        server.start()
        # Right after start(): every index is built and a keyword search sees every node.
        states = index_states(server)
        assert states and all(state == "OPERATIONAL" for state in states), states
        assert search_hits(server) == NODES
    finally:
        server.stop()


def test_a_server_that_does_not_answer_in_time_is_ended_and_the_start_can_be_tried_again(tmp_path):
    """A start past its limit (a load of large graphs can take minutes) ends the server and says so;
    the server object stays usable: the next start works."""
    server = EmbeddedFalkorDB(tmp_path)
    outcome: list[BaseException | None] = []

    def start_with_no_time() -> None:
        try:
            server.start(ready_timeout_s=0)
            outcome.append(None)
        except BaseException as error:  # noqa: BLE001 - handed to the test thread
            outcome.append(error)

    starter = threading.Thread(target=start_with_no_time, daemon=True)
    starter.start()
    starter.join(timeout=60)
    assert not starter.is_alive(), "the failed start hung"
    (error,) = outcome
    assert isinstance(error, RuntimeError) and "did not answer within 0 s" in str(error)
    pid = int(server.pid_file.read_text()) if server.pid_file.exists() else None
    assert pid is None or not os.path.exists(f"/proc/{pid}"), "the server outlived its failed start"
    try:
        server.start()
        assert server.answers()
    finally:
        server.stop()
