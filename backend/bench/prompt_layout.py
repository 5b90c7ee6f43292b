"""How many prompt tokens a llama.cpp server really evaluates per passage: query-first vs passage-first.

The judge prompt puts the fixed instructions first, then the query, then the passage, so
consecutive requests for one query share everything up to the passage, and a server that reuses
the prefix cached from its previous request (llama-server with one slot does) evaluates only the
passage. This measures it: the same passages are judged in the production layout (query first) and
in a passage-first layout, one query at a time, and the `timings` llama-server adds to each answer
(`prompt_n`: tokens evaluated, `cache_n`: tokens reused) say what was evaluated.

    python -m bench prompt-layout --dataset DIR --base-url URL --model M

The server should be one that nobody else is using. The first request of each block is left out:
it evaluates the whole prompt in either layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import httpx

from bench.datasets import load_dataset
from graphiti_llm_rerank.judge_prompt import PASSAGE_CLOSE, PASSAGE_OPEN, QUERY_CLOSE, QUERY_OPEN, build_judge_messages


@dataclass(frozen=True)
class PromptLayoutArgs:
    """The first `queries` of `dataset`, each with a warm-up and `passages` judged passages per layout."""

    dataset: str | Path
    base_url: str
    model: str
    queries: int = 3
    passages: int = 5


def passage_first(query: str, passage: str) -> list[dict[str, str]]:
    """The production messages with the user turn reordered: passage, question, then query."""
    system, user = build_judge_messages(query, passage, mode="logprobs")
    head, _, passage_block = user["content"].partition(f"\n\n{PASSAGE_OPEN}\n")
    query_block, _, question = head.partition(f"\n{QUERY_CLOSE}\n\n")
    question = question.replace("passage below", "passage above")
    reordered = f"{PASSAGE_OPEN}\n{passage_block}\n\n{question}\n\n{query_block}\n{QUERY_CLOSE}"
    assert reordered.startswith(PASSAGE_OPEN) and PASSAGE_CLOSE in reordered and QUERY_OPEN in reordered
    return [system, {"role": "user", "content": reordered}]


def evaluated_tokens(answer: dict) -> int:
    """Prompt tokens the server evaluated for this answer (llama-server's timings), else all of them."""
    timings = answer.get("timings") or {}
    return int(timings.get("prompt_n", answer["usage"]["prompt_tokens"]))


def measure(args: PromptLayoutArgs) -> dict:
    dataset = load_dataset(args.dataset)
    url = args.base_url.rstrip("/") + "/chat/completions"
    rows = {"query_first": [], "passage_first": []}
    prompt_tokens = {"query_first": [], "passage_first": []}
    for query in dataset.queries[: args.queries]:
        passages = [c.text for c in query.candidates[: args.passages + 1]]
        for layout, build in (("query_first", lambda q, p: build_judge_messages(q, p, mode="logprobs")),
                              ("passage_first", passage_first)):
            for index, passage in enumerate(passages):
                body = {"model": args.model, "messages": build(query.text, passage), "max_tokens": 1, "temperature": 0}
                answer = httpx.post(url, json=body, timeout=600).raise_for_status().json()
                if index == 0:
                    continue  # warm-up: nothing shared with the previous block yet
                rows[layout].append(evaluated_tokens(answer))
                prompt_tokens[layout].append(answer["usage"]["prompt_tokens"])
    mean = {layout: sum(values) / len(values) for layout, values in rows.items()}
    return {
        "queries": args.queries, "passages_per_query": args.passages, "model": args.model,
        "prompt_tokens_per_passage": {k: round(sum(v) / len(v), 1) for k, v in prompt_tokens.items()},
        "evaluated_tokens_per_passage": {k: round(v, 1) for k, v in mean.items()},
        "saving_per_passage": round(mean["passage_first"] - mean["query_first"], 1),
        "saving_share": round(1 - mean["query_first"] / mean["passage_first"], 3),
    }
