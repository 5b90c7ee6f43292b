"""Writes a benchmark's results.json, results.md (a markdown table) and quality_latency.png."""

from __future__ import annotations

import json
from pathlib import Path

COLUMNS = (
    ("nDCG@10", "ndcg@10", "{:.4f}"),
    ("MRR@10", "mrr@10", "{:.4f}"),
    ("MAP", "map", "{:.4f}"),
    ("R@10", "recall@10", "{:.4f}"),
    ("p50 s", "latency_p50_s", "{:.2f}"),
    ("p95 s", "latency_p95_s", "{:.2f}"),
    ("calls/q", "calls_per_query", "{:.1f}"),
    ("prompt tok/q", "prompt_tokens_per_query", "{:.0f}"),
    ("compl. tok/q", "completion_tokens_per_query", "{:.0f}"),
    ("cost/q", "cost_per_query", "{:.4f}"),
    ("emb. calls/q", "embedding_calls_per_query", "{:.1f}"),
    ("invalid", "invalid_output_rate", "{:.1%}"),
    ("fallbacks", "fallbacks", "{}"),
    ("unit fallbacks", "unit_fallbacks", "{}"),
    ("repairs/q", "repairs_per_query", "{:.1f}"),
    ("cache hits", "cache_hits", "{}"),
    ("queries", "queries", "{}"),
)


def _cell(row: dict, key: str, pattern: str) -> str:
    value = row.get(key)
    return "-" if value is None else pattern.format(value)


def markdown_table(results: dict) -> str:
    header = "| strategy | " + " | ".join(name for name, _, _ in COLUMNS) + " |"
    rule = "|---|" + "---:|" * len(COLUMNS)
    rows = [
        f"| {label} | " + " | ".join(_cell(row, key, pattern) for _, key, pattern in COLUMNS) + " |"
        for label, row in results["strategies"].items()
    ]
    return "\n".join([header, rule, *rows])


def markdown_report(results: dict) -> str:
    facts = [f"- {key}: {results[key]}" for key in
             ("benchmark", "dataset", "model", "base_url", "candidates", "shuffle", "seed", "concurrency",
              "relevance_level", "token_prices_per_mtok", "query_range", "candidates_per_query", "fusion",
              "fusion_weight", "budget_s", "replayed_queries", "replay_mismatches", "date", "machine", "command")
             if key in results]
    notes = []
    for label, row in results["strategies"].items():
        extras = [f"{key}={row[key]}" for key in
                  ("overhead_share", "repeat_latency_p50_ms", "repeat_latency_max_ms", "prompt_tokens_per_call",
                   "search_p50_s", "search_p95_s", "first_stage_p50_ms", "rerank_p50_ms", "judged_per_query",
                   "evaluated_tokens_per_request", "server_prompt_tok_s", "wall_ms_per_request", "ratio_to_prompt_limit")
                  if key in row]
        if extras:
            notes.append(f"- {label}: " + ", ".join(extras))
    parts = ["# Benchmark results", "", *facts, "", markdown_table(results), ""]
    if notes:
        parts += ["More figures:", "", *notes, ""]
    return "\n".join(parts)


def plot_quality_latency(results: dict, path: Path) -> None:
    """nDCG@10 against median latency per strategy; the bar reaches the p95 latency."""
    import matplotlib

    matplotlib.use("Agg")  # no display on servers
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6.4, 4.2), dpi=100)
    for label, row in results["strategies"].items():
        p50, p95, quality = row.get("latency_p50_s", 0.0), row.get("latency_p95_s", 0.0), row.get("ndcg@10", 0.0)
        axes.errorbar([p50], [quality], xerr=[[0.0], [max(0.0, p95 - p50)]], fmt="o", capsize=3)
        axes.annotate(label, (p50, quality), textcoords="offset points", xytext=(6, 6), fontsize=8)
    axes.set_xlabel("latency per query, s (dot: p50, bar to p95)")
    axes.set_ylabel("nDCG@10")
    title = f"{results.get('dataset', '')} - {results.get('model', '')}"
    axes.set_title(title, fontsize=9)
    axes.grid(True, alpha=0.3)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def write_reports(results: dict, folder: Path) -> dict[str, Path]:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"json": folder / "results.json", "markdown": folder / "results.md", "plot": folder / "quality_latency.png"}
    paths["json"].write_text(json.dumps(results, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    paths["markdown"].write_text(markdown_report(results), encoding="utf-8")
    plot_quality_latency(results, paths["plot"])
    return paths


def combine(results_list: list[dict]) -> dict[str, dict]:
    """Several runs' results by dataset, labels prefixed with the model: one table and panel each."""
    by_dataset: dict[str, dict] = {}
    for results in results_list:
        name = f"{results['dataset']} ({results.get('benchmark', 'rerank')})"
        merged = by_dataset.setdefault(name, {**results, "strategies": {}, "runs": []})
        merged["runs"].append(f"{results.get('model')}, {results.get('date')}: `{results.get('command')}`")
        for label, row in results["strategies"].items():
            # Baselines carry their query count: runs of different lengths must not share a row.
            key = (f"{label} ({row['queries']} queries)" if label in ("original", "reranker off")
                   else f"{results['model']} {label} ({row['queries']} queries)")
            merged["strategies"].setdefault(key, row)
    return by_dataset


def write_combined(results_list: list[dict], folder: Path) -> None:
    """RESULTS.md (a table per dataset) and one quality_latency.png with a panel per dataset."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    combined = combine(results_list)
    parts = ["# Benchmark results", ""]
    for name, results in combined.items():
        parts += [f"## {name}", "", f"- machine: {results.get('machine')}",
                  *[f"- {run}" for run in results["runs"]], "", markdown_table(results), ""]
    (folder / "RESULTS.md").write_text("\n".join(parts), encoding="utf-8")

    figure, axes_list = plt.subplots(1, len(combined), figsize=(5.2 * len(combined), 4.0), dpi=90, squeeze=False)
    for axes, (name, results) in zip(axes_list[0], combined.items()):
        for label, row in results["strategies"].items():
            p50, p95 = row.get("latency_p50_s", 0.0), row.get("latency_p95_s", 0.0)
            axes.errorbar([p50], [row.get("ndcg@10", 0.0)], xerr=[[0.0], [max(0.0, p95 - p50)]], fmt="o", capsize=3)
            axes.annotate(label, (p50, row.get("ndcg@10", 0.0)), textcoords="offset points", xytext=(5, 5), fontsize=7)
        axes.set_title(name, fontsize=9)
        axes.set_xlabel("latency per query, s (dot p50, bar to p95)", fontsize=8)
        axes.set_ylabel("nDCG@10", fontsize=8)
        axes.grid(True, alpha=0.3)
    figure.tight_layout()
    figure.savefig(folder / "quality_latency.png")
    plt.close(figure)
