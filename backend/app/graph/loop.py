"""The graph event loop: one daemon thread runs one asyncio loop for the life of the process.

Flask is synchronous and Graphiti is async, and the FalkorDB async client is bound to the loop it was
first used on. So every graph coroutine runs on this one loop: `run_on_loop()` submits it there and
waits, with a deadline.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")

_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()



class GraphTimeoutError(TimeoutError):
    """A graph operation did not finish within its deadline."""




def _get_loop() -> asyncio.AbstractEventLoop:
    """The process-wide event loop, running in one daemon thread, created on first use."""
    global _loop
    if _loop is None:
        with _loop_lock:
            if _loop is None:
                loop = asyncio.new_event_loop()
                loop.set_task_factory(_task_with_owned_index_build)
                thread = threading.Thread(target=loop.run_forever, name="graphiti-loop", daemon=True)
                thread.start()
                _loop = loop
    return _loop


_INDEX_BUILD = "build_indices_and_constraints"


def _task_with_owned_index_build(loop: asyncio.AbstractEventLoop, coro, **options) -> asyncio.Task:
    """Every FalkorDriver clone (ours, and the one Graphiti makes per add_episode call) starts its
    index build as a task nobody awaits. Its outcome is collected here, so a build that fails
    because the database stopped is logged once, now, instead of as "Task exception was never
    retrieved" whenever the garbage collector gets to it (in the middle of some later request)."""
    task = asyncio.Task(coro, loop=loop, **options)
    if getattr(coro, "__name__", "") == _INDEX_BUILD:
        task.add_done_callback(_log_index_build_outcome)
    return task


def _log_index_build_outcome(task: asyncio.Task) -> None:
    if task.cancelled() or task.exception() is None:
        return
    # The indices exist from the graph's first clone on; a clone's rebuild failing only matters
    # if the database is gone, which the next query reports.
    logger.info("Background index build of a graph driver failed: %s: %s",
                type(task.exception()).__name__, task.exception())


async def cancel_index_builds() -> None:
    """Cancel and await every index build still running on the loop, whoever's clone started it."""
    builds = [task for task in asyncio.all_tasks()
              if not task.done() and getattr(task.get_coro(), "__name__", "") == _INDEX_BUILD]
    for task in builds:
        task.cancel()
    await asyncio.gather(*builds, return_exceptions=True)


def run_on_loop(coro: Coroutine[Any, Any, T], timeout: float | None = 120.0) -> T:
    """Run a coroutine on the graph loop and wait for it (synchronous callers only)."""
    future = asyncio.run_coroutine_threadsafe(coro, _get_loop())
    try:
        return future.result(timeout=timeout)
    except TimeoutError:
        future.cancel()
        raise GraphTimeoutError(f"graph operation did not finish within {timeout}s") from None
