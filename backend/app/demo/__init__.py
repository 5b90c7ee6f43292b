"""The `make demo` pieces: the shipped sample graph, the reranker endpoint, the side-by-side view.

The click command that ties them together is `app.cli.demo` (`flask --app app demo`).
"""
