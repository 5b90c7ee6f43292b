"""Prompts of the report tools and the report agent, in one place so they are easy to review.

Every system prompt is a constant (or built from one), so a test server can tell the requests
apart by their first message. Graph content always travels in the user message as data.
"""

from __future__ import annotations

import json

from app.report.results import DONT_KNOW
from app.report.tool_registry import SEARCH_GRAPH, TOOLS, describe_tools
from app.report.views import EntityView, FactView

SUB_QUERY_PROMPT = (
    "You help search a knowledge graph. Split the user's question into short, self-contained search "
    "queries, each about one aspect of the question (people, organisations, events, places, time). "
    'Answer with only a JSON object: {"sub_queries": ["...", "..."]} with at most MAX queries.'
)

INTERVIEW_PROMPT = (
    "You are being interviewed as the entity named in the user message, and you speak as that entity "
    "in the first person. You know ONLY the facts listed in the user message; each fact starts with its "
    "id in square brackets. Answer each question from those facts alone. If the facts do not answer a "
    f'question, the answer is exactly "{DONT_KNOW}". Never invent facts, names, numbers or dates. '
    "For every answer list the ids of the facts it uses. Answer with only a JSON object: "
    '{"answers": [{"question_index": 1, "answer": "...", "fact_uuids": ["<fact id>"]}]}.'
)

OUTLINE_PROMPT = (
    "You plan a short analytical report about a knowledge graph. Given the requirement (what the report "
    "must answer) and its parts, write an outline of a few sections, each with a title and a goal saying what the "
    "section must find out. Give every part of the requirement its own section, in the requirement's order, and "
    "name in each title what that part asks about (for example the causes, the responses); never use generic "
    "steps such as 'identify the key entities' or 'analyze the facts'. "
    'Answer with only a JSON object: {"title": "...", "sections": '
    '[{"title": "...", "goal": "..."}]} with at most MAX sections.'
)

SECTION_PROMPT_HEAD = (
    "You write one section of a report about a knowledge graph. You cannot see the graph: you gather "
    "facts with tools, one call per answer, and then write the section from what the tools returned. "
    "Tools:\n"
)

SECTION_PROMPT_TAIL = (
    "\n\nAnswer every turn with only a JSON object, one of:\n"
    '{"action": "tool", "tool": "<tool name>", "arguments": {...}}  to call a tool, or\n'
    '{"action": "write", "content": "<the section in markdown, without its title>", '
    '"sources": ["<id of a fact used>", ...]}  to write the section.\n'
    "Write only what the tool results support. Each fact in a tool result starts with its id in square "
    "brackets, such as [F3]. After each statement cite the ids of the facts it rests on, in square brackets, "
    "and list every id you used in \"sources\"; never cite an id a tool did not show you. Say plainly what the "
    "graph does not tell.\n\n"
    "Choosing a tool: insight_forge for a 'why' or cause question and for a question with several parts; "
    "interview_entities when what people or organisations did or said (their stance) matters; panorama_search "
    "for what changed over time; search_graph for one specific fact. Each call should ask something new for "
    "this section's goal: a query already asked in this report is answered from memory and tells nothing new.\n"
    "Each fact says when it held, for example 'valid 14 March to 2 April 2025; no longer true' (it ended on "
    "2 April) or 'valid from 9 March 2025; still true'. Use these dates; there are no others."
)


# Knobs the agent's model is not told about: a small model sets them badly (nodes-only searches that
# return no fact to cite, InsightForge with one sub-query), and the agent's defaults and caps serve it.
# A call that passes them anyway is still valid.
# Entity names are hidden too: the model invents them ("government agencies") and interviews no one.
# Of the search filters it is told only `as_of` (what held at a date, which a report's question can ask);
# the others it would fill by guessing relation names and windows.
AGENT_HIDDEN_ARGUMENTS = ("max_chars", "scope", "limit", "max_sub_queries", "max_entities", "entities",
                          "neighbourhood", "candidates", "current_only", "relation_types", "valid_at", "invalid_at",
                          "created_at")


def section_system_prompt() -> str:
    return SECTION_PROMPT_HEAD + describe_tools(hidden=AGENT_HIDDEN_ARGUMENTS) + SECTION_PROMPT_TAIL


def sub_query_messages(question: str, max_queries: int) -> list[dict[str, str]]:
    return [{"role": "system", "content": SUB_QUERY_PROMPT.replace("MAX", str(max_queries))},
            {"role": "user", "content": f"Question: {question}"}]


def interview_messages(entity: EntityView, facts: list[FactView], topic: str,
                       questions: list[str]) -> list[dict[str, str]]:
    about = f" ({entity.summary})" if entity.summary else ""
    fact_lines = "\n".join(f"[{fact.uuid}] {fact.fact} ({fact.time_label()})" for fact in facts)
    question_lines = "\n".join(f"{index}. {question}" for index, question in enumerate(questions, start=1))
    user = (f"You are: {entity.name}{about}\nInterview topic: {topic}\n\nYour facts:\n{fact_lines}\n\n"
            f"Questions:\n{question_lines}")
    return [{"role": "system", "content": INTERVIEW_PROMPT}, {"role": "user", "content": user}]


def outline_messages(requirement: str, graph_summary: str, max_sections: int,
                     parts: list[str] | None = None) -> list[dict[str, str]]:
    listed = "".join(f"\n{number}. {part}" for number, part in enumerate(parts or [requirement], start=1))
    return [{"role": "system", "content": OUTLINE_PROMPT.replace("MAX", str(max_sections))},
            {"role": "user", "content": f"Requirement: {requirement}\nIts parts:{listed}\n\n"
                                        f"The graph: {graph_summary}"}]


def first_call(tool: str, part: str, subject: str) -> str:
    """A ready-made first call for the section's recommended tool (JSON the model can copy)."""
    return json.dumps({"action": "tool", "tool": tool, "arguments": TOOLS[tool].question_call(part, subject)})


def section_opening(requirement: str, report_title: str, index: int, total: int, title: str, goal: str,
                    done_titles: list[str], budget: int, part: str = "", tool_hint: str | None = None,
                    subject: str = "", asked: list[str] | None = None) -> str:
    done = "; ".join(done_titles) if done_titles else "none yet"
    lines = [f"Report: {report_title}", f"Requirement: {requirement}", f"Sections already written: {done}", "",
             f"Write section {index} of {total}: {title}", f"Goal: {goal}"]
    if part:
        lines.append(f"This section answers this part of the requirement: {part}")
    if tool_hint:
        lines.append(f"Advice: {TOOLS[tool_hint].advice}, for example {first_call(tool_hint, part, subject)}")
    if asked:
        lines.append("Already asked in this report (do not ask again): " + " | ".join(asked[-12:]))
    lines.append(f"You may call tools up to {budget} times for this section.")
    return "\n".join(lines)


def tool_feedback(tool: str, text: str, remaining: int) -> str:
    return f"Result of {tool}:\n{text}\n\n{remaining} tool call(s) left for this section."


PLANNED_INTRO = ("To start this section, the agent has already run these calls for you; their results "
                 "follow. Call more tools if something is missing, then write.")


def unexplored_feedback(names: list[str]) -> str:
    """Names in the last result that no query asked about yet: concrete next queries."""
    return ("\nNamed in these results, not searched yet: " + "; ".join(names) + ".") if names else ""


def repeated_feedback(tool: str, query: str, section: int, same_section: bool, text: str, remaining: int) -> str:
    """A repeated query: no new search; the earlier result again only when this section has not seen it."""
    where = "earlier in this section" if same_section else f"in section {section}"
    head = (f"Result of {tool}: you already asked {query!r} {where}. No new search was run: the answer is the "
            "same as then")
    body = ", shown above." if same_section else f", repeated here from memory:\n{text}"
    return (f"{head}{body}\nAsk something different (another aspect, entity or time) to learn more.\n\n"
            f"{remaining} tool call(s) left for this section.")


def nudge_feedback(tool: str, part: str, subject: str) -> str:
    """Said after two plain searches when the section's question calls for another tool."""
    return (f"Note: you have only used {SEARCH_GRAPH.name} in this section. {TOOLS[tool].advice.capitalize()}, "
            f"for example {first_call(tool, part, subject)}")


def nudged_feedback(tool: str, text: str, remaining: int) -> str:
    """A third plain search was replaced by the recommended tool; the model is told why."""
    return (f"Instead of a third {SEARCH_GRAPH.name}, {tool} was run for this section's question, because "
            f"{TOOLS[tool].advice}.\n" + tool_feedback(tool, text, remaining))


def invalid_call_feedback(problem: str, remaining: int) -> str:
    return (f"Invalid answer: {problem}. Answer with one JSON object as described "
            f"(a tool call or the section). {remaining} tool call(s) left for this section.")


CITE_REMINDER = ("That section cites no fact, so every sentence of it would be removed from the report. Write it "
                 "again: end each sentence with the label of the fact it rests on, e.g. [F1], and list the labels "
                 'under "sources". Use only facts from the results above.')

WRITE_NOW = ("The tool budget for this section is spent. Write the section now from the results above: "
             'answer {"action": "write", "content": "...", "sources": [...]}.')


COMPLETION_PROMPT = (
    "You add sentences to one section of a report. You get the section's goal and facts from its searches; each "
    "fact starts with its id in square brackets. For each fact that helps answer the goal, write one sentence "
    "that says what the fact says and nothing more, and end it with the fact's id in square brackets. Skip a fact "
    'that does not help. Answer with only a JSON object: {"content": "<the sentences>"}; {"content": ""} when no '
    "fact helps."
)

# One worked exchange before the real one: a 1.5B model told the format in words leaves the ids out,
# and given a template in the prompt it copies the template (placeholders, or an example's content).
# The example is about another town's library so that nothing of it fits a report on the graph.
_COMPLETION_EXAMPLE = [
    {"role": "user", "content": "Goal of the section: How the Elmwood library serves children\n\nFacts:\n"
                                "- [F901] The Elmwood library opened a reading room for children in 2019.\n"
                                "- [F902] The bakery next to the Elmwood library sells rye bread.\n"
                                "- [F903] Since 2021 the Elmwood library lends tablets to pupils."},
    {"role": "assistant", "content": '{"content": "The library opened a reading room for children in 2019 [F901]. '
                                     'Since 2021 it lends tablets to pupils [F903]."}'},
]


def completion_messages(goal: str, fact_lines: list[str]) -> list[dict[str, str]]:
    """The section's text is not shown: a small model shown it answers with it again."""
    user = f"Goal of the section: {goal}\n\nFacts:\n" + "\n".join(fact_lines)
    return [{"role": "system", "content": COMPLETION_PROMPT}, *_COMPLETION_EXAMPLE, {"role": "user", "content": user}]
