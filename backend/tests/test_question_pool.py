"""`python -m bench question-pool` on the shipped sample graph: gold facts placed in a question's deep pool by the
first stage's order (checked against a plain search of the API) and by the cheap order (which is the first
stage's own when the cosine has no share), with no model call."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from bench.question_pool import depths_for, run
from bench.report_sets import load_set, select
from bench.report_bench import graph_id_of
from tests.support.bench_cli import bench_cli

SET_FILE = Path(__file__).parents[1] / "bench" / "data" / "report_bench.json"


def test_gold_places_by_both_orders_and_the_pooled_shares(backend, tmp_path):
    app, client = backend()
    data = json.loads(SET_FILE.read_text(encoding="utf-8"))
    crisis = next(item for item in data["requirements"] if item["id"] == "crisis")
    # A question that is one gold fact's own text: that fact leads both orders.
    exact_fact = crisis["gold"][0]["facts"][0]
    exact = {**crisis, "id": "exact", "requirement": exact_fact}
    set_file = tmp_path / "set.json"
    set_file.write_text(json.dumps({**data, "requirements": [crisis, exact]}), encoding="utf-8")

    result = bench_cli(app=app, args=["question-pool", "--requirements", str(set_file),
                                      "--pool", "60"])
    assert result.exit_code == 0, result.output
    rows = {line.split(" | ")[0].strip("| "): line for line in result.output.splitlines() if line.startswith("| ")}
    assert rows["requirement"].count("within") == len(depths_for(60)) == 6  # 10 ... 50, then the pool
    pooled = json.loads(result.output.strip().splitlines()[-1])
    assert pooled["requirements"] == 2 and pooled["pool"] == 60 and 0 < pooled["in_pool"] <= pooled["gold_facts"]
    assert pooled["share_within_depth"]["60"] == {"first_stage": 1.0, "cheap": 1.0}
    first_within_10, cheap_within_10 = map(int, rows["exact"].split(" | ")[2].split(" / "))
    assert first_within_10 >= 1 and cheap_within_10 >= 1

    # The first stage's places are where the API's reranker-off search puts the gold facts.
    requirement_set = load_set("sample", set_file)
    config = app.config["APP_CONFIG"]
    places = {p.id: p for p in run(config, requirement_set, requirement_set.requirements, 60)}
    hits = client.post(f"/api/graph/{graph_id_of(requirement_set)}/search",
                       json={"query": crisis["requirement"], "limit": 60}).get_json()["edges"]
    gold = {fact for point in crisis["gold"] for fact in point["facts"]}
    assert places["crisis"].first == tuple(i for i, hit in enumerate(hits) if hit["fact"] in gold)
    assert places["exact"].first[0] == 0 and 0 in places["exact"].cheap
    # The cosine moves the crisis question's gold in the cheap order; without its share, nothing moves.
    assert places["crisis"].cheap != places["crisis"].first
    flat = run(replace(config, reranker_cosine_weight=0.0), requirement_set,
               select(requirement_set.requirements, ["crisis"]), 60)
    assert flat[0].cheap == flat[0].first == places["crisis"].first
