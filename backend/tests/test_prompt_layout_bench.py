"""`python -m bench prompt-layout`: what the query-first judge prompt saves on a server that
reuses the prefix it cached from the previous request, measured over real HTTP against a scripted
server that keeps llama-server's one-slot prefix cache (its `timings`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.prompt_layout import PromptLayoutArgs, evaluated_tokens, measure, passage_first
from graphiti_llm_rerank.judge_prompt import PASSAGE_OPEN, QUERY_CLOSE, build_judge_messages
from tests.support.scripted_llm import ScriptedLLMServer, raw_json

BACKEND = Path(__file__).resolve().parents[1]
PASSAGES = ["The ferry leaves the harbour every hour from six in the morning.",
            "Tickets for the island ferry are sold at the kiosk on the quay.",
            "The lighthouse on the point was built in 1871 and still works.",
            "Winter storms cancel the last ferry of the day about once a week."]


def dataset(folder: Path) -> Path:
    (folder / "queries.tsv").write_text("1\twhen does the ferry leave\n2\twhere are ferry tickets sold\n")
    (folder / "qrels.txt").write_text("1 0 d0 1\n2 0 d1 1\n")
    (folder / "candidates.jsonl").write_text("".join(json.dumps({"qid": qid, "candidates": [
        {"docid": f"d{i}", "rank": i + 1, "text": text} for i, text in enumerate(PASSAGES)]}) + "\n" for qid in "12"))
    return folder


class PrefixCache:
    """A responder that counts words as tokens and, like llama-server with one slot, evaluates only
    what follows the prefix shared with the previous request."""

    def __init__(self) -> None:
        self.previous: list[str] = []

    def __call__(self, request):
        tokens = " ".join(str(m["content"]) for m in request.messages).split()
        shared = next((i for i, (a, b) in enumerate(zip(tokens, self.previous)) if a != b),
                      min(len(tokens), len(self.previous)))
        self.previous = tokens
        return raw_json({"object": "chat.completion", "model": request.model,
                         "choices": [{"index": 0, "message": {"role": "assistant", "content": "yes"},
                                      "finish_reason": "stop"}],
                         "usage": {"prompt_tokens": len(tokens), "completion_tokens": 1, "total_tokens": len(tokens) + 1},
                         "timings": {"prompt_n": len(tokens) - shared, "cache_n": shared}})


def test_query_first_evaluates_only_the_passage_on_a_prefix_cache(tmp_path):
    with ScriptedLLMServer(PrefixCache()) as server:
        result = measure(PromptLayoutArgs(dataset=str(dataset(tmp_path)), base_url=server.base_url, model="m",
                                            queries=2, passages=3))
        assert server.count == 2 * 2 * 4  # queries x layouts x (a warm-up and three passages)
    tokens, evaluated = result["prompt_tokens_per_passage"], result["evaluated_tokens_per_passage"]
    assert tokens["query_first"] == tokens["passage_first"]  # the same words, reordered
    # Query first: only the passage and its closing tag. Passage first: the whole user turn after its
    # opening tag (the system turn is shared in both layouts).
    queries = ["when does the ferry leave", "where are ferry tickets sold"]
    assert evaluated["query_first"] == round(sum(len(text.split()) + 1 for text in PASSAGES[1:]) / 3, 1)
    assert evaluated["passage_first"] == round(sum(
        len(passage_first(query, text)[1]["content"].split()) - 1 for query in queries for text in PASSAGES[1:]) / 6, 1)
    assert result["saving_per_passage"] == round(evaluated["passage_first"] - evaluated["query_first"], 1) > 0
    assert 0 < result["saving_share"] < 1


def test_passage_first_is_the_same_prompt_reordered():
    system, user = build_judge_messages("when does it leave", "Every hour.", mode="logprobs")
    reordered_system, reordered = passage_first("when does it leave", "Every hour.")
    assert reordered_system == system
    assert reordered["content"].startswith(PASSAGE_OPEN) and reordered["content"].endswith(QUERY_CLOSE)
    assert "passage above" in reordered["content"] and "passage below" in user["content"]
    assert sorted(reordered["content"].replace("above", "below").split()) == sorted(user["content"].split())


def test_without_timings_every_prompt_token_counts():
    assert evaluated_tokens({"usage": {"prompt_tokens": 40}}) == 40
    assert evaluated_tokens({"usage": {"prompt_tokens": 40}, "timings": {"prompt_n": 7}}) == 7


def test_the_command_prints_its_figures(tmp_path):
    with ScriptedLLMServer(PrefixCache()) as server:
        run = subprocess.run([sys.executable, "-m", "bench", "prompt-layout",
                              "--dataset", str(dataset(tmp_path)),
                              "--base-url", server.base_url, "--model", "m", "--queries", "1", "--passages", "2"],
                             cwd=BACKEND, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    printed = json.loads(run.stdout)
    assert printed["queries"] == 1 and printed["passages_per_query"] == 2 and printed["saving_per_passage"] > 0
