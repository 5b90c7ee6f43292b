"""`python -m bench combine OUT results.json...`: several benchmark runs combined into one
RESULTS.md (a table per dataset) and one plot, as docs/bench/ holds them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.report import combine, markdown_table, write_reports

BACKEND = Path(__file__).resolve().parents[1]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run(dataset: str, model: str, queries: int, ndcg: dict[str, float]) -> dict:
    return {"benchmark": "rerank", "dataset": dataset, "model": model, "date": "2026-11-27", "machine": "2-core VM",
            "command": f"python -m bench rerank --model {model}",
            "strategies": {label: {"ndcg@10": value, "latency_p50_s": 1.0, "latency_p95_s": 2.0, "queries": queries}
                           for label, value in ndcg.items()}}


RUNS = [run("dl19", "qwen-1.5b", 43, {"original": 0.5058, "pointwise": 0.6123}),
        run("dl19", "qwen-0.5b", 20, {"original": 0.4981, "pointwise": 0.5512}),
        run("scifact", "qwen-1.5b", 50, {"original": 0.6651, "pointwise": 0.6902})]


def test_runs_combine_by_dataset_with_each_model_in_its_own_row():
    combined = combine(RUNS)
    assert list(combined) == ["dl19 (rerank)", "scifact (rerank)"]
    assert list(combined["dl19 (rerank)"]["strategies"]) == [
        "original (43 queries)", "qwen-1.5b pointwise (43 queries)",
        "original (20 queries)", "qwen-0.5b pointwise (20 queries)"]  # baselines of other lengths stay apart
    assert len(combined["dl19 (rerank)"]["runs"]) == 2
    table = markdown_table(combined["scifact (rerank)"])
    assert "| qwen-1.5b pointwise (50 queries) | 0.6902 |" in table and table.count("\n") == 3


def test_the_command_writes_one_table_per_dataset_and_one_plot(tmp_path):
    paths = []
    for index, results in enumerate(RUNS):
        paths.append(tmp_path / f"run{index}.json")
        paths[-1].write_text(json.dumps(results))
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "bench", "combine", str(out),
                           *map(str, paths)], cwd=BACKEND, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    text = (out / "RESULTS.md").read_text()
    assert text.count("\n## ") == 2 and "- machine: 2-core VM" in text
    assert "| qwen-0.5b pointwise (20 queries) | 0.5512 |" in text
    assert "`python -m bench rerank --model qwen-0.5b`" in text
    assert (out / "quality_latency.png").read_bytes().startswith(PNG_MAGIC)


def test_one_run_gets_its_json_table_and_plot(tmp_path):
    paths = write_reports(RUNS[0], tmp_path)
    assert json.loads(paths["json"].read_text()) == RUNS[0]
    assert "| pointwise | 0.6123 |" in paths["markdown"].read_text()
    assert paths["plot"].read_bytes().startswith(PNG_MAGIC)
