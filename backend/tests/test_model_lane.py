"""How `make test` hands files to its pytest-xdist workers (tests/support/model_lane.py), on a small
suite of its own run by a real pytest with two real workers: the files that use a model server run
first, on one worker, one after another, in MODEL_FILES' order; the long files go first on the other;
a file with a model test that MODEL_FILES does not list stops the run before anything runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BACKEND = Path(__file__).resolve().parents[1]

CONFTEST = 'pytest_plugins = ["tests.support.model_lane"]\n'
INI = "[pytest]\nmarkers =\n    local_model: uses a real model server\n"
# Each test appends "<worker> <file> <test>" to the run's log when it runs.
TEST = '''
import os, pytest
{mark}def test_{name}_{number}():
    with open(os.environ["LANE_LOG"], "a") as log:
        log.write(f"{{os.environ['PYTEST_XDIST_WORKER']}} {file} {number}\\n")
'''


def write_suite(folder: Path, files: dict[str, list[bool]]) -> None:
    """`files`: name -> one flag per test, True for a test marked local_model."""
    (folder / "conftest.py").write_text(CONFTEST)
    (folder / "pytest.ini").write_text(INI)
    for file, marks in files.items():
        name = file.removeprefix("test_").removesuffix(".py")
        (folder / file).write_text("".join(
            TEST.format(mark="@pytest.mark.local_model\n" if marked else "", name=name, number=number, file=file)
            for number, marked in enumerate(marks)))


def run_suite(folder: Path, *options: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(BACKEND), os.environ.get("PYTHONPATH", "")]),
           "LANE_LOG": str(folder / "lane.log")}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *options],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=300)


def test_model_files_run_first_on_one_worker_and_long_files_first_on_the_other(tmp_path):
    # Collected alphabetically: the long file, the model files in the opposite of MODEL_FILES' order, and
    # two ordinary files; the model files hold one test that needs no model each, as some real ones do.
    write_suite(tmp_path, {"test_bad_input.py": [False, False], "test_demo.py": [False, True],
                           "test_few.py": [False], "test_many.py": [False] * 5,
                           "test_report_local_model.py": [True]})
    result = run_suite(tmp_path, "-n", "2", "--dist", "loadfile")
    assert result.returncode == 0, result.stdout + result.stderr

    runs = [line.split() for line in (tmp_path / "lane.log").read_text().splitlines()]
    assert len(runs) == 11
    lane = [(worker, file) for worker, file, _ in runs if file in ("test_report_local_model.py", "test_demo.py")]
    lane_worker = lane[0][0]
    assert {worker for worker, _ in lane} == {lane_worker}
    on_lane_worker = [file for worker, file, _ in runs if worker == lane_worker]
    assert on_lane_worker[:3] == ["test_report_local_model.py", "test_demo.py", "test_demo.py"]
    on_other_worker = [file for worker, file, _ in runs if worker != lane_worker]
    assert on_other_worker[:2] == ["test_bad_input.py", "test_bad_input.py"]


def test_a_model_test_in_a_file_not_listed_stops_the_run_and_names_the_file(tmp_path):
    write_suite(tmp_path, {"test_unlisted.py": [False, True], "test_demo.py": [True]})
    result = run_suite(tmp_path)
    assert result.returncode == 4, result.stdout + result.stderr  # a usage error, before any test ran
    assert "test_unlisted.py" in result.stderr and "MODEL_FILES" in result.stderr
    assert "test_demo.py" not in result.stderr.split("MODEL_FILES")[0]
    assert not (tmp_path / "lane.log").exists()
