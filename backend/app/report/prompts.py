"""Prompts of the report tools and the report agent, in one place so they are easy to review.

Every system prompt is a constant (or built from one), so a test server can tell the requests
apart by their first message. Graph content always travels in the user message as data.
"""

from __future__ import annotations

from app.report.results import DONT_KNOW
from app.report.tool_args import describe_tools
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
    "must answer), write an outline of a few sections, each with a title and a goal saying what the "
    'section must find out. Answer with only a JSON object: {"title": "...", "sections": '
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
    "brackets. After each statement cite the ids of the facts it rests on, in square brackets, and list "
    "every id you used in \"sources\"; never cite an id a tool did not show you. Say plainly what the "
    "graph does not tell."
)


def section_system_prompt() -> str:
    return SECTION_PROMPT_HEAD + describe_tools() + SECTION_PROMPT_TAIL


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


def outline_messages(requirement: str, graph_summary: str, max_sections: int) -> list[dict[str, str]]:
    return [{"role": "system", "content": OUTLINE_PROMPT.replace("MAX", str(max_sections))},
            {"role": "user", "content": f"Requirement: {requirement}\n\nThe graph: {graph_summary}"}]


def section_opening(requirement: str, report_title: str, index: int, total: int, title: str, goal: str,
                    done_titles: list[str], budget: int) -> str:
    done = "; ".join(done_titles) if done_titles else "none yet"
    return (f"Report: {report_title}\nRequirement: {requirement}\nSections already written: {done}\n\n"
            f"Write section {index} of {total}: {title}\nGoal: {goal}\n"
            f"You may call tools up to {budget} times for this section.")


def tool_feedback(tool: str, text: str, remaining: int) -> str:
    return f"Result of {tool}:\n{text}\n\n{remaining} tool call(s) left for this section."


def invalid_call_feedback(problem: str, remaining: int) -> str:
    return (f"Invalid answer: {problem}. Answer with one JSON object as described "
            f"(a tool call or the section). {remaining} tool call(s) left for this section.")


WRITE_NOW = ("The tool budget for this section is spent. Write the section now from the results above: "
             'answer {"action": "write", "content": "...", "sources": [...]}.')
