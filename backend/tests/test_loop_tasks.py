"""Background work on the graph loop is owned: a driver clone's index build (Graphiti starts one per
clone and never awaits it) is collected when it ends and cancelled when the runtime closes, so no
"Task exception was never retrieved" surfaces later, in the log of whatever runs then."""

from __future__ import annotations

import asyncio
import gc
import logging

from app.graph import runtime as graph_runtime
from app.graph.loop import run_on_loop
from app.graph.runtime import reset_graphiti


def _never_retrieved(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if "never retrieved" in record.getMessage()]


def _settle() -> None:
    """Let the loop drop what the last coroutine held, then collect it."""
    run_on_loop(asyncio.sleep(0), timeout=30)
    gc.collect()


def test_a_clone_whose_index_build_fails_leaves_nothing_for_the_garbage_collector(client, caplog):
    assert client.get("/api/graph").status_code == 200  # the runtime and its database run
    driver = graph_runtime._get_graphiti().driver
    reset_graphiti()  # the database stops: a clone's index build now fails

    async def clone_and_walk_away() -> str:
        clone = driver.clone(database="orphan_clone")  # as Graphiti's add_episode does per call
        await asyncio.wait([clone._init_task])  # ended, but nobody asked for its outcome
        return "ended"

    with caplog.at_level(logging.INFO):
        assert run_on_loop(clone_and_walk_away(), timeout=60) == "ended"
        _settle()
    assert _never_retrieved(caplog) == []
    assert any("Background index build of a graph driver failed" in record.getMessage()
               for record in caplog.records)


def test_closing_the_runtime_cancels_index_builds_still_running(client, caplog):
    assert client.get("/api/graph").status_code == 200
    driver = graph_runtime._get_graphiti().driver
    started = asyncio.Event()

    async def slow_build() -> None:  # an index build that is still running when the runtime closes
        started.set()
        await asyncio.sleep(3600)
    slow_build.__name__ = "build_indices_and_constraints"

    async def start_build() -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(slow_build())
        await started.wait()
        return task

    with caplog.at_level(logging.INFO):
        task = run_on_loop(start_build(), timeout=30)
        reset_graphiti()
        assert task.cancelled()  # cancelled and awaited before the database stopped
        _settle()
    assert driver is not None and _never_retrieved(caplog) == []
