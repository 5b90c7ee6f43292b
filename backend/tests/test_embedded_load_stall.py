"""An embedded FalkorDB that stops making progress while it loads its stored graphs is ended and
started again, and the start completes with every stored node. FalkorDB 4.16 has been seen to
deadlock (no CPU used, nothing answered) while replaying its append-only file; here the real
server is frozen with SIGSTOP at the same moment of its start."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

import pytest
import redis

from app.graph.embedded_falkordb import EmbeddedFalkorDB

GRAPH = "stall_probe"
NODES = 40_000
STALL_S = 2.0


def node_count(server: EmbeddedFalkorDB) -> int:
    client = redis.Redis(host=server.host, port=server.port)
    try:
        _, rows, *_ = client.execute_command("GRAPH.RO_QUERY", GRAPH, "MATCH (n:Entity) RETURN count(n)")
        return rows[0][0]
    finally:
        client.close()


def freeze_the_next_process(server: EmbeddedFalkorDB, previous_pid: int, frozen: list[int]) -> None:
    """SIGSTOP the first redis-server the start launches, as soon as it exists (it needs far longer
    than this poll to load its module and replay the file)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        process = server.process
        if process is not None and process.pid != previous_pid:
            os.kill(process.pid, signal.SIGSTOP)
            frozen.append(process.pid)
            return
        time.sleep(0.0005)


def test_a_server_stuck_while_loading_is_started_again_with_its_data(tmp_path, caplog):
    server = EmbeddedFalkorDB(tmp_path, stall_s=STALL_S)
    server.start()
    try:
        client = redis.Redis(host=server.host, port=server.port)
        client.execute_command("GRAPH.QUERY", GRAPH,
                               f"UNWIND range(1, {NODES}) AS i CREATE (:Entity {{uuid: 'u' + toString(i)}})")
        client.close()
        first_pid = server.process.pid
        server.stop()

        frozen: list[int] = []
        watcher = threading.Thread(target=freeze_the_next_process, args=(server, first_pid, frozen))
        watcher.start()
        with caplog.at_level(logging.WARNING, logger="app.graph.embedded_falkordb"):
            server.start()
        watcher.join()

        assert len(frozen) == 1
        assert server.process.pid != frozen[0]  # the stuck one was replaced...
        with pytest.raises(ProcessLookupError):
            os.kill(frozen[0], 0)  # ...and is gone, reaped
        stalls = [record for record in caplog.records if "used no CPU" in record.getMessage()]
        assert len(stalls) == 1 and "starting it again" in stalls[0].getMessage()
        assert node_count(server) == NODES
    finally:
        server.stop()
