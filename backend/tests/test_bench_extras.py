"""`python -m bench` in an install without the bench extra (the production image's): the quality
benchmarks refuse at once with the install line, not with an ImportError or a crash at the plot."""

from __future__ import annotations

import sys

import pytest

from tests.support.bench_cli import bench_cli


@pytest.mark.parametrize("blocked", ["ir_measures", "matplotlib"])
@pytest.mark.parametrize("command", [["rerank", "--dataset"], ["graph", "--dataset"], ["report", "--dataset"]])
def test_a_quality_benchmark_without_the_bench_extra_says_how_to_install_it(monkeypatch, tmp_path, command, blocked):
    monkeypatch.setitem(sys.modules, blocked, None)  # `import` of it now raises ImportError, as when not installed
    result = bench_cli(args=[*command, str(tmp_path), "--yes"])
    package = blocked.replace("_", "-")
    assert result.exit_code == 1 and not isinstance(result.exception, ImportError)
    assert f"`python -m bench {command[0]}` needs {package} (the bench extra)" in result.output
    assert "pip install -e 'backend[bench]'" in result.output and "Traceback" not in result.output
    assert not any(tmp_path.iterdir())  # refused before it read or wrote anything
