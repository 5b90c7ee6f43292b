"""`python -m bench report`: reports written by the agent on a graph, scored against a hand-written gold set
(bench/report_bench.py)."""

from __future__ import annotations

from pathlib import Path

import click
from flask import current_app
from flask.cli import with_appcontext

from bench.rerankers import with_model_options
from bench.cli import (
    DEFAULT_OUTPUT_ROOT, ask, bench_group, command_line, model_options, require_bench_extras, require_embedder,
    require_judge, require_llm, resumable, run_facts,
)


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
    from bench.report_bench import (
        ReportBenchArgs, UnknownSettingError, describe_settings, markdown_table, reranker_settings, run_report_bench,
        with_settings,
    )
    from bench.report_sets import load_set, select

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
        only_ids = [part.strip() for part in only.split(",")] if only else None
        select(requirement_set.requirements, only_ids)  # an unknown id is refused before anything runs
    except (UnknownSettingError, ValueError) as error:
        raise click.BadParameter(str(error)) from None
    folder = output or DEFAULT_OUTPUT_ROOT / f"{requirement_set.name}-report"
    args = ReportBenchArgs(
        # the settings every report shares (--llm-model, --set) are the run's, as its results header says
        requirement_set=requirement_set, output=folder.resolve(), config=with_settings(config, common),
        settings=bench_settings, only=only_ids,
        max_requirements=max_queries, search_limit=search_limit, section_max_tokens=section_max_tokens,
        tool_text_chars=tool_text_chars,
        **({"planned_calls": planned_calls} if planned_calls is not None else {}),
        report_only=report_only, yes=yes, confirm_above=confirm_above,
        command=command_line(), extra=run_facts(),
    )
    if not report_only:
        run_config = args.config
        require_llm(run_config.llm_base_url, "--llm-base-url")
        require_embedder(run_config)
        if any(setting.reranking for setting in bench_settings):
            require_judge(run_config.reranker_base_url)
    click.echo("Settings:")
    for line in describe_settings(bench_settings):
        click.echo(line)
    with resumable(args.output, "reports"):
        results = run_report_bench(args, echo=click.echo, ask=ask)
    click.echo(markdown_table(results))
    click.echo(f"Wrote {args.output}/results.json and results.md")


def _setting(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise click.BadParameter(f"{text!r} is not KEY=VALUE", param_hint="--set")
    return name.strip().upper(), value.strip()

