"""Two result columns next to each other in a terminal: first stage only, and reranked."""

from __future__ import annotations

import shutil
import textwrap
from dataclasses import dataclass, field
from itertools import zip_longest

from app.demo.sample_graph import DemoQuestion
from app.graph.search import EdgeHit

SEPARATOR = " | "
ON_TOPIC, OFF_TOPIC = "+", "-"
LEGEND = (f"'{ON_TOPIC}' on topic (a fact a good answer needs), '{OFF_TOPIC}' off topic; "
          "left scores: first-stage RRF, right scores: the model's P(relevant); [was #n]: rank among the "
          "first-stage candidates the model judged")


@dataclass
class Column:
    title: str
    seconds: float
    hits: list[EdgeHit]
    notes: list[str] = field(default_factory=list)  # e.g. "the reranker fell back to first-stage order"


def terminal_width() -> int:
    """The terminal's width within reason; 140 when output is not a terminal (logs, tests)."""
    return max(80, min(200, shutil.get_terminal_size(fallback=(140, 40)).columns))


def on_topic_count(question: DemoQuestion, hits: list[EdgeHit]) -> int:
    return sum(question.on_topic(hit.fact) for hit in hits)


def _hit_lines(question: DemoQuestion, hit: EdgeHit, width: int, show_move: bool) -> list[str]:
    mark = ON_TOPIC if question.on_topic(hit.fact) else OFF_TOPIC
    prefix = f"{hit.rank:>2} {mark} {hit.score:6.3f} "
    text = hit.fact
    if show_move and hit.first_stage_rank != hit.rank:
        text += f" [was #{hit.first_stage_rank}]"
    return textwrap.wrap(text, width=width, initial_indent=prefix, subsequent_indent=" " * len(prefix)) or [prefix]


def _blocks(question: DemoQuestion, column: Column, width: int, show_move: bool) -> list[list[str]]:
    """Header, one block per rank, the on-topic count and notes: blocks are aligned across columns."""
    # A title wraps rather than being cut: at 80 columns the model's name would not fit on one line.
    blocks = [textwrap.wrap(f"{column.title}  {column.seconds:.2f} s", width=width, subsequent_indent="  ",
                            break_on_hyphens=False)]
    blocks += [_hit_lines(question, hit, width, show_move) for hit in column.hits] or [["(no results)"]]
    blocks.append([f"on topic: {on_topic_count(question, column.hits)} of {len(column.hits)}"])
    blocks.append([line for note in column.notes
                   for line in textwrap.wrap(f"! {note}", width=width, subsequent_indent="  ")])
    return blocks


def render_question(
    number: int, total: int, question: DemoQuestion, left: Column, right: Column, width: int | None = None
) -> str:
    """The question, then both columns side by side (' | '); rank n of one faces rank n of the other."""
    width = width or terminal_width()
    column_width = (width - 2 - len(SEPARATOR)) // 2
    left_blocks = _blocks(question, left, column_width, show_move=False)
    right_blocks = _blocks(question, right, column_width, show_move=True)
    rows = [f"[{number}/{total}] {question.question}"]
    for left_block, right_block in zip_longest(left_blocks, right_blocks, fillvalue=[]):
        for left_line, right_line in zip_longest(left_block, right_block, fillvalue=""):
            rows.append(f"  {left_line:<{column_width}}{SEPARATOR}{right_line}".rstrip())
    return "\n".join(rows)
