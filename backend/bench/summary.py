"""Per-strategy figures from per-query records: IR measures, latency, model cost, failures."""

from __future__ import annotations

from collections.abc import Mapping

from bench.estimate import TokenPrices
from bench.metrics import MEASURE_KEYS, evaluate, percentile

# Counter deltas each record carries: graphiti_llm_rerank.judge counters, plus the strategy's repairs and ties.
COUNTER_FIELDS = ("calls", "prompt_tokens", "completion_tokens", "invalid_outputs", "fallbacks",
                  "unit_fallbacks", "passage_failures", "cache_hits", "breaker_skips", "embedding_calls",
                  "repairs", "ties")


def counter_delta(before: Mapping, after: Mapping) -> dict[str, int]:
    """Judge counters spent between two snapshots; `calls` are model requests."""
    names = {"calls": "model_requests"}
    return {field: int(after.get(names.get(field, field), 0)) - int(before.get(names.get(field, field), 0))
            for field in COUNTER_FIELDS}


def _total(records: list[dict], field: str) -> float:
    return float(sum(record.get(field) or 0 for record in records))


def prompt_limit_figures(records: list[dict], wall_s: float) -> dict:
    """Wall time per model request against the server's own prompt time for it (llama.cpp timings):
    the tokens it evaluated per request at the prompt rate it measured. Empty for servers without timings."""
    evaluated, eval_s = _total(records, "prompt_tokens_evaluated"), _total(records, "prompt_eval_us") / 1e6
    requests = _total(records, "model_requests")
    if not (evaluated and eval_s and requests and wall_s):
        return {}
    rate = evaluated / eval_s
    return {
        "evaluated_tokens_per_request": round(evaluated / requests, 1),
        "server_prompt_tok_s": round(rate, 1),
        "wall_ms_per_request": round(wall_s / requests * 1000, 1),
        "ratio_to_prompt_limit": round(wall_s / (evaluated / rate), 2),
    }


def summarize(records: list[dict], qrels: Mapping, rel_level: int,
              prices: TokenPrices = TokenPrices()) -> tuple[dict, dict]:
    """(aggregate figures, per-query figures) for one strategy's records."""
    rankings = {record["qid"]: record["ranking"] for record in records}
    per_query, mean = evaluate(qrels, rankings, rel_level)
    count = len(records)
    latencies = [float(record["latency_s"]) for record in records]
    calls = _total(records, "calls")
    wall = sum(latencies)
    aggregate = {key: round(mean[key], 4) for key in MEASURE_KEYS}
    aggregate.update(
        queries=count,
        latency_p50_s=round(percentile(latencies, 0.5), 3),
        latency_p95_s=round(percentile(latencies, 0.95), 3),
        latency_mean_s=round(wall / count, 3) if count else 0.0,
        calls=int(calls),
        calls_per_query=round(calls / count, 2) if count else 0.0,
        estimated_calls_per_query=round(_total(records, "estimated_calls") / count, 2) if count else 0.0,
        prompt_tokens_per_query=round(_total(records, "prompt_tokens") / count, 1) if count else 0.0,
        completion_tokens_per_query=round(_total(records, "completion_tokens") / count, 1) if count else 0.0,
        cost_per_query=round(prices.cost(_total(records, "prompt_tokens"), _total(records, "completion_tokens"))
                             / count, 6) if count else 0.0,
        embedding_calls_per_query=round(_total(records, "embedding_calls") / count, 2) if count else 0.0,
        prompt_tokens_per_call=round(_total(records, "prompt_tokens") / calls, 1) if calls else 0.0,
        invalid_output_rate=round(_total(records, "invalid_outputs") / calls, 4) if calls else 0.0,
        fallbacks=int(_total(records, "fallbacks")),
        unit_fallbacks=int(_total(records, "unit_fallbacks")),
        repairs_per_query=round(_total(records, "repairs") / count, 2) if count else 0.0,
        ties=int(_total(records, "ties")),
        passage_failures=int(_total(records, "passage_failures")),
        cache_hits=int(_total(records, "cache_hits")),
        breaker_skips=int(_total(records, "breaker_skips")),
    )
    if calls and wall:
        # Everything except waiting for the model: prompt building, parsing, scheduling, HTTP client.
        aggregate["overhead_share"] = round(max(0.0, wall - _total(records, "model_wait_s")) / wall, 4)
    aggregate.update(prompt_limit_figures(records, wall))
    repeats = [float(r["repeat_latency_s"]) for r in records if r.get("repeat_latency_s") is not None]
    if repeats:
        aggregate["repeat_latency_p50_ms"] = round(percentile(repeats, 0.5) * 1000, 2)
        aggregate["repeat_latency_max_ms"] = round(max(repeats) * 1000, 2)
        aggregate["repeat_calls"] = int(_total(records, "repeat_calls"))
    figures = {}
    for record in records:
        row = dict(per_query.get(record["qid"], {}))
        row.update({key: value for key, value in record.items() if key not in ("qid", "ranking")})
        row["ranking"] = record["ranking"][:10]
        figures[record["qid"]] = row
    return aggregate, figures


def fell_back(record: Mapping) -> bool:
    """The model never ranked this query (whole-call fallback or open breaker): worth retrying later."""
    return bool(record.get("fallbacks") or record.get("breaker_skips"))
