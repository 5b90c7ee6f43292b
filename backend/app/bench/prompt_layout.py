"""How many prompt tokens a llama.cpp server really evaluates per passage: query-first vs passage-first.

The judge prompt puts the fixed instructions first, then the query, then the passage, so
consecutive requests for one query share everything up to the passage, and a server that reuses
the prefix shared with its previous request (llama-cpp-python does) evaluates only the passage.
This measures it: the same passages are judged in the production layout (query first) and in a
passage-first layout, one query at a time, and the server's own log line per request
("N prefix-match hit, remaining M prompt tokens to eval") says what was evaluated.

    python -m app.bench.prompt_layout --dataset DIR --base-url URL --model M --server-log FILE

FILE is the log of a llama-cpp-python server (verbose, the default) that nobody else is using.
The first request of each block is left out: it evaluates the whole prompt in either layout.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

import openai

from app.bench.datasets import load_dataset
from app.rerank.judge_prompt import PASSAGE_CLOSE, PASSAGE_OPEN, QUERY_CLOSE, QUERY_OPEN, build_judge_messages

_EVALUATED = re.compile(r"prefix-match hit, remaining (\d+) prompt tokens to eval")


def passage_first(query: str, passage: str) -> list[dict[str, str]]:
    """The production messages with the user turn reordered: passage, question, then query."""
    system, user = build_judge_messages(query, passage, mode="logprobs")
    head, _, passage_block = user["content"].partition(f"\n\n{PASSAGE_OPEN}\n")
    query_block, _, question = head.partition(f"\n{QUERY_CLOSE}\n\n")
    question = question.replace("passage below", "passage above")
    reordered = f"{PASSAGE_OPEN}\n{passage_block}\n\n{question}\n\n{query_block}\n{QUERY_CLOSE}"
    assert reordered.startswith(PASSAGE_OPEN) and PASSAGE_CLOSE in reordered and QUERY_OPEN in reordered
    return [system, {"role": "user", "content": reordered}]


def evaluated_tokens(log: Path, offset: int, timeout_s: float = 5.0) -> tuple[int | None, int]:
    """The 'remaining M' of the first request logged after `offset`, and the new offset."""
    deadline = time.monotonic() + timeout_s
    while True:
        text = log.read_bytes()[offset:].decode("utf-8", "replace")
        match = _EVALUATED.search(text)
        if match or time.monotonic() > deadline:
            return (int(match.group(1)) if match else None), offset + len(text.encode())
        time.sleep(0.1)


def measure(args) -> dict:
    dataset = load_dataset(args.dataset)
    client = openai.OpenAI(base_url=args.base_url, api_key="unused", timeout=600, max_retries=0)
    log = Path(args.server_log)
    rows = {"query_first": [], "passage_first": []}
    prompt_tokens = {"query_first": [], "passage_first": []}
    for query in dataset.queries[: args.queries]:
        passages = [c.text for c in query.candidates[: args.passages + 1]]
        for layout, build in (("query_first", lambda q, p: build_judge_messages(q, p, mode="logprobs")),
                              ("passage_first", passage_first)):
            for index, passage in enumerate(passages):
                offset = log.stat().st_size
                response = client.chat.completions.create(
                    model=args.model, messages=build(query.text, passage), max_tokens=1, temperature=0)
                evaluated, _ = evaluated_tokens(log, offset)
                if index == 0:
                    continue  # warm-up: nothing shared with the previous block yet
                rows[layout].append(evaluated if evaluated is not None else response.usage.prompt_tokens)
                prompt_tokens[layout].append(response.usage.prompt_tokens)
    mean = {layout: sum(values) / len(values) for layout, values in rows.items()}
    return {
        "queries": args.queries, "passages_per_query": args.passages, "model": args.model,
        "prompt_tokens_per_passage": {k: round(sum(v) / len(v), 1) for k, v in prompt_tokens.items()},
        "evaluated_tokens_per_passage": {k: round(v, 1) for k, v in mean.items()},
        "saving_per_passage": round(mean["passage_first"] - mean["query_first"], 1),
        "saving_share": round(1 - mean["query_first"] / mean["passage_first"], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--server-log", required=True)
    parser.add_argument("--queries", type=int, default=3)
    parser.add_argument("--passages", type=int, default=5)
    print(json.dumps(measure(parser.parse_args()), indent=2))


if __name__ == "__main__":
    main()
