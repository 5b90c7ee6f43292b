"""The report agent: plan an outline, then write each section in a bounded reason-act loop.

The outline follows the requirement's own parts (planning.py): the model proposes it, and a
deterministic check keeps each section tied to a part and adds a section for a part left out.
Per section the LLM answers with JSON: a tool call (the tool runs, its text goes back) or the
section. A section may use at most REPORT_AGENT_MAX_TOOL_CALLS turns that are not the section;
an invalid call (non-JSON, unknown tool, bad arguments) uses one of them too, so a model that only
answers garbage still ends. Invalid calls are answered with what was wrong, counted and logged,
never raised. A query already asked in this report is answered from memory, and the model is told
so (query_memory.py). A section whose question asks why, or for a stance, is steered to
InsightForge or the interviews: advice up front, a note after two plain searches, and a third plain
search replaced by the recommended tool. Citations of facts no tool showed are removed from the
text, and a sentence left with no real citation is removed with them; so is a sentence citing
nothing in a text that cites, and a sentence said twice is said once (written.py); a section that
cites no fact at all is replaced by a note saying so (its sentences are counted as removed claims).
Then each written section is reviewed (review.py): with a reranker its question judges what it cites
and drops what scores under the floor, it is offered the best facts of its results that the report
does not cite yet, and the best of the rest are listed beneath it. The model reads facts under short
labels (fact_book.py).
Everything lands in ReportStore: outline, sections, report.md and a JSONL log of every step.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any

from app.config import Config
from app.graph.runtime import GraphitiAdapter
from app.report import prompts as prompts
from app.report.completion import within_a_page
from app.report.fact_book import FactBook
from app.report.llm import ReportLLM, ReportLLMError, parse_json_object
from app.report.planning import (
    SectionPlan, check_outline, name_in_context, requirement_parts, subject_phrase, unexplored_names,
)
from app.report.protocol import InvalidCall, parse_action, salvage_write
from app.report.query_memory import QueryMemory
from app.report.results import InsightResult, SearchResult, ToolResult
from app.report.search_log import search_movement
from app.report.sections import (
    SectionDraft, note_if_uncited, report_markdown, section_entry, section_markdown, section_totals,
)
from app.report.review import SectionReview
from app.report.store import CANCELED, ReportStore, ms_since, new_report_id, now_iso, report_store
from app.report.tool_args import ToolArgumentError, UnknownToolError
from app.report.tool_registry import SEARCH_GRAPH, TOOLS, ReportTool, tool_named
from app.report.tools import NEIGHBOURHOOD_ENTITIES, ReportTools
from app.report.views import UUID_CHARS, UUID_PATTERN, BudgetedText
from app.report.written import check_written, final_answer
from app.tasks import TaskCanceled, TaskContext, TaskHandle, new_task_id

logger = logging.getLogger(__name__)

DEFAULT_MAX_SECTIONS = 3
TOOL_TEXT_CHARS = 3000  # each tool result the model reads is kept within this budget
MAX_SEARCH_LIMIT = 10  # a 3000-character text shows about ten facts; more hits only cost judge calls
SECTION_MAX_TOKENS = 1200
MAX_LLM_FAILURES_PER_SECTION = 2
MAX_PROPOSED_SECTIONS = 8  # the model's outline is read up to this many sections before the check
PLAIN_SEARCHES_BEFORE_NUDGE = 2  # plain searches before the section's recommended tool is urged
NUDGED_INTERVIEWS = 2  # entities a steered interview asks: each is one model call
# Tool calls the agent makes itself when a section opens, before the model's first turn: the
# section's recommended tool (or a search) on its own part, then searches each for the first name the
# latest results brought up that no query asked about. A small model otherwise writes after one call.
# Three, not two, since sections are completed after writing (completion.py): the 1.5B no longer
# drowns in a third result's facts, and the third search is where the crisis causes were found.
PLANNED_CALLS = 3


class ToolFailed(Exception):
    """A tool raised; the model is told the error class, the log holds the message."""


class ReportAgent:
    def __init__(self, config: Config, *, store: ReportStore | None = None, llm: ReportLLM | None = None,
                 max_sections: int = DEFAULT_MAX_SECTIONS, tool_text_chars: int = TOOL_TEXT_CHARS,
                 max_search_limit: int = MAX_SEARCH_LIMIT, section_max_tokens: int = SECTION_MAX_TOKENS,
                 planned_calls: int = PLANNED_CALLS) -> None:
        self.config = config
        self.planned_calls = planned_calls
        self.store = store or report_store(config)
        self.llm = llm or ReportLLM.from_config(config)
        self.tools = ReportTools(config, llm=self.llm)
        self.max_sections = max_sections
        self.tool_text_chars = tool_text_chars
        self.max_search_limit = max_search_limit
        self.section_max_tokens = section_max_tokens
        self.budget = config.report_agent_max_tool_calls
        self.question_candidates = config.report_question_candidates
        self.book = FactBook()  # every fact a tool showed the model in this run, under its label
        self.review = SectionReview(config, self.tools, self.llm, self.book, self._log, section_max_tokens)
        self.memory = QueryMemory()  # every query asked in this run, with what it showed
        self._last_names: list[str] = []  # entity names of the last tool result, best fact first
        self._searched: list[str] = []  # queries tools ran by themselves (InsightForge's sub-queries)
        self._cited: set[str] = set()  # facts the sections written so far cite
        self.progress: dict[str, Any] = {}
        self._report_id = ""
        self._subject = ""
        self._step = 0

    def close(self) -> None:
        self.llm.close()

    # -- the run ------------------------------------------------------------------------------

    def run(self, report_id: str, graph_id: str, requirement: str, progress: dict | None = None) -> dict:
        """Write the report; returns a summary. Progress is updated in place (keys set up front)."""
        self._report_id = report_id
        self.progress = progress if progress is not None else {}
        self.progress.update(report_id=report_id, phase="planning", section=0, sections_total=0,
                             section_title=None, tool_calls=0, tool_calls_in_section=0, invalid_calls=0,
                             repeated_queries=0, max_tool_calls_per_section=self.budget)
        started = time.perf_counter()
        self.store.update_meta(report_id, status="running", started_at=now_iso())
        try:
            title, outline = self._plan(graph_id, requirement)
            self.progress.update(phase="writing", sections_total=len(outline))
            sections: list[SectionDraft] = []
            for index in range(1, len(outline) + 1):
                done = [draft.title for draft in sections]
                sections.append(self._section(graph_id, requirement, title, index, outline, done))
            return self._finish(title, requirement, sections, started)
        except Exception as error:  # whatever failed, the stored report must not say "running" forever
            self.store.update_meta(report_id, status="failed", error=f"{type(error).__name__}: {error}",
                                   finished_at=now_iso())
            self.progress.update(phase="failed")
            raise

    def _log(self, kind: str, **fields: Any) -> None:
        self._step += 1
        self.store.append_step(self._report_id, {"step": self._step, "at": now_iso(), "kind": kind,
                                                 "section": self.progress.get("section"), **fields})

    # -- planning -----------------------------------------------------------------------------

    def _plan(self, graph_id: str, requirement: str) -> tuple[str, list[SectionPlan]]:
        stats = self.tools.graph.stats(graph_id)  # also fails early for an unknown graph
        summary = f"{stats['nodes']} entities, {stats['edges']} facts ({stats['historical_edges']} historical)"
        started = time.perf_counter()
        parts = requirement_parts(requirement)
        self._subject = subject_phrase(parts[0])
        try:
            reply = parse_json_object(self.llm.chat(
                prompts.outline_messages(requirement, summary, self.max_sections, parts),
                max_tokens=600, json_object=True))
        except ReportLLMError as error:
            reply, problem = None, f"{error.error_class}: {error.detail}"
        else:
            problem = None if reply is not None else "the outline answer is not a JSON object"
        title, proposed = self._outline_from(reply) if reply is not None else ("Report", [])
        if problem is None and not proposed:
            problem = "the outline has no usable sections"
        check = check_outline(proposed, requirement, self.max_sections)
        outline = check.sections
        self._log("plan", duration_ms=ms_since(started), title=title, sections=[s.title for s in outline],
                  parts=check.parts, proposed=[t for t, _ in proposed], dropped=check.dropped, added=check.added,
                  merged_parts=check.merged_parts, tool_hints=[s.tool_hint for s in outline],
                  error=problem, fallback=problem is not None)
        self.store.write_outline(self._report_id, {"title": title, "parts": check.parts,
                                                   "sections": [s.to_dict() for s in outline]})
        self.store.update_meta(self._report_id, title=title, outline=[s.title for s in outline])
        return title, outline

    def _outline_from(self, reply: dict) -> tuple[str, list[tuple[str, str]]]:
        title = reply.get("title") if isinstance(reply.get("title"), str) and reply["title"].strip() else "Report"
        outline = []
        for item in reply.get("sections") if isinstance(reply.get("sections"), list) else []:
            if isinstance(item, dict) and isinstance(item.get("title"), str) and item["title"].strip():
                goal = item.get("goal") if isinstance(item.get("goal"), str) else item["title"]
                outline.append((item["title"].strip()[:200], goal.strip()[:1000] or item["title"].strip()))
        return title.strip()[:200], outline[:MAX_PROPOSED_SECTIONS]

    # -- one section --------------------------------------------------------------------------

    def _section(self, graph_id: str, requirement: str, report_title: str, index: int,
                 outline: list[SectionPlan], done: list[str]) -> SectionDraft:
        plan = outline[index - 1]
        draft = SectionDraft(index=index, title=plan.title, goal=plan.goal, part=plan.part, tool_hint=plan.tool_hint)
        self.progress.update(section=index, section_title=plan.title, tool_calls_in_section=0)
        opening = prompts.section_opening(
            requirement, report_title, index, len(outline), plan.title, plan.goal, done, self.budget,
            part=plan.part, tool_hint=plan.tool_hint, subject=self._subject, asked=self.memory.queries())
        planned = self._planned(graph_id, draft)
        if planned:
            opening += "\n\n" + prompts.PLANNED_INTRO + "\n\n" + "\n\n".join(planned)
        messages = [{"role": "system", "content": prompts.section_system_prompt()},
                    {"role": "user", "content": opening}]
        self._gather_and_write(graph_id, draft, messages, len(planned))
        self.review.review(draft, plan, self._cited)
        self._cited.update(draft.cited)
        return draft

    def _gather_and_write(self, graph_id: str, draft: SectionDraft, messages: list[dict], used: int) -> None:
        """The model's turns: tool calls until it writes the section or the budget is spent."""
        failures = 0
        while used < self.budget and failures < MAX_LLM_FAILURES_PER_SECTION:
            started = time.perf_counter()
            try:
                text = self.llm.chat(messages, max_tokens=self.section_max_tokens, json_object=True)
            except ReportLLMError as error:
                failures += 1
                self._log("llm_error", duration_ms=ms_since(started), error=f"{error.error_class}: {error.detail}")
                continue
            messages.append({"role": "assistant", "content": text})
            remaining = self.budget - used - 1
            try:
                kind, value, arguments = self._action_of(text)
                if kind == "write":
                    self._written(draft, value, started, sources=arguments)
                    if self._remind_to_cite(draft, messages):
                        continue
                    return
                feedback = self._call(graph_id, draft, value, arguments, started, remaining)
            except InvalidCall as problem:
                draft.invalid_calls += 1
                self.progress["invalid_calls"] += 1
                self._log("invalid_call", duration_ms=ms_since(started), error=str(problem), answer=text[:500])
                feedback = prompts.invalid_call_feedback(str(problem), remaining)
            used += 1
            messages.append({"role": "user", "content": feedback})
        self._write_now(draft, messages, failures)

    def _action_of(self, text: str) -> tuple[str, Any, Any]:
        """('write', content, sources) or ('tool', the ReportTool, its checked arguments); InvalidCall."""
        reply = parse_json_object(text)
        if reply is None:
            salvaged = salvage_write(text)  # a section cut short by max_tokens is still the section
            if salvaged is not None:
                return "write", salvaged[0], salvaged[1]
            raise InvalidCall("the answer is not a JSON object")
        kind, value, arguments = parse_action(reply)
        if kind == "tool":
            try:
                value = tool_named(value)
                arguments = value.check_arguments(arguments)
            except (UnknownToolError, ToolArgumentError) as error:
                raise InvalidCall(str(error)) from None
        return kind, value, arguments

    def _planned(self, graph_id: str, draft: SectionDraft) -> list[str]:
        """The calls the agent makes itself as a section opens (PLANNED_CALLS); the model is shown their
        results in its first message. At least one turn is always left to the model."""
        feedback: list[str] = []
        calls = min(self.planned_calls, self.budget - 1)
        if calls < 1:
            return feedback
        tool, arguments = self._recommended_call(draft) or (
            SEARCH_GRAPH, SEARCH_GRAPH.question_call(draft.part[:1000], self._subject))
        arguments = tool.check_arguments(arguments)
        if tool.takes("candidates") and self.question_candidates:  # a search of the question: judged deeper
            arguments["candidates"] = self.question_candidates
        feedback.append(self._call(graph_id, draft, tool, arguments, time.perf_counter(), self.budget - 1,
                                   planned=True))
        for call in range(2, calls + 1):  # each follow-up: a name the latest results brought up
            follow_up = unexplored_names(self._last_names, self._asked(draft), limit=1)
            if not follow_up:
                break
            query = name_in_context(follow_up[0], self._subject)[:1000]
            feedback.append(self._call(graph_id, draft, SEARCH_GRAPH, SEARCH_GRAPH.check_arguments({"query": query}),
                                       time.perf_counter(), self.budget - call, planned=True))
        return feedback

    def _call(self, graph_id: str, draft: SectionDraft, tool: ReportTool, arguments: dict, started: float,
              remaining: int, planned: bool = False) -> str:
        """One tool turn: maybe steered to the section's recommended tool, maybe answered from memory."""
        nudged_from = None
        recommended = self._recommended_call(draft) if tool is SEARCH_GRAPH and not planned else None
        if recommended is not None and draft.tools_used.count(SEARCH_GRAPH.name) >= PLAIN_SEARCHES_BEFORE_NUDGE:
            nudged_from, (tool, arguments) = tool.name, recommended
            draft.nudged = True
        arguments["max_chars"] = self.tool_text_chars
        if not planned:  # the judge's depth is the agent's to set, for the section's own question only
            arguments.pop("candidates", None)
        if tool is SEARCH_GRAPH:  # a followed name's own facts reach the judge, not only its word matches
            arguments["neighbourhood"] = NEIGHBOURHOOD_ENTITIES
        if "limit" in arguments:
            arguments["limit"] = min(arguments["limit"], self.max_search_limit)
        earlier = self.memory.recall(tool.name, arguments)
        if earlier is not None:
            return self._repeated(draft, tool.name, arguments, earlier, started, remaining)
        try:
            text, remembered = self._run_tool(graph_id, draft, tool, arguments, started, nudged_from, planned)
        except ToolFailed as failure:
            return f"The tool {tool.name} failed: {failure}. {remaining} tool call(s) left."
        self.memory.remember(tool.name, arguments, draft.index, draft.tool_calls, remembered)
        if nudged_from:
            return prompts.nudged_feedback(tool.name, text, remaining)
        feedback = prompts.tool_feedback(tool.name, text, remaining)
        if (tool is SEARCH_GRAPH and self._recommended_call(draft) is not None and remaining > 0
                and draft.tools_used.count(SEARCH_GRAPH.name) == PLAIN_SEARCHES_BEFORE_NUDGE):
            feedback += "\n" + prompts.nudge_feedback(draft.tool_hint, draft.part, self._subject)
        elif remaining > 0 and self._last_names:
            feedback += prompts.unexplored_feedback(unexplored_names(self._last_names, self._asked(draft)))
        return feedback

    def _asked(self, draft: SectionDraft) -> list[str]:
        """Every query searched in this report so far, a tool's own sub-queries included, and the
        section's part: a name they cover is not suggested (InsightForge may have searched it)."""
        return [asked.query for asked in self.memory.asked.values()] + self._searched + [draft.part]

    def _recommended_call(self, draft: SectionDraft) -> tuple[ReportTool, dict] | None:
        """The section's recommended tool with its question, while the section has not used it yet."""
        if draft.tool_hint is None or draft.tool_hint in draft.tools_used or draft.nudged:
            return None
        tool = TOOLS[draft.tool_hint]
        arguments = tool.question_call(draft.part[:500], (self._subject or draft.part)[:500])
        if tool.takes("max_entities"):
            arguments["max_entities"] = NUDGED_INTERVIEWS
        try:
            return tool, tool.check_arguments(arguments)
        except ToolArgumentError:
            return None

    def _repeated(self, draft: SectionDraft, tool: str, arguments: dict, earlier, started: float,
                  remaining: int) -> str:
        draft.repeated_queries += 1
        self.progress["repeated_queries"] += 1
        self.memory.note_repeat(tool, arguments, earlier, draft.index)
        same_section = earlier.section == draft.index
        self._log("repeated_query", tool=tool, arguments=arguments, duration_ms=ms_since(started),
                  earlier_section=earlier.section, earlier_query=earlier.query,
                  identical=self.memory.repeats[-1]["identical"])
        return prompts.repeated_feedback(tool, earlier.query, earlier.section, same_section, earlier.text, remaining)

    def _run_tool(self, graph_id: str, draft: SectionDraft, tool: ReportTool, arguments: dict, started: float,
                  nudged_from: str | None = None, planned: bool = False) -> tuple[str, str]:
        """Run the tool; (the text the model is shown, the text remembered for a repeat of the query in
        another section: with the facts left out because this section had them). ToolFailed (logged)
        when the tool raised."""
        draft.tool_calls += 1
        draft.tools_used.append(tool.name)
        self.progress["tool_calls"] += 1
        self.progress["tool_calls_in_section"] += 1
        # A search shows facts this section has not seen yet: the ones it has are in its conversation.
        section_has = {"already_shown": frozenset(draft.shown)} if tool is SEARCH_GRAPH else {}
        try:
            result = tool.run(self.tools, graph_id, {**arguments, **section_has})
        except Exception as error:  # a failing tool is news for the model, not the end of the run
            self._log("tool_error", tool=tool.name, arguments=arguments, duration_ms=ms_since(started),
                      error=f"{type(error).__name__}: {error}")
            raise ToolFailed(type(error).__name__) from None
        text = self._render_for_the_model(result)
        shown = text.text()
        shown_facts = [fact for fact in result.all_facts() if fact.uuid in shown]  # cut ones cannot be cited
        new_labels = self.book.show(shown_facts)
        draft.shown |= {fact.uuid for fact in shown_facts}
        draft.evidence.append(within_a_page(shown_facts, self.max_search_limit))
        self._last_names = [name for fact in shown_facts for name in (fact.source, fact.target) if name]
        if isinstance(result, InsightResult):
            self._searched += result.sub_queries
        self._log("tool", tool=tool.name, arguments=arguments, duration_ms=ms_since(started),
                  result_chars=len(shown), truncated=text.truncated, facts=len(result.fact_uuids()),
                  search=search_movement(result, shown, arguments.get("limit")), new_labels=new_labels,
                  shown=self.book.labels_of([fact.uuid for fact in shown_facts]),
                  **result.log_details(), **({"nudged_from": nudged_from} if nudged_from else {}),
                  **({"planned": True} if planned else {}))
        had = result.already_shown if isinstance(result, SearchResult) else []
        held_back = [self.book.known[uuid] for uuid in had if uuid in self.book.known]
        remembered = shown + ("\nAlso found, shown before this search:\n" + "\n".join(
            fact.line() for fact in held_back) if held_back else "")
        return self.book.with_labels(shown), self.book.with_labels(remembered)

    def _render_for_the_model(self, result: ToolResult) -> BudgetedText:
        """The tool's text within its budget as the model reads it: each 36-character fact id is
        replaced by a short label (F12) before the model sees it, so a text measured with the ids
        left part of the budget unused (a seventh, for facts of about 230 characters) and cut facts
        the model had room for. Rendered again with the room the labels free; after the replacement
        it is still within the budget."""
        text = result.render()
        ids = len(UUID_PATTERN.findall(text.text()))
        if not text.truncated or not ids:
            return text
        longest_label = self.book.longest_label_after(2 * ids)  # the second text may show more facts
        return replace(result, max_chars=result.max_chars + ids * (UUID_CHARS - longest_label)).render()

    def _write_now(self, draft: SectionDraft, messages: list[dict], failures: int) -> SectionDraft:
        """Budget spent (or the model failing): one last request for the section (and one more if it
        cited nothing), then a fallback."""
        started = time.perf_counter()
        if failures >= MAX_LLM_FAILURES_PER_SECTION:
            return self._fallback(draft, "the model failed repeatedly", started)
        messages.append({"role": "user", "content": prompts.WRITE_NOW})
        while True:
            try:
                text = self.llm.chat(messages, max_tokens=self.section_max_tokens, json_object=True)
                written, problem = final_answer(text)
            except ReportLLMError as error:
                written, problem = None, f"{error.error_class}: {error.detail}"
            if written is None:  # after a reminder the first answer stands
                return draft if draft.reminded_to_cite else self._fallback(draft, problem, started)
            self._written(draft, written[0], started, sources=written[1])
            messages.append({"role": "assistant", "content": text})
            if not self._remind_to_cite(draft, messages):
                return draft

    def _remind_to_cite(self, draft: SectionDraft, messages: list[dict]) -> bool:
        """Send a draft that cites nothing back once to be written with labels; whether it was sent.

        Small models sometimes write from the facts but leave out every label, and a section citing
        nothing is removed whole: one more request is cheaper than losing the section."""
        if draft.cited or draft.reminded_to_cite or not self.book.by_label:
            return False
        draft.reminded_to_cite = True
        messages.append({"role": "user", "content": prompts.CITE_REMINDER})
        return True

    def _fallback(self, draft: SectionDraft, problem: str, started: float) -> SectionDraft:
        draft.written_by = "fallback"
        draft.content = f"_This section could not be written: {problem}._"
        self._log("section_fallback", duration_ms=ms_since(started), error=problem)
        return draft

    def _written(self, draft: SectionDraft, content: str, started: float, sources: Any = None) -> SectionDraft:
        checked = check_written(content, sources, self.book.by_label, self.book.known)
        draft.content, draft.cited = checked.content, checked.cited
        draft.removed_citations, draft.removed_claims = checked.removed_citations, checked.removed_claims
        note_if_uncited(draft)
        self._log("write", duration_ms=ms_since(started), chars=len(draft.content), cited=draft.cited,
                  removed_citations=draft.removed_citations, removed_claims=draft.removed_claims,
                  unstated_sources=checked.unstated_sources, loop_words_cut=checked.loop_words,
                  repeated_sentences_cut=checked.repeated_sentences)
        return draft

    # -- assembling ---------------------------------------------------------------------------

    def _finish(self, title: str, requirement: str, sections: list[SectionDraft], started: float) -> dict:
        self.progress.update(phase="assembling")
        bodies = [section_markdown(draft, self.book.known) for draft in sections]
        entries = [section_entry(draft, self.store.write_section(self._report_id, draft.index, body))
                   for draft, body in zip(sections, bodies)]
        markdown = report_markdown(title, requirement, bodies)
        self.store.write_report(self._report_id, markdown)
        summary = {
            "report_id": self._report_id, "title": title, **section_totals(sections),
            "tool_calls": self.progress["tool_calls"], "invalid_calls": self.progress["invalid_calls"],
            "repeated_queries": self.progress["repeated_queries"],
            "identical_repeats": sum(1 for repeat in self.memory.repeats if repeat["identical"]),
            "chars": len(markdown), "duration_ms": ms_since(started), "llm": self.llm.stats(),
        }
        self._log("final", **{k: v for k, v in summary.items() if k != "report_id"})
        status = "done" if summary["sections_by_model"] else "failed"
        self.store.update_meta(self._report_id, status=status, finished_at=now_iso(), sections=entries,
                               summary=summary)
        self.progress.update(phase=status)
        return summary


def start_report(config: Config, graph_id: str, requirement: str, max_sections: int = DEFAULT_MAX_SECTIONS,
                 planned_calls: int = PLANNED_CALLS) -> tuple[str, TaskHandle]:
    """Store the report as queued and queue the agent's run as a background task; (report_id, task)."""
    tasks = GraphitiAdapter(config).tasks
    store = ReportStore(tasks.queue.connection)
    report_id, task_id = new_report_id(), new_task_id()
    store.create(report_id, {"graph_id": graph_id, "requirement": requirement, "status": "queued",
                             "created_at": now_iso(), "max_sections": max_sections,
                             "max_tool_calls_per_section": config.report_agent_max_tool_calls,
                             "task_id": task_id})
    try:
        task = tasks.start("report", "app.report.agent:run_report_task", report_id, graph_id, requirement,
                           max_sections, planned_calls, task_id=task_id)
    except Exception as error:  # never queued: the report must not stay "queued"
        store.update_meta(report_id, status="failed", error=f"{type(error).__name__}: {error}",
                          finished_at=now_iso())
        raise
    return report_id, task


def run_report_task(task: TaskContext, report_id: str, graph_id: str, requirement: str, max_sections: int,
                    planned_calls: int) -> dict | None:
    """A worker's run of one report (queued by start_report), on the worker's own settings."""
    store = ReportStore(task.connection)
    try:
        agent = ReportAgent(Config.from_env(), store=store, max_sections=max_sections, planned_calls=planned_calls)
    except Exception as error:  # the agent never started: the report must not stay "queued"
        store.update_meta(report_id, status="failed", error=f"{type(error).__name__}: {error}",
                          finished_at=now_iso())
        raise
    try:
        summary = agent.run(report_id, graph_id, requirement, task.progress)
    except TaskCanceled:
        store.update_meta(report_id, status=CANCELED, finished_at=now_iso())
        raise
    finally:
        agent.close()
    if not summary["sections_by_model"]:
        task.add_error("the model wrote no section; see the report's log")
        return None
    return summary
