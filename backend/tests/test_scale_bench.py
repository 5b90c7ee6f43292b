"""`python -m bench scale` at tiny sizes through the CLI: one graph grown in batches through the served
API, and figures that come from real requests (the graph holds exactly the sizes, every search was
sent and answered, the import took time). No timing is asserted: figures depend on the machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from bench.cli import bench_group


def _scale(tmp_path, *args: str):
    """The command's result and output folder; the data folder is under tmp_path unless given, so that
    a failure's message carries the app's and the database's own logs."""
    if "--data-dir" not in args:
        args = (*args, "--data-dir", str(tmp_path / "data"))
    try:
        result = CliRunner().invoke(bench_group, ["scale", "--output", str(tmp_path / "out"), *args],
                                    catch_exceptions=False)
    except Exception as error:
        raise AssertionError(f"{type(error).__name__}: {error}\n{_log_tails(tmp_path)}") from error
    if result.exit_code != 0:
        print(_log_tails(tmp_path))  # shown beside the failed assertion on the exit code
    return result, tmp_path / "out"


def _log_tails(tmp_path, lines: int = 30) -> str:
    logs = sorted((tmp_path / "out" / "logs").glob("*.log")) + sorted(tmp_path.glob("**/redis.log"))
    return "\n".join(f"--- {log}:\n" + "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
                     for log in logs)


def test_one_graph_grows_through_the_sizes_and_each_size_is_measured(tmp_path):
    result, out = _scale(tmp_path, "--sizes", "20,40", "--batch-size", "15", "--searches", "4")

    assert result.exit_code == 0, result.output
    assert "reranked searches are skipped" in result.output
    report = json.loads((out / "results.json").read_text())
    steps = report["steps"]
    assert [step["edges"] for step in steps] == [20, 40]  # one graph, grown: counts read back from the API
    assert [step["nodes"] for step in steps] == [30, 50]  # a sensor per fact, plus the 10 places
    assert [step["import"]["facts"] for step in steps] == [20, 20]  # each step imports only what it adds
    assert [[batch["facts"] for batch in step["import"]["batches"]] for step in steps] == [[15, 5], [15, 5]]
    for step in steps:
        assert step["import"]["facts_per_s"] > 0
        first = step["first_stage"]
        assert first["requests"] == 4 and first["errors"] == 0, first
        assert 0 < first["p50_ms"] <= first["p95_ms"] <= first["max_ms"]
        assert step["memory"]["app_rss_mib"] > 0 and step["memory"]["database_rss_mib"] > 0
        assert step["memory"]["database"] == "FalkorDB"
        assert "reranked" not in step
    assert report["reranked_skipped"]
    table = (out / "results.md").read_text()
    assert "| 20 |" in table and "| 40 |" in table and "skipped" in table
    assert "| FalkorDB RSS |" in table


def test_on_neo4j_the_database_column_is_the_local_neo4j_jvm(tmp_path, monkeypatch):
    # A configured server is never written to: the served app starts its own Neo4j under its DATA_DIR.
    monkeypatch.setenv("GRAPH_BACKEND", "neo4j")
    monkeypatch.setenv("NEO4J_URI", "bolt://127.0.0.1:9")
    data = tmp_path / "data"
    result, out = _scale(tmp_path, "--sizes", "12", "--searches", "2", "--data-dir", str(data))

    assert result.exit_code == 0, result.output
    step = json.loads((out / "results.json").read_text())["steps"][0]
    assert step["edges"] == 12 and step["first_stage"]["errors"] == 0, step
    assert step["memory"]["database"] == "Neo4j"
    # The JVM's resident heap and page cache, not a stray small process: FalkorDB holds ~10 MiB here.
    assert step["memory"]["database_rss_mib"] > 100, step["memory"]
    assert "| Neo4j RSS |" in (out / "results.md").read_text()

    # The kept graph's index on its own Neo4j (NEO4J_URI unset, as the graph was stored): the index ranks
    # quantized vectors, and its scores are on the exact score's scale, a little off it.
    monkeypatch.delenv("NEO4J_URI")
    done = _vector_recall("--data-dir", str(data), "--queries", "3", "--output", str(tmp_path / "recall.json"))
    assert done.returncode == 0, done.stderr[-2000:]
    row = json.loads((tmp_path / "recall.json").read_text())["rows"][0]
    assert row["mean"] == 1.0 and 0 <= row["index_score_error"] < 0.02, row
    assert f"its exact score: {row['index_score_error']}" in done.stdout


def test_facts_can_share_their_sensors_so_a_fact_adds_one_text_not_two(tmp_path):
    result, out = _scale(tmp_path, "--sizes", "20", "--sensors", "5", "--searches", "2")

    assert result.exit_code == 0, result.output
    step = json.loads((out / "results.json").read_text())["steps"][0]
    assert (step["edges"], step["nodes"]) == (20, 15)  # 5 sensors and the 10 places carry 20 facts


def test_reranked_searches_ask_the_given_judge_and_report_its_share(tmp_path, scripted_llm):
    result, out = _scale(tmp_path, "--sizes", "12", "--searches", "2", "--reranked-searches", "2",
                         "--base-url", scripted_llm.base_url, "--model", "scripted")

    assert result.exit_code == 0, result.output
    step = json.loads((out / "results.json").read_text())["steps"][0]
    reranked = step["reranked"]
    assert reranked["requests"] == 2 and reranked["errors"] == 0, f"{reranked}\n{_log_tails(tmp_path)}"
    assert reranked["reranked"] == 2 and reranked["judged"] == reranked["candidates"] > 0
    assert scripted_llm.count >= reranked["judged"]  # the judges were real HTTP requests to this server
    assert 0 < reranked["judge_share"] < 1
    assert step["first_stage"]["requests"] == 2 and step["edges"] == 12


def test_sizes_must_grow(tmp_path):
    result, _ = _scale(tmp_path, "--sizes", "40,20")

    assert result.exit_code == 2 and "each larger than the one before" in result.output


def test_a_judge_needs_both_url_and_model(tmp_path):
    result, _ = _scale(tmp_path, "--sizes", "5", "--base-url", "http://127.0.0.1:9/v1")

    assert result.exit_code == 2 and "both --base-url and --model" in result.output


def test_with_the_vector_index_each_size_is_also_searched_exactly_and_its_recall_measured(tmp_path):
    result, out = _scale(tmp_path, "--sizes", "60", "--sensors", "6", "--searches", "3", "--vector-index")

    assert result.exit_code == 0, result.output
    step = json.loads((out / "results.json").read_text())["steps"][0]
    exact = step["exact"]
    assert exact["first_stage"]["requests"] == 3 and exact["first_stage"]["errors"] == 0, exact
    # 60 facts, reloaded from disk before the recall: the index (approximate) finds nearly all of the
    # exact nearest 20 of each query; a reloaded index read as it answers gave 0.5 here.
    recall = exact["recall"]
    assert recall["k"] == 20 and recall["queries"] == 40
    assert 0.95 <= recall["mean"] <= 1 and 0.9 <= recall["min"] <= recall["mean"] <= recall["as_near_as_exact"], recall
    assert step["app_start_s"] > 0 and exact["app_start_s"] > 0
    table = (out / "results.md").read_text()
    assert "exact cosine" in table and f"| {recall['mean']:.3f} ({recall['as_near_as_exact']:.3f}) |" in table


def test_a_stand_in_embedder_can_take_the_models_place(tmp_path):
    data = tmp_path / "data"
    result, out = _scale(tmp_path, "--sizes", "30", "--sensors", "3", "--searches", "2", "--vector-index",
                         "--stand-in-embedder", "--data-dir", str(data))

    assert result.exit_code == 0, result.output
    report = json.loads((out / "results.json").read_text())
    step = report["steps"][0]
    assert step["edges"] == 30 and step["first_stage"]["errors"] == 0 and step["exact"]["first_stage"]["errors"] == 0
    # Every served app embedded there: the 30 facts and 13 entities, and the searches' and recall's queries.
    assert report["stand_in_embedded_texts"] >= 30 + 13 + 2 + 2 + 40, report["stand_in_embedded_texts"]
    assert report["options"]["stand_in_embedder"] is True and "embedder_env" not in report["options"]

    # The kept graph's recall, its queries embedded by the same stand-in: the configured embedder is never asked.
    nowhere = {"EMBEDDING_PROVIDER": "openai", "EMBEDDING_BASE_URL": "http://127.0.0.1:9/v1", "EMBEDDING_MODEL": "m"}
    args = ("--data-dir", str(data), "--overfetch", "8", "--queries", "4", "--output", str(tmp_path / "recall.json"))
    refused = _vector_recall(*args, **nowhere)
    assert refused.returncode == 1 and "http://127.0.0.1:9/v1/embeddings stopped answering" in refused.stderr
    # A configured reranker is not built either: the index alone is measured, so nothing is warmed up.
    done = _vector_recall(*args, "--stand-in-embedder", **nowhere, RERANKER_PROVIDER="ollama",
                          RERANKER_BASE_URL="http://127.0.0.1:9/v1", LOG_LEVEL="INFO")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "reranker=none" in done.stderr and "warming up" not in done.stderr, done.stderr[-2000:]
    row = json.loads((tmp_path / "recall.json").read_text())["rows"][0]
    assert row["queries"] == 4 and row["mean"] >= 0.95, row


def _vector_recall(*args: str, **settings: str) -> subprocess.CompletedProcess:
    """`python -m bench vector-recall` in its own process, as a user runs it: it starts the stored graph's database."""
    env = {**os.environ, "DOTENV_PATH": os.devnull, "EMBEDDING_PROVIDER": "local", "LOG_LEVEL": "WARNING", **settings}
    return subprocess.run([sys.executable, "-m", "bench", "vector-recall", *args],
                          cwd=Path(__file__).resolve().parents[1], env=env, capture_output=True, text=True, timeout=600)


def test_a_kept_graph_gives_the_index_recall_for_each_over_ask(tmp_path):
    data = tmp_path / "data"
    result, _ = _scale(tmp_path, "--sizes", "60", "--sensors", "6", "--searches", "1", "--data-dir", str(data))
    assert result.exit_code == 0, result.output

    done = _vector_recall("--data-dir", str(data), "--overfetch", "1,8", "--queries", "10",
                          "--output", str(tmp_path / "recall.json"))

    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads((tmp_path / "recall.json").read_text())["rows"]
    assert [(row["overfetch"], row["k"], row["queries"]) for row in rows] == [(1, 20, 10), (8, 20, 10)]
    for row in rows:
        assert 0 <= row["min"] <= row["mean"] <= 1 and 0 < row["index_search_ms_p50"] <= row["index_search_ms_p95"]
    # Asked for 8 hits per fact wanted, the index finds nearly all of the exact nearest 20 of 60 facts.
    assert rows[1]["mean"] >= 0.95 and rows[1]["mean"] >= rows[0]["mean"], rows
    assert f"| 8 | {rows[1]['mean']:.4f} ({rows[1]['min']:.2f}) |" in done.stdout
    assert rows[0]["index_score_error"] is None and "exact score" not in done.stdout  # FalkorDB's are exact


def test_vector_recall_on_a_graph_that_is_not_there_says_so_in_one_line(tmp_path):
    data = tmp_path / "data"
    assert _scale(tmp_path, "--sizes", "5", "--searches", "1", "--data-dir", str(data))[0].exit_code == 0

    done = _vector_recall("--data-dir", str(data), "--graph-id", "elsewhere", "--queries", "2")

    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "Error: graph 'elsewhere' is not stored under" in done.stderr


def test_scale_grows_its_graph_only_in_an_empty_folder(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "something").write_text("kept")
    result, _ = _scale(tmp_path, "--sizes", "5", "--data-dir", str(tmp_path / "data"))
    assert result.exit_code == 2 and "is not empty" in result.output
    assert (tmp_path / "data" / "something").read_text() == "kept"


def _first_stage_time(*args: str, **settings: str) -> subprocess.CompletedProcess:
    """`python -m bench first-stage-time` in its own process, as a user runs it: it starts its own database."""
    env = {**os.environ, "DOTENV_PATH": os.devnull, "LOG_LEVEL": "WARNING", **settings}
    return subprocess.run([sys.executable, "-m", "bench", "first-stage-time", *args],
                          cwd=Path(__file__).resolve().parents[1], env=env, capture_output=True, text=True, timeout=600)


def test_first_stage_time_fills_its_graph_once_and_times_both_keyword_halves(tmp_path):
    data, out = tmp_path / "data", tmp_path / "time.json"

    done = _first_stage_time("--facts", "300", "--queries", "6", "--data-dir", str(data), "--output", str(out))

    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.read_text())
    assert (report["facts"], report["written"], report["queries"]) == (300, 300, 6)
    assert report["keyword_halves_agree"] == 6 and report["fewest_facts_answered"] == 10
    assert report["fewest_keyword_hits"] == 20  # each half asked for twice the facts wanted, and found them
    assert report["backend"] == "falkordb" and 0 < report["database_rss_mib"] <= report["database_peak_rss_mib"]
    for name in ("first_stage", "keyword_kept_checked", "keyword_every_hit_checked", "index_half"):
        assert 0 < report["ms"][name]["p50_ms"] <= report["ms"][name]["p95_ms"], report["ms"]
    assert f"| keyword half, the kept hits checked | {report['ms']['keyword_kept_checked']['p50_ms']} ms |" in done.stdout

    # A larger size writes only the facts the kept graph lacks.
    done = _first_stage_time("--facts", "450", "--queries", "1", "--data-dir", str(data), "--output", str(out))

    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.read_text())
    assert (report["facts"], report["written"], report["queries"]) == (450, 150, 1)  # fewer queries than warm-ups
    assert report["fewest_facts_answered"] == 10


def test_first_stage_time_on_neo4j_writes_into_its_own_local_neo4j(tmp_path):
    # A configured server is never written to: the command starts its own Neo4j under --data-dir.
    data, out = tmp_path / "data", tmp_path / "time.json"

    done = _first_stage_time("--facts", "120", "--queries", "2", "--data-dir", str(data), "--output", str(out),
                             GRAPH_BACKEND="neo4j", NEO4J_URI="bolt://127.0.0.1:9")

    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.read_text())
    assert (report["backend"], report["facts"], report["written"], report["queries"]) == ("neo4j", 120, 120, 2)
    assert (data / "neo4j").is_dir()
    # The local Neo4j's JVM, not a stray small process.
    assert 100 < report["database_rss_mib"] <= report["database_peak_rss_mib"], report
    # One keyword half on Neo4j (Graphiti's own query); it finds the hyphenated graph's hits in the shared index.
    assert set(report["ms"]) == {"first_stage", "keyword_kept_checked", "index_half"}
    assert report["keyword_halves_agree"] is None and "both keyword halves" not in done.stdout
    assert report["fewest_keyword_hits"] == 20 and report["fewest_facts_answered"] == 10
    assert f"| keyword half (Graphiti's own query) | {report['ms']['keyword_kept_checked']['p50_ms']} ms |" in done.stdout
