"""Pytest plugin: the order in which `make test` (pytest-xdist, `--dist loadfile`) hands test files to
its workers.

Registered in tests/conftest.py through `pytest_plugins`; it changes only `--dist loadfile` runs.

Every file that drives a real model server (llama-server, or the project's Ollama) is one work unit,
the model lane: one worker runs those files one after another, the longest first, and it is handed
out first. A model server keeps a core busy while it computes, so two model tests at once (two
servers, or two tests taking turns on one server's single slot) each take several times as long as
alone. xdist's own order, most tests first, did the opposite: the heaviest model files hold one test
each, so they were handed out last, two at a time, and the whole suite waited on them. The other
workers meanwhile run the remaining files, the long ones first, and the lane's worker joins in on them
when the lane is done.
"""

from __future__ import annotations

from pathlib import PurePosixPath

import pytest
from xdist.scheduler import LoadFileScheduling

MODEL_LANE = "model lane"

# The files with tests that use a real model server (the `local_model` marker), longest first.
# Each takes a minute or more of both cores; the first two, several minutes.
MODEL_FILES = (
    "test_report_local_model.py",
    "test_ollama_ingestion.py",
    "test_local_ingestion.py",
    "test_ollama_server.py",
    "test_prompt_injection.py",
    "test_strategies_local_model.py",
    "test_ollama_graphiti_llm.py",
    "test_local_llm_server.py",
    "test_reranker_local_model.py",
    "test_demo.py",
    "test_ensure_models.py",
    "test_temporal_bench.py",
)

# Files without a model that take a minute or more (servers of their own: Neo4j, app and worker
# processes, benchmarks), handed out before the rest so that none of them is left for the end.
LONG_FILES = (
    "test_bad_input.py",
    "test_scale_bench.py",
    "test_neo4j_server.py",
    "test_replicas_bench.py",
    "test_fact_upload.py",
    "test_shared_database.py",
    "test_server_ports.py",
)


def file_name(nodeid: str) -> str:
    return PurePosixPath(nodeid.split("::", 1)[0]).name


def is_model_file(nodeid: str) -> bool:
    return file_name(nodeid) in MODEL_FILES


class ModelLaneScheduling(LoadFileScheduling):
    """loadfile, with the model files in one unit that goes first, then the long files, then the
    others by their number of tests (xdist's own rule)."""

    def _split_scope(self, nodeid: str) -> str:
        return MODEL_LANE if is_model_file(nodeid) else super()._split_scope(nodeid)

    def _assign_work_unit(self, node) -> None:
        # xdist sends a node the unit at the front of its queue: put the one this order wants there.
        scope = min(self.workqueue, key=self._rank)
        if scope == MODEL_LANE:
            self.workqueue[scope] = _longest_first(self.workqueue[scope])
        self.workqueue.move_to_end(scope, last=False)
        super()._assign_work_unit(node)

    def _rank(self, scope: str) -> tuple[int, int]:
        if scope == MODEL_LANE:
            return (0, 0)
        name = file_name(scope)
        if name in LONG_FILES:
            return (1, LONG_FILES.index(name))
        return (2, -len(self.workqueue[scope]))


def _longest_first(unit: dict[str, bool]) -> dict[str, bool]:
    """The lane's tests file by file in MODEL_FILES' order, each file's in its own order."""
    return dict(sorted(unit.items(), key=lambda entry: MODEL_FILES.index(file_name(entry[0]))))


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log) -> LoadFileScheduling | None:
    if config.getvalue("dist") == "loadfile":
        return ModelLaneScheduling(config, log)
    return None


@pytest.hookimpl(trylast=True)  # after the fixture plugins have marked the tests that use a model server
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    outside = sorted({file_name(item.nodeid) for item in items
                      if item.get_closest_marker("local_model") and not is_model_file(item.nodeid)})
    if outside:
        raise pytest.UsageError(
            f"{', '.join(outside)} use(s) a real model server (marker local_model) but not listed in MODEL_FILES "
            "(tests/support/model_lane.py): add it there, or `make test` runs it beside the model lane")
