"""`flask --app app demo` (`make demo`): the report tools' graph search with and without the LLM reranker.

Steps: pick the reranker's model server (an Ollama answering at RERANKER_BASE_URL, else the local
llama.cpp server, installed, assembled and started when needed), start the embedded FalkorDB,
import the shipped sample graph once, then for each demo question print the top results of the
first-stage search and of the reranked search side by side, with scores, time and how many are on
topic. Whatever the demo started is stopped again on success, on error and on Ctrl-C/SIGTERM; a
model server that was already running is left running.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time

import click
from flask import current_app
from flask.cli import with_appcontext

from app.cli.stack_env import apply_to_config
from app.config import Config
from app.demo.comparison import Comparison, Tally
from app.demo.reranker_endpoint import LocalServerLease, RerankerEndpoint, find_configured_server
from app.demo.sample_graph import DEMO_GRAPH_ID, ensure_sample_graph, load_questions
from app.demo.side_by_side import LEGEND, render_question, terminal_width
from app.graph.runtime import GraphitiAdapter, graphiti_is_built, reset_graphiti

logger = logging.getLogger(__name__)

EXIT_INTERRUPTED = 130


def _step(message: str) -> None:
    click.echo(f"==> {message}")


@contextlib.contextmanager
def _sigterm_as_interrupt():
    """SIGTERM unwinds like Ctrl-C, so the cleanup below runs for `kill` too."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class DemoSession:
    """What one demo run started, so that exactly that is stopped again."""

    def __init__(self, config: Config):
        self.config = config
        self.lease: LocalServerLease | None = None
        self.endpoint: RerankerEndpoint | None = None
        self.built_graph_runtime = False
        self.embedded_db = False
        self.comparison: Comparison | None = None

    def choose_endpoint(self) -> RerankerEndpoint:
        found, why_not = find_configured_server(self.config)
        if found is not None:
            _step(f"Reranker: {found.describe()} ({found.note}); the local model server is not needed")
            self.endpoint = found
            return found
        _step(f"Reranker: the local model server ({why_not}). The very first run installs "
              "llama-cpp-python and assembles the model: several minutes, once")
        self.lease = LocalServerLease(self.config)
        started = time.perf_counter()
        self.endpoint = self.lease.start()
        click.echo(f"    {self.endpoint.describe()}: {self.endpoint.note} ({time.perf_counter() - started:.1f} s)")
        return self.endpoint

    def start_graph(self):
        self.built_graph_runtime = not graphiti_is_built()
        started = time.perf_counter()
        runtime = GraphitiAdapter(self.config).runtime
        self.embedded_db = runtime.embedded_db is not None
        where = (f"embedded FalkorDB on 127.0.0.1:{runtime.embedded_db.port}, data in {runtime.embedded_db.data_dir}"
                 if runtime.embedded_db else f"{runtime.config.graph_backend} as configured")
        _step(f"Graph database: {where} ({time.perf_counter() - started:.1f} s)")
        return runtime

    def cleanup(self) -> None:
        if self.comparison is not None:
            with contextlib.suppress(Exception):
                self.comparison.close()
        if self.built_graph_runtime:
            reset_graphiti()
            self.built_graph_runtime = False
            if self.embedded_db:
                click.echo("Stopped the embedded graph database.")
        if self.lease is not None:
            if self.lease.release():
                click.echo("Stopped the local model server that the demo started.")
            self.lease = None


def _import_sample_graph(graph, graph_id: str, reimport: bool) -> None:
    _step(f"Sample graph '{graph_id}': Port Alder's drinking-water crisis")
    started = time.perf_counter()
    outcome = ensure_sample_graph(
        graph, graph_id, force=reimport,
        on_import=lambda n: click.echo(f"    importing {n} facts (embedding them on this CPU takes a few seconds)..."),
    )
    took = time.perf_counter() - started
    if outcome.imported:
        click.echo(f"    imported {outcome.facts} facts between {outcome.entities} entities ({took:.1f} s)")
    else:
        click.echo(f"    already imported, unchanged: {outcome.facts} facts, {outcome.entities} entities")


def _summary(tally: Tally, model: str, top_k: int, total_s: float) -> str:
    return (
        f"Summary: on-topic facts in the top {top_k} over {tally.questions} questions: "
        f"{tally.baseline_on_topic}/{tally.shown} without reranking, "
        f"{tally.reranked_on_topic}/{tally.shown} reranked by {model}; "
        f"search time {tally.baseline_seconds:.1f} s vs {tally.reranked_seconds:.1f} s; "
        f"demo total {total_s:.0f} s."
    )


def _closing_notes(session: DemoSession, tally: Tally) -> list[str]:
    endpoint = session.endpoint
    notes = []
    if tally.fallbacks:
        notes.append(f"Note: for {tally.fallbacks} question(s) the model gave no answer, so those right-hand "
                     "columns keep the first-stage order (see the warnings above; on a busy CPU, raise "
                     "RERANKER_TIMEOUT_S and RERANKER_DEADLINE_S).")
    notes.append("Model scores are cached inside one process only: the next `make demo` asks the model "
                 f"again (about {tally.reranked_seconds:.0f} s of reranking here); model, wheel and graph stay cached.")
    if endpoint is not None and endpoint.kind == "local" and session.lease and session.lease.started_here:
        notes.append("Serve the API on the same stack: `make local-llm && make serve` "
                     "(`make local-llm-stop` stops the model server afterwards).")
    else:
        notes.append("Serve the API on the same stack: `make serve` (the model server is still running).")
    return notes


@click.command("demo")
@click.option("--top-k", default=3, show_default=True, type=click.IntRange(1, 20),
              help="results shown per column (the reranker judges RERANKER_CANDIDATES times as many)")
@click.option("--questions", "max_questions", type=click.IntRange(1), default=None,
              help="only the first N demo questions")
@click.option("--graph-id", default=DEMO_GRAPH_ID, show_default=True, help="graph the sample is imported into")
@click.option("--reimport", is_flag=True, help="import the sample graph again even when unchanged")
@with_appcontext
def demo_command(top_k: int, max_questions: int | None, graph_id: str, reimport: bool) -> None:
    """Compare the report tools' graph search without and with the LLM reranker on the sample graph."""
    started = time.perf_counter()
    # Run without make, the same embedded defaults apply (variables the user set still win).
    config = apply_to_config(current_app.config["APP_CONFIG"], "demo")
    logging.getLogger().setLevel(config.log_level)  # the app configured logging before this default
    questions = load_questions()[:max_questions]
    session = DemoSession(config)
    try:
        with _sigterm_as_interrupt():
            endpoint = session.choose_endpoint()
            runtime = session.start_graph()
            _import_sample_graph(GraphitiAdapter(config).graph, graph_id, reimport)
            session.comparison = comparison = Comparison(runtime, endpoint, graph_id, top_k)
            comparison.warm_up()
            _step(f"{len(questions)} questions; the reranker judges the first {comparison.candidates} "
                  f"results of each with {endpoint.model}")
            click.echo(LEGEND)
            width = terminal_width()
            for number, question in enumerate(questions, start=1):
                click.echo(f"\n    searching and reranking question {number} of {len(questions)}...")
                left, right = comparison.run(question)
                click.echo(render_question(number, len(questions), question, left, right, width))
            click.echo("\n" + _summary(comparison.tally, endpoint.model, top_k, time.perf_counter() - started))
            for note in _closing_notes(session, comparison.tally):
                click.echo(note)
    except KeyboardInterrupt:
        click.echo("\nInterrupted: stopping what the demo started...", err=True)
        raise click.exceptions.Exit(EXIT_INTERRUPTED) from None
    except click.ClickException:
        raise
    except Exception as error:
        logger.debug("Demo failed", exc_info=True)
        raise click.ClickException(f"{type(error).__name__}: {error}") from error
    finally:
        session.cleanup()


commands = [demo_command]
