"""Responders for the scripted LLM server that answer the reranking strategies' prompts.

    from tests.support.scripted_rankers import ranking_llm

    server.responder = ranking_llm(lambda query, passage: RELEVANCE[passage])

`ranking_llm(relevance)` answers every kind of rerank prompt as a perfectly consistent model whose
ideal order is "higher relevance first" (ties: the earlier passage in the prompt):
- listwise:  {"reranked_indices": [...all, best first], "is_rejected": false, "rejection_reason": ""}
- select:    {"selected_indices": [...the m best]}
- pairwise:  {"more_relevant": "A" | "B"} (a tie answers "A": position bias, which PRP cancels)
- pointwise judge prompts: scored by `relevance` through `judge()` (logprobs or JSON).

Each override (`listwise=`, `select=`, `pairwise=`) gets the parsed `StrategyPrompt` and returns any
responder value (a str content, a fault Reply, ...) or None for the ideal answer.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from graphiti_llm_rerank.strategies.strategy_prompts import StrategyPrompt, parse_strategy_prompt
from tests.support.scripted_llm_replies import ChatRequest, error, judge

Relevance = Callable[[str, str], float]
Override = Callable[[StrategyPrompt], Any]


def strategy_prompt(request: ChatRequest | dict) -> StrategyPrompt | None:
    """The parsed rerank prompt of a request (a ChatRequest or a received JSON body)."""
    messages = request.messages if isinstance(request, ChatRequest) else list(request.get("messages") or [])
    return parse_strategy_prompt(messages)


def prompts_of(server, kind: str | None = None) -> list[StrategyPrompt]:
    """The rerank prompts a server has received, optionally of one kind, in arrival order."""
    parsed = [strategy_prompt(body) for body in server.requests]
    return [prompt for prompt in parsed if prompt is not None and (kind is None or prompt.kind == kind)]


def ideal_order(prompt: StrategyPrompt, relevance: Relevance) -> list[int]:
    return sorted(range(len(prompt.passages)), key=lambda i: -relevance(prompt.query, prompt.passages[i]))


def listwise_reply(indices: list[Any], *, rejected: bool = False, reason: str = "") -> str:
    return json.dumps({"reranked_indices": indices, "is_rejected": rejected, "rejection_reason": reason})


def ideal_answer(prompt: StrategyPrompt, relevance: Relevance) -> str:
    order = ideal_order(prompt, relevance)
    if prompt.kind == "listwise":
        return listwise_reply(order)
    if prompt.kind == "select":
        return json.dumps({"selected_indices": order[: prompt.select]})
    a, b = (relevance(prompt.query, passage) for passage in prompt.passages)
    return json.dumps({"more_relevant": "B" if b > a else "A"})


def ranking_llm(
    relevance: Relevance,
    *,
    listwise: Override | None = None,
    select: Override | None = None,
    pairwise: Override | None = None,
) -> Callable[[ChatRequest], Any]:
    overrides = {"listwise": listwise, "select": select, "pairwise": pairwise}
    pointwise = judge(relevance)

    def respond(request: ChatRequest) -> Any:
        prompt = strategy_prompt(request)
        if prompt is None:
            if request.judge_fields is not None:
                return pointwise(request)
            return error(400, "scripted ranker: not a rerank prompt")
        override = overrides[prompt.kind]
        value = override(prompt) if override else None
        return ideal_answer(prompt, relevance) if value is None else value

    return respond


def table_relevance(table: dict[str, float]) -> Relevance:
    """Relevance looked up by exact passage text (a KeyError shows up as a 500 and in responder_errors)."""
    return lambda query, passage: table[passage]
