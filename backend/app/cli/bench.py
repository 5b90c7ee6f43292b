"""`flask bench rerank`, `flask bench graph` and `flask bench report`: reproducible quality and cost benchmarks.

All print the estimated model calls before any call and refuse (without --yes) above
--confirm-above; on a terminal they ask instead. Ctrl-C keeps every finished query; the same
command resumes. See app/bench/ for what is measured and how.
"""

from __future__ import annotations

import importlib
import json
import os
import platform
import shlex
import sys
from datetime import datetime, timezone
from pathlib import Path

import click
from flask import current_app
from flask.cli import with_appcontext

from app.bench.datasets import DatasetError
from app.bench.estimate import DEFAULT_CONFIRM_ABOVE, ConfirmationRefused, TokenPrices
from app.bench.import_search import ImportSearchOptions, run as run_import_search
from app.bench.rerankers import parse_strategies, with_model_options
from app.bench.scale import DEFAULT_SIZES, ScaleOptions, markdown_table as scale_table, run as run_scale
from app.config import REPO_ROOT, RERANKER_SCORE_MODES

DEFAULT_OUTPUT_ROOT = REPO_ROOT / "bench-out"


# What the `bench` extra of pyproject.toml adds (the production image leaves it out): trec_eval's
# measures, and the plot each quality benchmark writes at its end.
BENCH_EXTRAS = {"ir_measures": "ir-measures", "matplotlib": "matplotlib"}


def require_bench_extras(command: str) -> None:
    """Refuse up front, with the install line, when the bench extra is missing: otherwise the
    command fails on an ImportError, or only at its end when the plot is drawn."""
    missing = []
    for module, package in BENCH_EXTRAS.items():
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(package)
    if missing:
        raise click.ClickException(
            f"`flask bench {command}` needs {', '.join(missing)} (the bench extra): "
            "pip install -e 'backend[bench]', or `make venv`, which installs it")


def run_facts() -> dict:
    """Where and when a result was measured, for the report."""
    return {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}, "
                   f"Python {platform.python_version()}",
    }


def command_line() -> str:
    return "flask --app app bench " + " ".join(shlex.quote(arg) for arg in sys.argv[sys.argv.index("bench") + 1:]) \
        if "bench" in sys.argv else ""


def model_options(function):
    """Options shared by both benchmarks: which judge model, how hard to push it, the cost gate."""
    options = [
        click.option("--base-url", default=None, help="judge server (default: RERANKER_BASE_URL)"),
        click.option("--model", default=None, help="judge model (default: RERANKER_MODEL)"),
        click.option("--score-mode", type=click.Choice(RERANKER_SCORE_MODES), default=None,
                     help="default score mode (default: RERANKER_SCORE_MODE)"),
        click.option("--concurrency", type=click.IntRange(min=1), default=None,
                     help="model requests in flight per query (default: RERANKER_MAX_PARALLEL)"),
        click.option("--timeout-s", type=click.FloatRange(min=0.01), default=None,
                     help="per-request timeout (default: RERANKER_TIMEOUT_S)"),
        click.option("--deadline-s", type=click.FloatRange(min=0.01), default=None,
                     help="per rank call deadline (default: RERANKER_DEADLINE_S)"),
        click.option("--max-queries", type=click.IntRange(min=1), default=None, help="first N queries"),
        click.option("--output", type=click.Path(file_okay=False, path_type=Path), default=None,
                     help="results folder (default: bench-out/<dataset>-<benchmark>)"),
        click.option("--yes", is_flag=True, help="run even when the estimate is above --confirm-above"),
        click.option("--report-only", is_flag=True,
                     help="no model call: write the reports from the stored results of these arguments"),
        click.option("--confirm-above", type=click.IntRange(min=0), default=DEFAULT_CONFIRM_ABOVE,
                     show_default=True, help="model calls allowed without --yes"),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def ask(question: str) -> bool:
    return click.confirm(question, default=False, err=True)


@click.group("bench")
def bench_group() -> None:
    """Benchmarks of reranking quality and cost (see `flask bench rerank --help`)."""


@bench_group.command("rerank")
@click.option("--dataset", required=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="folder with queries.tsv, qrels.txt, candidates*.jsonl")
@click.option("--candidates", type=click.IntRange(min=1), default=20, show_default=True,
              help="first-stage candidates reranked per query")
@click.option("--strategies", default="original,pointwise", show_default=True,
              help="comma list of original and strategy[:score_mode], e.g. original,pointwise:logprobs,pointwise:json")
@click.option("--seed", type=int, default=0, show_default=True, help="seed for --shuffle")
@click.option("--shuffle", is_flag=True, help="shuffle each query's candidates first (order sensitivity)")
@click.option("--no-repeat-check", is_flag=True, help="skip re-ranking each pointwise query from the cache")
@click.option("--price-prompt", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="price per million prompt tokens, for cost/q (0: a local model)")
@click.option("--price-completion", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="price per million completion tokens, for cost/q (0: a local model)")
@model_options
@with_appcontext
def rerank_command(dataset, candidates, strategies, seed, shuffle, no_repeat_check, price_prompt, price_completion,
                   base_url, model, score_mode, concurrency, timeout_s, deadline_s, max_queries, output, yes,
                   report_only, confirm_above) -> None:
    """Rerank first-stage candidates with each strategy; nDCG@10, MRR@10, MAP, R@10, latency, cost."""
    require_bench_extras("rerank")
    from app.bench.runner import BenchInterrupted, RerankBenchArgs, run_rerank_bench

    config = current_app.config["APP_CONFIG"]
    model_config = with_model_options(config, base_url=base_url, model=model, concurrency=concurrency,
                                      timeout_s=timeout_s, deadline_s=deadline_s)
    try:
        specs = parse_strategies(strategies, score_mode or config.reranker_score_mode)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--strategies") from None
    args = RerankBenchArgs(
        dataset=dataset.resolve(), output=(output or DEFAULT_OUTPUT_ROOT / f"{dataset.resolve().name}-rerank"),
        strategies=specs,
        max_queries=max_queries, candidates=candidates, seed=seed, shuffle=shuffle, yes=yes,
        confirm_above=confirm_above, repeat_check=not no_repeat_check, config=model_config, report_only=report_only,
        prices=TokenPrices(price_prompt, price_completion), command=command_line(), extra=run_facts(),
    )
    try:
        results = run_rerank_bench(args, echo=click.echo, ask=ask)
    except (ConfirmationRefused, DatasetError) as error:
        raise click.ClickException(str(error)) from None
    except BenchInterrupted:
        click.echo(f"Interrupted: finished queries are kept in {args.output}; run the same command to resume.",
                   err=True)
        sys.exit(130)
    _print_summary(results, args.output)


@bench_group.command("graph")
@click.option("--dataset", required=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="BEIR-style folder with corpus.jsonl, queries.tsv, qrels.txt, candidates*.jsonl (SciFact), "
                   "or a TREC candidate folder without corpus.jsonl (DL19: one fact per candidate passage)")
@click.option("--strategy", default="pointwise", show_default=True,
              help="the reranker when on: strategy[:score_mode], e.g. pointwise:logprobs")
@click.option("--limit", type=click.IntRange(min=1), default=10, show_default=True, help="facts per search")
@click.option("--candidates-factor", type=click.IntRange(min=1), default=None,
              help="first-stage facts per result when reranking (default: RERANKER_CANDIDATES)")
@click.option("--corpus", type=click.Choice(["candidates", "all"]), default="candidates", show_default=True,
              help="abstracts to import: the claims' first-stage candidates, or the whole corpus")
@click.option("--queries", "query_range", default=None, metavar="FIRST-LAST",
              help="queries by position in the dataset, 1-based and inclusive (e.g. 21-43: DL19 development)")
@click.option("--replay", "replays", default="none,rrf,linear", show_default=True,
              help="fusions replayed from the stored judge scores, no model call: METHOD[:WEIGHT][@BUDGET_S],... "
                   "(weight default RERANKER_FUSION_WEIGHT; @30: only the scores that had arrived after 30 s)")
@click.option("--budgets", default="", help="RERANKER_BUDGET_S values (seconds, comma list) replayed with the "
                                            "configured fusion from when each judge score arrived")
@model_options
@with_appcontext
def graph_command(dataset, strategy, limit, candidates_factor, corpus, query_range, replays, budgets, base_url, model,
                  score_mode, concurrency, timeout_s, deadline_s, max_queries, output, yes, report_only,
                  confirm_above) -> None:
    """Import SciFact abstracts or TREC passages as facts (no LLM) and search each query with the reranker off
    and on; fusions, budgets and the embedder's cosine are replayed from the stored scores."""
    require_bench_extras("graph")
    from app.bench.graph_bench import GraphBenchArgs, run_graph_bench
    from app.bench.replay import parse_replays
    from app.bench.runner import BenchInterrupted

    config = current_app.config["APP_CONFIG"]
    model_config = with_model_options(config, base_url=base_url, model=model, concurrency=concurrency,
                                      timeout_s=timeout_s, deadline_s=deadline_s)
    try:
        specs = parse_strategies(strategy, score_mode or config.reranker_score_mode)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--strategy") from None
    if len(specs) != 1 or not specs[0].uses_model:
        raise click.BadParameter("give exactly one model strategy", param_hint="--strategy")
    try:
        replay_list = parse_replays(replays, config.reranker_fusion_weight)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--replay") from None
    args = GraphBenchArgs(
        dataset=dataset.resolve(), output=(output or DEFAULT_OUTPUT_ROOT / f"{dataset.resolve().name}-graph"),
        strategy=specs[0], config=model_config, max_queries=max_queries or (None if query_range else 50), limit=limit,
        candidates_factor=candidates_factor, corpus=corpus, query_range=_query_range(query_range),
        replays=replay_list, budgets=_seconds_list(budgets), report_only=report_only, yes=yes,
        confirm_above=confirm_above, command=command_line(), extra=run_facts(),
    )
    try:
        results = run_graph_bench(args, echo=click.echo, ask=ask)
    except (ConfirmationRefused, DatasetError) as error:
        raise click.ClickException(str(error)) from None
    except BenchInterrupted:
        click.echo(f"Interrupted: finished claims are kept in {args.output}; run the same command to resume.",
                   err=True)
        sys.exit(130)
    _print_summary(results, args.output)


@bench_group.command("report")
@click.option("--graph", "graph_name", type=click.Choice(["sample", "scifact"]), default="sample", show_default=True,
              help="the shipped sample graph, or SciFact abstracts read from --dataset")
@click.option("--dataset", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="BEIR SciFact folder (for --graph scifact)")
@click.option("--requirements-file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="requirement set with gold points and distractors (default: the shipped one for --graph)")
@click.option("--only", default=None, help="comma list of requirement ids to run")
@click.option("--rerankers", default="off,on", show_default=True, help="comma list of off and on")
@click.option("--strategy", default="pointwise", show_default=True,
              help="the reranker when on: strategy[:score_mode], e.g. pointwise:logprobs")
@click.option("--fusion", "fusions", multiple=True,
              help="one more 'on' run with RERANKER_FUSION=METHOD (and RERANKER_FUSION_WEIGHT), as METHOD[:WEIGHT]")
@click.option("--set", "settings", multiple=True, help="KEY=VALUE setting for every run, e.g. RERANKER_CANDIDATES=2")
@click.option("--llm-base-url", default=None, help="the report agent's model server (default: LLM_BASE_URL)")
@click.option("--llm-model", default=None, help="the report agent's model (default: LLM_MODEL_NAME)")
@click.option("--max-tool-calls", type=click.IntRange(min=1), default=None,
              help="tool calls per section (default: REPORT_AGENT_MAX_TOOL_CALLS)")
@click.option("--search-limit", type=click.IntRange(min=1, max=50), default=10, show_default=True,
              help="facts per search the agent may ask for")
@click.option("--section-max-tokens", type=click.IntRange(min=50), default=1200, show_default=True,
              help="longest answer the agent's model may give per turn")
@click.option("--tool-text-chars", type=click.IntRange(min=500), default=3000, show_default=True,
              help="size of each tool result the agent's model reads")
@click.option("--planned-calls", type=click.IntRange(min=0, max=5), default=None,
              help="tool calls the agent makes itself as a section opens (0: the model chooses every call; "
                   "default: the agent's own, 3)")
@model_options
@with_appcontext
def report_command(graph_name, dataset, requirements_file, only, rerankers, strategy, fusions, settings, llm_base_url,
                   llm_model, max_tool_calls, search_limit, section_max_tokens, tool_text_chars, planned_calls,
                   base_url, model, score_mode, concurrency, timeout_s, deadline_s, max_queries, output, yes,
                   report_only, confirm_above) -> None:
    """Write reports with the agent, reranker off and on: gold recall, distractors, tools, calls, time."""
    require_bench_extras("report")
    from app.bench.report_bench import (
        ReportBenchArgs, UnknownSettingError, describe_settings, markdown_table, reranker_settings, run_report_bench,
        with_settings,
    )
    from app.bench.report_sets import load_set

    config = with_model_options(current_app.config["APP_CONFIG"], base_url=base_url, model=model,
                                concurrency=concurrency, timeout_s=timeout_s, deadline_s=deadline_s)
    agent = {"LLM_BASE_URL": llm_base_url, "LLM_MODEL_NAME": llm_model, "REPORT_AGENT_MAX_TOOL_CALLS": max_tool_calls}
    common = [(name, str(value)) for name, value in agent.items() if value is not None]
    common += [_setting(text) for text in settings]
    name, _, mode = strategy.partition(":")
    fusion_runs = [(method, weight or None) for method, _, weight in (text.partition(":") for text in fusions)]
    try:
        bench_settings = reranker_settings([part.strip() for part in rerankers.split(",") if part.strip()], name,
                                           mode or score_mode or config.reranker_score_mode, fusion_runs, common)
        for setting in bench_settings:
            with_settings(config, setting.overrides)  # every name and value is checked before anything runs
        requirement_set = load_set(graph_name, requirements_file, dataset)
    except (UnknownSettingError, ValueError) as error:
        raise click.BadParameter(str(error)) from None
    folder = output or DEFAULT_OUTPUT_ROOT / f"{requirement_set.name}-report"
    args = ReportBenchArgs(
        # the settings every report shares (--llm-model, --set) are the run's, as its results header says
        requirement_set=requirement_set, output=folder.resolve(), config=with_settings(config, common),
        settings=bench_settings, only=[part.strip() for part in only.split(",")] if only else None,
        max_requirements=max_queries, search_limit=search_limit, section_max_tokens=section_max_tokens,
        tool_text_chars=tool_text_chars,
        **({"planned_calls": planned_calls} if planned_calls is not None else {}),
        report_only=report_only, yes=yes, confirm_above=confirm_above,
        command=command_line(), extra=run_facts(),
    )
    click.echo("Settings:")
    for line in describe_settings(bench_settings):
        click.echo(line)
    try:
        results = run_report_bench(args, echo=click.echo, ask=ask)
    except (ConfirmationRefused, DatasetError, ValueError) as error:
        raise click.ClickException(str(error)) from None
    except KeyboardInterrupt:
        click.echo(f"Interrupted: finished reports are kept in {args.output}; run the same command to resume.",
                   err=True)
        sys.exit(130)
    click.echo(markdown_table(results))
    click.echo(f"Wrote {args.output}/results.json and results.md")


def _query_range(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    first, sep, last = text.partition("-")
    try:
        bounds = (int(first), int(last if sep else first))
    except ValueError:
        raise click.BadParameter(f"{text!r} is not FIRST-LAST, e.g. 21-43", param_hint="--queries") from None
    if not 1 <= bounds[0] <= bounds[1]:
        raise click.BadParameter(f"{text!r}: positions start at 1 and FIRST <= LAST", param_hint="--queries")
    return bounds


def _seconds_list(text: str) -> list[float]:
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a comma list of seconds", param_hint="--budgets") from None
    if any(value <= 0 for value in values):
        raise click.BadParameter("budgets are seconds > 0", param_hint="--budgets")
    return values


def _setting(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise click.BadParameter(f"{text!r} is not KEY=VALUE", param_hint="--set")
    return name.strip().upper(), value.strip()


def _print_summary(results: dict, output: Path) -> None:
    from app.bench.report import markdown_table

    click.echo(markdown_table(results))
    click.echo(f"Wrote {output}/results.json, results.md, quality_latency.png")


@bench_group.command("import-search")
@click.option("--facts", type=click.IntRange(min=1, max=5000), default=3000, show_default=True,
              help="facts in the large import (new entities each)")
@click.option("--base-facts", type=click.IntRange(min=1), default=300, show_default=True,
              help="facts in the graph before the import")
@click.option("--interval-s", type=click.FloatRange(min=0.05), default=0.5, show_default=True,
              help="a search is sent this often during the import")
@click.option("--search-delay-s", type=click.FloatRange(min=0), default=3.0, show_default=True,
              help="searches start this long after the import was sent")
@click.option("--target-p95-s", type=click.FloatRange(min=0), default=2.0, show_default=True,
              help="exit 1 when the search p95 during the import is above this")
def import_search_command(facts, base_facts, interval_s, search_delay_s, target_p95_s):
    """Search latency of one graph while a large import into it runs (served app, embedded FalkorDB)."""
    options = ImportSearchOptions(facts=facts, base_facts=base_facts, interval_s=interval_s,
                                  search_delay_s=search_delay_s)
    click.echo(f"Serving the API; importing {base_facts} facts, then {facts} more with a search every {interval_s} s...")
    report = run_import_search(options)
    imported, during, corrected = report["import"], report["during_import"], report["during_import_corrected"]
    for label, figures in (("baseline", report["baseline"]), ("during import", during),
                           ("  corrected", corrected)):
        click.echo(f"{label + ':':15}{figures['requests']} searches, p50 {figures['p50_ms']} ms, "
                   f"p95 {figures['p95_ms']} ms, max {figures['max_ms']} ms")
    click.echo(f"errors:        {during['errors']} {during['first_errors'] or ''}")
    click.echo(f"import:        HTTP {imported.get('status')} in {imported.get('seconds')} s: {imported.get('body')}")
    click.echo(f"load average:  {' '.join(f'{value:.1f}' for value in os.getloadavg())} on {os.cpu_count()} cores")
    failed = not during["requests"] or during["errors"] or corrected["p95_ms"] > target_p95_s * 1000 \
        or imported.get("status") != 201
    click.echo(f"corrected search p95 during the import {'above' if failed else 'within'} the {target_p95_s} s target")
    if failed:
        sys.exit(1)


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a comma list of fact counts", param_hint="--sizes") from None
    if not sizes or sizes[0] < 1 or any(later <= earlier for earlier, later in zip(sizes, sizes[1:])):
        raise click.BadParameter("sizes are fact counts >= 1, each larger than the one before", param_hint="--sizes")
    return sizes


@bench_group.command("scale")
@click.option("--sizes", default=",".join(map(str, DEFAULT_SIZES)), show_default=True,
              help="facts in the one graph at each step (comma list, growing)")
@click.option("--batch-size", type=click.IntRange(min=1, max=5000), default=1000, show_default=True,
              help="facts per import request")
@click.option("--sensors", type=click.IntRange(min=0), default=1000, show_default=True,
              help="sensors the facts cycle through (0: a new sensor entity per fact)")
@click.option("--searches", type=click.IntRange(min=1), default=20, show_default=True,
              help="first-stage searches (reranker off) at each size")
@click.option("--reranked-searches", type=click.IntRange(min=0), default=3, show_default=True,
              help="reranked searches at each size (with --base-url and --model)")
@click.option("--limit", type=click.IntRange(min=1), default=10, show_default=True, help="facts per search")
@click.option("--base-url", default=None, help="judge server for the reranked searches (none: they are skipped)")
@click.option("--model", default=None, help="judge model for the reranked searches")
@click.option("--output", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="results folder (default: bench-out/scale)")
def scale_command(sizes, batch_size, sensors, searches, reranked_searches, limit, base_url, model, output):
    """Grow one graph through the sizes (served app, its own database per GRAPH_BACKEND, local embedder): import
    throughput, first-stage and reranked search p50/p95, app and database memory at each size."""
    if bool(base_url) != bool(model):
        raise click.BadParameter("give both --base-url and --model, or neither", param_hint="--base-url/--model")
    options = ScaleOptions(sizes=_sizes(sizes), batch_size=batch_size, sensors=sensors or None,
                           searches=searches, reranked_searches=reranked_searches, limit=limit, judge_base_url=base_url,
                           judge_model=model)
    if not options.has_judge:
        click.echo("No judge given (--base-url and --model): reranked searches are skipped.")
    folder = (output or DEFAULT_OUTPUT_ROOT / "scale").resolve()
    facts = {**run_facts(), "command": command_line(),
             "load_average_at_start": [round(value, 1) for value in os.getloadavg()]}
    report = {**run_scale(options, log_dir=folder / "logs", echo=click.echo), **facts,
              "load_average_at_end": [round(value, 1) for value in os.getloadavg()]}
    table = scale_table(report)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    (folder / "results.md").write_text(
        f"{facts['command']}\n\n{facts['date']}, {facts['machine']}, load average "
        f"{report['load_average_at_start']} -> {report['load_average_at_end']}\n\n{table}\n", encoding="utf-8")
    click.echo(table)
    click.echo(f"Wrote {folder}/results.json and results.md")


commands = [bench_group]
