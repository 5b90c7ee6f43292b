"""`python -m bench report`: whole reports, written by the report agent over a graph, scored against
hand-written gold points and planted distractors (report_metrics.py, report_sets.py).

Each setting (reranker off, on, on with a fusion, ...) is a set of Config overrides named like the
environment variables (RERANKER_PROVIDER=none, RERANKER_FUSION=rrf, ...), applied through
`Config.from_env` so they are validated exactly like the app's own settings; a name this build does
not know fails before anything runs. Settings run one after another over the same imported graph:
the runtime is rebuilt between them (as in `bench graph`). Per report the record holds the gold
recall, distractors cited, claims removed for invented citations, tool calls by tool, repeated
queries, the agent's and the judge's model calls, and wall time; finished reports are stored at
once and a rerun of the same command resumes. Each report's files (report.md, steps.jsonl with what
the reranker moved per search) are kept under <output>/reports/<report_id>.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from bench.estimate import DEFAULT_CONFIRM_ABOVE, confirm_estimate, describe_estimate
from bench.graph_bench import ensure_imported
from bench.progress import ProgressBar
from bench.report_metrics import BenchRequirement, aggregate, score_citations, tool_calls_of
from bench.report_sets import RequirementSet, select
from bench.store import ResultStore, run_key
from bench.summary import counter_delta
from app.config import Config
from app.demo.sample_graph import ensure_sample_graph
from app.graph.runtime import GraphitiAdapter, reset_graphiti
from app.report.agent import MAX_SEARCH_LIMIT, PLANNED_CALLS, TOOL_TEXT_CHARS, ReportAgent
from app.report.prompts import OUTLINE_PROMPT, SECTION_PROMPT_TAIL
from app.report.store import new_report_id, now_iso, report_store
from app.report.tool_registry import TOOLS
from graphiti_llm_rerank import redact_url

logger = logging.getLogger(__name__)

OFF, ON = "off", "on"
# Upper bounds for the cost gate: a tool call makes at most this many agent-model calls (InsightForge's
# split, interviews of up to three entities) and searches at most this many times (InsightForge).
MODEL_CALLS_PER_TOOL = 3
SEARCHES_PER_TOOL = 3


class UnknownSettingError(ValueError):
    """A setting name this build's Config does not have."""


@dataclass(frozen=True)
class BenchSetting:
    label: str
    overrides: tuple[tuple[str, str], ...]  # (ENV_NAME, value), applied in order

    @property
    def reranking(self) -> bool:
        return dict(self.overrides).get("RERANKER_PROVIDER", "ollama") != "none"


def reranker_settings(rerankers: list[str], strategy: str, score_mode: str | None,
                      fusions: list[tuple[str, str | None]], common: list[tuple[str, str]]) -> list[BenchSetting]:
    """off / on, and one `on` per fusion, each with the common overrides first."""
    on = [("RERANKER_PROVIDER", "ollama"), ("RERANKER_STRATEGY", strategy)]
    on += [("RERANKER_SCORE_MODE", score_mode)] if score_mode else []
    label_on = f"reranker on ({strategy}{':' + score_mode if score_mode else ''})"
    settings = []
    for name in rerankers:
        if name == OFF:
            settings.append(BenchSetting("reranker off", tuple(common) + (("RERANKER_PROVIDER", "none"),)))
        elif name == ON:
            settings.append(BenchSetting(label_on, tuple(common + on)))
        else:
            raise ValueError(f"unknown reranker setting {name!r}; use off and/or on")
    for method, weight in fusions:
        extra = [("RERANKER_FUSION", method)] + ([("RERANKER_FUSION_WEIGHT", weight)] if weight else [])
        label = f"{label_on} + fusion {method}" + (f" {weight}" if weight else "")
        settings.append(BenchSetting(label, tuple(common + on + extra)))
    return settings


@contextmanager
def _environment(overrides: dict[str, str]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in overrides}
    os.environ.update(overrides)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def with_settings(config: Config, overrides: tuple[tuple[str, str], ...] | list[tuple[str, str]]) -> Config:
    """`config` with settings given by their environment names, parsed and validated by Config itself."""
    if not overrides:
        return config
    known = {item.name for item in fields(Config)}
    names = dict(overrides)
    missing = [name for name in names if name.lower() not in known]
    if missing:
        raise UnknownSettingError(f"this build has no setting {', '.join(missing)}")
    with _environment(names):
        parsed = Config.from_env()
    return replace(config, **{name.lower(): getattr(parsed, name.lower()) for name in names})


@dataclass
class ReportBenchArgs:
    requirement_set: RequirementSet
    output: Path
    config: Config  # the agent's model (LLM_*), the judge (RERANKER_*), data dir
    settings: list[BenchSetting]
    only: list[str] | None = None  # requirement ids; None: all
    max_requirements: int | None = None
    search_limit: int = MAX_SEARCH_LIMIT
    section_max_tokens: int = 1200
    tool_text_chars: int = TOOL_TEXT_CHARS
    planned_calls: int = PLANNED_CALLS
    report_only: bool = False
    yes: bool = False
    confirm_above: int = DEFAULT_CONFIRM_ABOVE
    command: str = ""
    extra: dict = field(default_factory=dict)


def chosen_requirements(args: ReportBenchArgs) -> list[BenchRequirement]:
    requirements = select(args.requirement_set.requirements, args.only)
    return requirements[: args.max_requirements] if args.max_requirements else requirements


def phase_config(args: ReportBenchArgs, setting: BenchSetting) -> Config:
    config = with_settings(args.config, setting.overrides)
    return replace(config, data_dir=(args.output / "graph-data").resolve(),
                   search_timeout_s=max(config.search_timeout_s, config.reranker_deadline_s + 60))


def graph_id_of(requirement_set: RequirementSet) -> str:
    digest = hashlib.sha256(json.dumps([str(f) for f in requirement_set.facts]).encode()).hexdigest()[:10]
    return f"reportbench_{requirement_set.graph}_{digest}"


def store_key(args: ReportBenchArgs, config: Config) -> str:
    """Everything that changes a report: the set, the setting, both models and the agent's knobs."""
    return run_key(
        set=hashlib.sha256(args.requirement_set.source_text.encode()).hexdigest()[:12],
        graph=graph_id_of(args.requirement_set),
        llm=(config.llm_model_name, redact_url(config.llm_base_url)),
        reranker=(config.reranker_provider, config.reranker_model, config.reranker_strategy,
                  config.reranker_score_mode, config.reranker_candidates, config.reranker_fusion,
                  config.reranker_fusion_weight),
        agent=(config.report_agent_max_tool_calls, args.search_limit, args.section_max_tokens, args.tool_text_chars,
               args.planned_calls, config.report_citation_floor, config.report_question_candidates,
               config.report_listed_facts, config.report_floor_without_names, config.report_added_facts_floor),
        prompts=hashlib.sha256((OUTLINE_PROMPT + SECTION_PROMPT_TAIL).encode()).hexdigest()[:8],
    )


def estimate_calls(requirement: BenchRequirement, config: Config, search_limit: int,
                   reranking: bool) -> tuple[int, int]:
    """(agent, judge) model calls at most for one report: every turn a tool call, every candidate judged."""
    turns = requirement.sections * config.report_agent_max_tool_calls
    agent = 1 + requirement.sections + turns * (1 + MODEL_CALLS_PER_TOOL)
    judge = turns * SEARCHES_PER_TOOL * search_limit * config.reranker_candidates
    judge += requirement.sections * config.report_question_candidates  # each section's own question, deeper
    return agent, judge if reranking else 0


def run_report_bench(args: ReportBenchArgs, echo: Callable[[str], None] = print,
                     ask: Callable[[str], bool] | None = None, stdin_is_tty: bool | None = None) -> dict:
    requirements = chosen_requirements(args)
    configs = {setting.label: phase_config(args, setting) for setting in args.settings}
    stores = {setting.label: ResultStore(args.output, setting.label, store_key(args, configs[setting.label]))
              for setting in args.settings}
    pending = {label: [r for r in requirements if r.id not in store.done] for label, store in stores.items()}
    estimate = {}
    for setting in args.settings:
        calls = [estimate_calls(r, configs[setting.label], args.search_limit, setting.reranking)
                 for r in pending[setting.label]]
        estimate[setting.label] = (sum(a + j for a, j in calls), len(pending[setting.label]),
                                   len(requirements) - len(pending[setting.label]))
    echo(f"Graph: {args.requirement_set.name}, {len(args.requirement_set.facts)} facts; "
         f"{len(requirements)} requirement(s) x {len(args.settings)} setting(s)")
    for line in describe_estimate(estimate):
        echo(line.replace("Estimated model calls", "Model calls at most (agent + judge)"))
    if not args.report_only:
        confirm_estimate(sum(calls for calls, _, _ in estimate.values()), threshold=args.confirm_above,
                         yes=args.yes, ask=ask, stdin_is_tty=stdin_is_tty)
        _run_pending(args, pending, configs, stores, echo)
    results = build_results(args, requirements, stores)
    write_results(results, args.output)
    return results


def _run_pending(args, pending, configs, stores, echo) -> None:
    """Requirement by requirement, every setting in turn: an interrupted run leaves all settings with
    the same finished requirements, and a slow spell of a shared machine hits them alike."""
    steps = sum(len(items) for items in pending.values())
    progress = ProgressBar(steps, steps)
    graph_id = graph_id_of(args.requirement_set)
    order = list(dict.fromkeys(r.id for items in pending.values() for r in items))
    try:
        for requirement_id in order:
            for setting in args.settings:
                requirement = next((r for r in pending[setting.label] if r.id == requirement_id), None)
                if requirement is None:
                    continue
                config = configs[setting.label]
                reset_graphiti()  # a new runtime with this setting's reranker, same data
                adapter = GraphitiAdapter(config)
                _ensure_graph(adapter, args.requirement_set, graph_id, config, echo)
                judge = getattr(adapter.runtime.reranker, "judge", None)
                record = run_one(args, config, graph_id, requirement, judge)
                stores[setting.label].add(record, persist=record["status"] == "done")
                progress.advance(1, f"{setting.label} {requirement.id}: recall {record.get('gold_recall', 0):.2f}, "
                                    f"{record['wall_s']:.0f}s")
    finally:
        progress.close()
        reset_graphiti()


def _ensure_graph(adapter, requirement_set: RequirementSet, graph_id: str, config: Config, echo) -> None:
    if requirement_set.graph == "sample":
        outcome = ensure_sample_graph(adapter.graph, graph_id,
                                      on_import=lambda n: echo(f"Importing the sample graph ({n} facts, no LLM)..."))
        if outcome.imported:
            echo(f"Imported {outcome.facts} facts into {graph_id}")
        return
    ensure_imported(adapter, graph_id, requirement_set.facts, config.data_dir / f"import-{graph_id}.json", echo)


def keep_report(folder: Path, report: dict) -> None:
    """The written report beside the run's results (report.md, steps.jsonl), to read after the run: the
    store itself goes with the bench's database."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "report.md").write_text(report.get("markdown") or "", encoding="utf-8")
    steps = "".join(json.dumps(step, ensure_ascii=False, default=str) + "\n" for step in report.get("log", []))
    (folder / "steps.jsonl").write_text(steps, encoding="utf-8")


def run_one(args: ReportBenchArgs, config: Config, graph_id: str, requirement: BenchRequirement, judge) -> dict:
    """Write one report with the agent and score it; a record for the result store."""
    store = report_store(config)
    report_id = new_report_id()
    store.create(report_id, {"graph_id": graph_id, "requirement": requirement.requirement, "status": "queued",
                             "created_at": now_iso(), "max_sections": requirement.sections, "bench": True})
    agent = ReportAgent(config, store=store, max_sections=requirement.sections, max_search_limit=args.search_limit,
                        section_max_tokens=args.section_max_tokens, tool_text_chars=args.tool_text_chars,
                        planned_calls=args.planned_calls)
    before = judge.counters.snapshot() if judge is not None else {}
    started = time.perf_counter()
    error = None
    try:
        summary = agent.run(report_id, graph_id, requirement.requirement, {})
    except Exception as failure:  # one failed report is a row with its error, not the end of the run
        logger.warning("Report for %s failed: %s", requirement.id, failure)
        summary, error = {}, f"{type(failure).__name__}: {failure}"
    finally:
        agent.close()
    wall = time.perf_counter() - started
    judged = counter_delta(before, judge.counters.snapshot() if judge is not None else {})
    report = store.read(report_id)
    keep_report(args.output / "reports" / report_id, report)
    cited = [uuid for section in report.get("sections", []) for uuid in section.get("cited", [])]
    known = agent.book.known  # every fact a tool showed the writer
    texts = [known[uuid].fact for uuid in dict.fromkeys(cited) if uuid in known]
    shown = score_citations([fact.fact for fact in known.values()], requirement)  # what the writer saw
    llm = summary.get("llm") or agent.llm.stats()
    unstated = [uuid for step in report.get("log", []) if step.get("kind") == "write"
                for uuid in step.get("unstated_sources", [])]
    listed = {uuid for section in report.get("sections", []) for uuid in section.get("listed", [])}
    in_text = score_citations([known[uuid].fact for uuid in dict.fromkeys(cited)
                               if uuid in known and uuid not in listed], requirement)
    off_question = score_citations([known[uuid].fact for section in report.get("sections", [])
                                    for uuid in section.get("off_question", []) if uuid in known], requirement)
    return {
        "qid": requirement.id, "report_id": report_id, "status": report.get("status"), "error": error,
        "title": report.get("title"), "outline": report.get("outline"),
        **score_citations(texts, requirement), **tool_calls_of(report.get("log", [])),
        "gold_shown": shown["gold_covered"],
        # covered by what the text cites, leaving out the facts listed beneath a section (REPORT_LISTED_FACTS)
        "gold_in_text": in_text["gold_covered"], "listed_facts": len(listed),
        "completion_citations": sum(len(section.get("completed", [])) for section in report.get("sections", [])),
        # listed under "sources" without being said: not counted as cited (grounding.stated_sources)
        "unstated_sources": len(unstated),
        "unstated_distractors": [known[uuid].fact for uuid in dict.fromkeys(unstated)
                                 if uuid in known and known[uuid].fact in requirement.distractors],
        "removed_claims": summary.get("removed_claims", 0), "removed_citations": summary.get("removed_citations", 0),
        # citations the section's question scored under REPORT_CITATION_FLOOR (SectionReview._hold_to_question, report/review.py)
        "off_question": off_question["cited_facts"], "off_question_gold_facts": off_question["cited_gold_facts"],
        "off_question_distractors": off_question["cited_distractors"],
        "sections": summary.get("sections", 0),
        "sections_by_fallback": summary.get("sections", 0) - summary.get("sections_by_model", 0),
        "agent_calls": llm.get("requests", 0), "agent_errors": llm.get("errors", 0),
        "agent_prompt_tokens": llm.get("prompt_tokens", 0), "agent_completion_tokens": llm.get("completion_tokens", 0),
        "judge_calls": judged["calls"], "judge_prompt_tokens": judged["prompt_tokens"],
        "judge_cache_hits": judged["cache_hits"], "judge_fallbacks": judged["fallbacks"],
        "wall_s": round(wall, 1),
    }


def build_results(args: ReportBenchArgs, requirements: list[BenchRequirement], stores: dict) -> dict:
    wanted = [r.id for r in requirements]
    per_report, settings = {}, {}
    for setting in args.settings:
        done = stores[setting.label].done
        records = [done[qid] for qid in wanted if qid in done]
        per_report[setting.label] = records
        settings[setting.label] = {**aggregate(records), "overrides": dict(setting.overrides)}
    config = args.config
    return {
        "benchmark": "report", "graph": args.requirement_set.name, "requirements": wanted,
        "agent_model": config.llm_model_name, "agent_base_url": redact_url(config.llm_base_url),
        "judge_model": config.reranker_model, "judge_base_url": redact_url(config.reranker_base_url),
        "max_tool_calls_per_section": config.report_agent_max_tool_calls, "search_limit": args.search_limit,
        "tool_text_chars": args.tool_text_chars, "section_max_tokens": args.section_max_tokens,
        "planned_calls": args.planned_calls, "citation_floor": config.report_citation_floor,
        "listed_facts": config.report_listed_facts, "floor_without_names": config.report_floor_without_names,
        "added_facts_floor": config.report_added_facts_floor,
        "command": args.command, "settings": settings, "per_report": per_report, **args.extra,
    }


TABLE = (
    ("reports", "reports", "{}"),
    ("gold recall", "gold_recall", "{:.2f}"),
    ("gold covered", None, None),
    ("gold in text", None, None),
    ("gold shown", None, None),
    ("distractors cited", "distractors_cited", "{}"),
    ("claims removed", "removed_claims", "{}"),
    ("tool calls", None, None),
    ("repeated (identical)", None, None),
    ("agent calls", "agent_calls", "{}"),
    ("judge calls (cached)", None, None),
    ("wall s/report", "wall_per_report_s", "{:.0f}"),
)
# "S search_graph, I insight_forge, ...": the letters the tool-call columns use.
TOOL_LEGEND = ", ".join(f"{tool.abbreviation} {tool.name}" for tool in TOOLS.values())


def _tools(row: dict) -> str:
    by_tool = row.get("tool_calls_by_tool") or {}
    # A tool the registry does not know (an older run's) keeps its name.
    parts = " ".join(f"{TOOLS[tool].abbreviation if tool in TOOLS else tool}{count}"
                     for tool, count in sorted(by_tool.items()))
    return f"{row.get('tool_calls', 0)} ({parts})" if parts else str(row.get("tool_calls", 0))


def _cell(row: dict, name: str, key: str | None, pattern: str | None) -> str:
    if name == "gold covered":
        return f"{row.get('gold_covered', 0)}/{row.get('gold_points', 0)}"
    if name == "gold in text":  # covered without the facts listed beneath sections
        return f"{row.get('gold_in_text', 0)}/{row.get('gold_points', 0)}"
    if name == "gold shown":  # points some tool showed the writer: what it could have covered
        return f"{row.get('gold_shown', 0)}/{row.get('gold_points', 0)}"
    if name == "tool calls":
        return _tools(row)
    if name.startswith("repeated"):
        return f"{row.get('repeated_queries', 0)} ({row.get('identical_repeats', 0)})"
    if name.startswith("judge calls"):
        return f"{row.get('judge_calls', 0)} ({row.get('judge_cache_hits', 0)})"
    value = row.get(key)
    return "-" if value is None else pattern.format(value)


def markdown_table(results: dict) -> str:
    header = "| setting | " + " | ".join(name for name, _, _ in TABLE) + " |"
    rule = "|---|" + "---:|" * len(TABLE)
    rows = [f"| {label} | " + " | ".join(_cell(row, *column) for column in TABLE) + " |"
            for label, row in results["settings"].items()]
    return "\n".join([header, rule, *rows])


def per_report_table(results: dict) -> str:
    lines = ["| setting | requirement | recall | covered | in text | shown | distractors | claims removed | "
             "tool calls | repeated (identical) | agent calls | judge calls (cached) | wall s |",
             "|---|---|" + "---:|" * 11]
    for label, records in results["per_report"].items():
        for record in records:
            lines.append(
                f"| {label} | {record['qid']} | {record['gold_recall']:.2f} | "
                f"{record['gold_covered']}/{record['gold_points']} | "
                f"{record.get('gold_in_text', 0)}/{record['gold_points']} | "
                f"{record.get('gold_shown', 0)}/{record['gold_points']} | {record['distractors_cited']} | "
                f"{record['removed_claims']} | {_tools(record)} | {record['repeated_queries']} "
                f"({record['identical_repeats']}) | {record['agent_calls']} | {record['judge_calls']} "
                f"({record.get('judge_cache_hits', 0)}) | "
                f"{record['wall_s']:.0f} |")
    return "\n".join(lines)


def markdown_report(results: dict) -> str:
    facts = [f"- {key}: {results[key]}" for key in
             ("graph", "requirements", "agent_model", "judge_model", "max_tool_calls_per_section", "search_limit",
              "tool_text_chars", "section_max_tokens", "planned_calls", "citation_floor", "floor_without_names",
              "added_facts_floor", "listed_facts", "date", "machine", "command")
             if results.get(key) not in (None, "")]
    missed = [f"- {label} / {record['qid']}: missed " + "; ".join(record["missed_points"])
              + (f"; distractors cited: {record['cited_distractors']}" if record["cited_distractors"] else "")
              for label, records in results["per_report"].items() for record in records]
    return "\n".join(["# Report benchmark", "", *facts, "",
                      f"Tool calls: {TOOL_LEGEND}.", "",
                      markdown_table(results), "", "Per report:", "", per_report_table(results), "",
                      "What each report missed:", "", *missed, ""])


def write_results(results: dict, output: Path) -> None:
    output.mkdir(parents=True, exist_ok=True)
    (output / "results.json").write_text(json.dumps(results, indent=2, default=str), encoding="utf-8")
    (output / "results.md").write_text(markdown_report(results), encoding="utf-8")


def describe_settings(settings: list[BenchSetting]) -> list[str]:
    return [f"  {s.label}: " + ", ".join(f"{name}={value}" for name, value in s.overrides) for s in settings]
