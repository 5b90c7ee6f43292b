"""Flask CLI commands (`flask --app app <command>`): serve, worker, demo, import-facts, export-graph, import-graph.
The benchmarks and the load test are `python -m bench` (backend/bench/), outside the app."""

from __future__ import annotations

from flask import Flask


def register_cli(app: Flask) -> None:
    # Imported here, not at the top: `python -m app.cli.stack_env` (make demo/serve/bench) imports this
    # package first, and the commands import stack_env, which runpy would then find already loaded.
    from app.cli import demo, graph_transfer, import_facts, serve, worker

    for module in (serve, worker, demo, import_facts, graph_transfer):
        for command in module.commands:
            app.cli.add_command(command)
