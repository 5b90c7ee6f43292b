"""Reproducible benchmarks: reranking quality and cost on relevance data, and search in the graph.

`flask bench rerank` (runner.py) reranks first-stage candidates of a TREC-style dataset folder;
`flask bench graph` (graph_bench.py) imports SciFact into a graph and searches it with the
reranker off and on. Both write results.json, results.md and quality_latency.png (report.py).
"""
