"""How close a judge server comes to its physical limit on the reranker's own workload.

The workload is the judge's wire traffic: for each query, every candidate passage judged once with
the production prompt (`build_judge_messages`, yes/no logprobs, max_tokens 1, temperature 0),
RERANKER_MAX_PARALLEL requests in flight at a time, as `OllamaReranker` sends them.

The physical limit of one judgement is the prompt tokens the server really evaluated for it (after
reusing a cached prefix) divided by the server's prompt throughput, measured on its own with a
long uncached prompt (or given: `--throughput`, e.g. `llama-bench -p 128 -n 0`'s rate, to compare
servers against one limit). The ratio wall time per passage / limit says how much is spent on anything
else (HTTP, the server's Python, the chat template, logits, queueing); the breakdown says where.

What the server evaluated comes from the `timings` a llama.cpp server (`llama-server`) adds to each
answer, or, for llama-cpp-python, from its verbose log (`--server-log`).

    python -m bench judge-speed --dataset DIR --base-url URL --model M [--server-log FILE]
"""

from __future__ import annotations

import asyncio
import re
import statistics
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.datasets import load_dataset
from app.config import DEFAULT_MAX_DOCUMENT_CHARS
from graphiti_llm_rerank.judge import TOP_LOGPROBS
from graphiti_llm_rerank.judge_prompt import build_judge_messages

# llama-cpp-python's verbose log, one block per request
_PROMPT_EVAL = re.compile(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens")
_GENERATION = re.compile(r"\beval time =\s*([\d.]+) ms /\s*(\d+) runs")


@dataclass
class ServerWork:
    """What the server says it did: prompt tokens evaluated and the time spent on them and on generation."""

    prompt_tokens: int = 0
    prompt_ms: float = 0.0
    generation_ms: float = 0.0
    requests: int = 0

    def add(self, other: ServerWork) -> None:
        self.prompt_tokens += other.prompt_tokens
        self.prompt_ms += other.prompt_ms
        self.generation_ms += other.generation_ms
        self.requests += other.requests


def work_from_timings(answer: dict) -> ServerWork | None:
    timings = answer.get("timings")
    if not isinstance(timings, dict):
        return None
    return ServerWork(int(timings.get("prompt_n", 0)), float(timings.get("prompt_ms", 0.0)),
                      float(timings.get("predicted_ms", 0.0)), 1)


def work_from_log(text: str) -> ServerWork:
    work = ServerWork()
    for ms, tokens in _PROMPT_EVAL.findall(text):
        work.add(ServerWork(int(tokens), float(ms), 0.0, 1))
    work.generation_ms = sum(float(ms) for ms, _ in _GENERATION.findall(text))
    return work


class ServerLog:
    """Reads what a llama-cpp-python server logged since the last read."""

    def __init__(self, path: str | None):
        self.path = Path(path) if path else None
        self.offset = self.path.stat().st_size if self.path else 0

    def read_new(self) -> str:
        if self.path is None:
            return ""
        time.sleep(0.2)  # the server writes its perf lines just after answering
        data = self.path.read_bytes()[self.offset:]
        self.offset += len(data)
        return data.decode("utf-8", "replace")


@dataclass(frozen=True)
class JudgeSpeedArgs:
    """What `bench judge-speed` measures: the first `queries` of `dataset`, their first `passages`
    candidates cut to `max_chars`, `parallel` requests in flight; `throughput` (prompt tokens/s)
    replaces the measured one, `server_log` is llama-cpp-python's log, `label` names the server."""

    dataset: str | Path
    base_url: str
    model: str
    server_log: str | None = None
    queries: int = 2
    passages: int = 10
    parallel: int = 4
    max_chars: int = DEFAULT_MAX_DOCUMENT_CHARS
    throughput: float | None = None
    label: str | None = None


@dataclass
class Measurement:
    passages: int = 0
    wall_s: float = 0.0
    work: ServerWork = field(default_factory=ServerWork)


class JudgeWorkload:
    def __init__(self, base_url: str, model: str, parallel: int, api_key: str = "unused"):
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.parallel = parallel
        self.headers = {"Authorization": f"Bearer {api_key}"}

    async def _judge(self, client: httpx.AsyncClient, gate: asyncio.Semaphore, messages: list[dict]) -> dict:
        body = {"model": self.model, "messages": messages, "temperature": 0, "max_tokens": 1,
                "logprobs": True, "top_logprobs": TOP_LOGPROBS}
        async with gate:
            response = await client.post(self.url, json=body, headers=self.headers)
        response.raise_for_status()
        return response.json()

    async def run_query(self, query: str, passages: list[str]) -> tuple[float, list[dict]]:
        gate = asyncio.Semaphore(self.parallel)
        async with httpx.AsyncClient(timeout=900) as client:
            started = time.perf_counter()
            answers = await asyncio.gather(*(
                self._judge(client, gate, build_judge_messages(query, p, mode="logprobs")) for p in passages))
            return time.perf_counter() - started, list(answers)

    async def prompt_throughput(self, tokens_wanted: int = 400, repeats: int = 2) -> float:
        """Prompt tokens per second on one long prompt that no cache holds, one request at a time."""
        rates, from_wall_time = [], []
        async with httpx.AsyncClient(timeout=900) as client:
            for _ in range(repeats):
                words = " ".join(f"w{uuid.uuid4().hex[:6]}" for _ in range(tokens_wanted // 4))
                body = {"model": self.model, "temperature": 0, "max_tokens": 1,
                        "messages": [{"role": "user", "content": words}]}
                started = time.perf_counter()
                response = await client.post(self.url, json=body, headers=self.headers)
                elapsed = time.perf_counter() - started
                response.raise_for_status()
                answer = response.json()
                work = work_from_timings(answer)
                if work and work.prompt_ms:
                    rates.append(work.prompt_tokens / (work.prompt_ms / 1000))
                else:
                    from_wall_time.append(answer.get("usage", {}).get("prompt_tokens", 0) / elapsed)
        return statistics.median(rates or from_wall_time)


def measure(args: JudgeSpeedArgs) -> dict:
    dataset = load_dataset(args.dataset)
    workload = JudgeWorkload(args.base_url, args.model, args.parallel)
    server_log = ServerLog(args.server_log)
    # warm-up: loads weights into the page cache and fills the template cache
    asyncio.run(workload.run_query("warm up", ["a short passage"]))
    server_log.read_new()
    throughput_from = "timings"
    throughput = asyncio.run(workload.prompt_throughput())
    if args.throughput:
        throughput, throughput_from = args.throughput, "given"
    elif args.server_log:
        logged = work_from_log(server_log.read_new())
        if logged.prompt_ms:
            throughput, throughput_from = logged.prompt_tokens / (logged.prompt_ms / 1000), "log"
    total = Measurement()
    per_query = []
    for query in dataset.queries[: args.queries]:
        passages = [c.text[: args.max_chars] for c in query.candidates[: args.passages]]
        wall, answers = asyncio.run(workload.run_query(query.text, passages))
        work = ServerWork()
        for answer in answers:
            timed = work_from_timings(answer)
            if timed:
                work.add(timed)
        if not work.requests:
            work = work_from_log(server_log.read_new())
        per_query.append(round(wall / len(passages) * 1000))
        total.passages += len(passages)
        total.wall_s += wall
        total.work.add(work)
    return summarise(total, throughput, throughput_from, per_query, args)


def summarise(total: Measurement, throughput: float, throughput_from: str, per_query: list[int],
              args: JudgeSpeedArgs) -> dict:
    per_passage_ms = total.wall_s / total.passages * 1000
    evaluated = total.work.prompt_tokens / max(1, total.work.requests)
    limit_ms = evaluated / throughput * 1000
    prompt_ms = total.work.prompt_ms / total.passages
    generation_ms = total.work.generation_ms / total.passages
    return {
        "server": args.label or args.base_url, "model": args.model, "parallel": args.parallel,
        "queries": len(per_query), "passages": total.passages,
        "wall_ms_per_passage": round(per_passage_ms),
        "wall_ms_per_passage_by_query": per_query,
        "evaluated_tokens_per_passage": round(evaluated, 1),
        "prompt_throughput_tok_s": round(throughput, 1), "throughput_from": throughput_from,
        "physical_limit_ms_per_passage": round(limit_ms),
        "ratio_to_limit": round(per_passage_ms / limit_ms, 2) if limit_ms else None,
        # server-side time per passage: with parallel slots these overlap, so they can add up past the wall
        "server_prompt_ms_per_passage": round(prompt_ms),
        "server_generation_ms_per_passage": round(generation_ms),
        "outside_the_model_ms_per_passage": round(per_passage_ms - prompt_ms - generation_ms),
    }
