"""Reproducible benchmarks: the measuring code behind `python -m bench <command>` (bench/cli/).

Quality: `bench rerank` (runner.py) reranks first-stage candidates of a TREC-style dataset folder;
`bench graph` (graph_bench.py) imports SciFact or DL19 into a graph and searches it with the reranker
off and on; both write results.json, results.md and quality_latency.png (report.py), and `bench
combine` joins runs into one table. `bench report` (report_bench.py) scores the report agent against
gold sets in app/data/. Servers and the graph: judge_speed.py, prompt_layout.py, ingest_speed.py,
injection.py (the crafted set in injection_set.py), distractor_judge.py, import_search.py, scale.py.
"""
