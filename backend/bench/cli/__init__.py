"""`python -m bench <command>` (from backend/): every benchmark and the load test, one module per command
in this package.

What the commands share lives here: the group, the options several commands take, the facts a
result records about its run (date, machine, command line), the bench-extra check, the up-front
check that the model servers a command needs answer, and the one place where the failures a
benchmark expects (a dataset it cannot read, a refused confirmation, a model server or database
that stops answering) become one line instead of a traceback. The measuring code is in bench/.
"""

from __future__ import annotations

import importlib
import os
import platform
import shlex
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import click
import httpx
import openai

from flask import Flask
from flask.cli import ScriptInfo

from app import configure_logging, create_app
from app.config import REPO_ROOT, RERANKER_SCORE_MODES, Config
from app.graph.unavailable import as_unavailable
from app.local_llm import LocalServerError, base_url as local_server_url
from app.local_llm.ollama import base_url as ollama_url
from bench.datasets import DatasetError
from bench.estimate import DEFAULT_CONFIRM_ABOVE, ConfirmationRefused
from graphiti_llm_rerank import redact_url

DEFAULT_OUTPUT_ROOT = REPO_ROOT / "bench-out"

# What the `bench` extra of pyproject.toml adds (the production image leaves it out): trec_eval's
# measures, and the plot each quality benchmark writes at its end.
BENCH_EXTRAS = {"ir_measures": "ir-measures", "matplotlib": "matplotlib"}

# The up-front check of a model server: connecting is all it asks, so a short connect timeout; a
# server busy with another request may take a while to answer, and any answer counts.
PROBE_CONNECT_S = 3.0
PROBE_READ_S = 10.0


class BenchGroup(click.Group):
    """The `bench` group: a failure every benchmark expects ends its command with one line."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Exception as error:
            line = expected_failure(error)
            if line is None:
                raise
            raise click.ClickException(line) from None


@click.group("bench", cls=BenchGroup)
def bench_group() -> None:
    """Benchmarks of reranking quality and cost, search, ingestion and the judge server, and the load test
    (see `python -m bench COMMAND --help`)."""


def expected_failure(error: BaseException) -> str | None:
    """The one line for a failure a benchmark expects, found anywhere in `error`'s chain; None for a bug."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, (DatasetError, ConfirmationRefused, LocalServerError)):
            return _first_line(current)
        if isinstance(current, (openai.APIConnectionError, httpx.TransportError)):
            return (f"The model server at {_request_url(current)} stopped answering ({_reason(current)}). "
                    f"{_how_to_start()}, then run the same command again.")
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    try:
        config = Config.from_env()
    except ValueError:
        return None
    unavailable = as_unavailable(error, config)
    return _first_line(unavailable) if unavailable is not None else None


def require_answering(url: str, what: str, otherwise: str) -> None:
    """Refuse in one line, before any dataset is loaded or graph imported, when nothing answers at `url`
    (`what`: which server, as the user knows it; `otherwise`: how to give it one)."""
    try:
        httpx.get(url.rstrip("/") + "/models", timeout=httpx.Timeout(PROBE_READ_S, connect=PROBE_CONNECT_S))
    except (httpx.ConnectError, httpx.ConnectTimeout, httpx.UnsupportedProtocol, httpx.InvalidURL) as error:
        raise click.ClickException(
            f"{what} at {redact_url(url)} does not answer ({_reason(error)}). {otherwise}.") from None
    except httpx.HTTPError:
        pass  # it is there, only slow or without /models: the run itself says more if it fails


def require_judge(url: str, option: str = "--base-url") -> None:
    require_answering(url, "The judge server", f"{_how_to_start()}, or give {option}")


def require_llm(url: str, option: str = "--base-url") -> None:
    require_answering(url, "The model server", f"{_how_to_start()}, or give {option}")


def require_embedder(config: Config) -> None:
    """An embedding server is needed only with EMBEDDING_PROVIDER=openai; `local` runs in the process."""
    if config.embedding_provider == "openai":
        require_answering(config.embedding_base_url, "The embedding server (EMBEDDING_PROVIDER=openai)",
                          "Start it, or set EMBEDDING_PROVIDER=local for the in-process embedder "
                          "(`make bench` sets it when unset)")


def _how_to_start() -> str:
    try:
        config = Config.from_env()
        local, ollama = local_server_url(config), ollama_url(config)
    except ValueError:
        local, ollama = "the local model server", "Ollama"
    return f"Start the local model server with `make local-llm` ({local}) or Ollama with `make ollama` ({ollama})"


def _request_url(error: BaseException) -> str:
    try:
        return redact_url(str(error.request.url))  # type: ignore[attr-defined]
    except (AttributeError, RuntimeError):  # httpx raises RuntimeError when an error carries no request
        return "(unknown URL)"


def _reason(error: BaseException) -> str:
    cause = error.__cause__ or error.__context__
    text = str(error) or (str(cause) if cause else "") or type(error).__name__
    return _first_line(text)


def _first_line(error: BaseException | str) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def judge_and_strategies(config: Config, strategies: str, score_mode: str | None, param_hint: str,
                         **model_options) -> tuple:
    """The judge's settings with the command's model options, and the strategies it names (a bad name is a
    usage error naming the option)."""
    from bench.rerankers import parse_strategies, with_model_options

    model_config = with_model_options(config, **model_options)
    try:
        return model_config, parse_strategies(strategies, score_mode or config.reranker_score_mode)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint=param_hint) from None


def require_bench_extras(command: str) -> None:
    """Refuse up front, with the install line, when the bench extra is missing: otherwise the
    command fails on an ImportError, or only at its end when the plot is drawn."""
    missing = []
    for module, package in BENCH_EXTRAS.items():
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(package)
    if missing:
        raise click.ClickException(
            f"`python -m bench {command}` needs {', '.join(missing)} (the bench extra): "
            "pip install -e 'backend[bench]', or `make venv`, which installs it")


def run_facts() -> dict:
    """Where and when a result was measured, for the report."""
    return {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}, "
                   f"Python {platform.python_version()}",
    }


def command_line() -> str:
    """The command as typed, for the report: '' when the commands run other than as `python -m bench` (tests)."""
    program = Path(sys.argv[0])
    if (program.parent.name, program.name) != ("bench", "__main__.py"):
        return ""
    return "python -m bench " + " ".join(shlex.quote(arg) for arg in sys.argv[1:])


def ask(question: str) -> bool:
    return click.confirm(question, default=False, err=True)


@contextmanager
def resumable(output: Path, finished: str, interrupted: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
    """Ctrl-C (or the runner's own `interrupted` exception) ends the command with where the finished
    `finished` are kept and exit status 130; the same command resumes from them."""
    try:
        yield
    except (KeyboardInterrupt, *interrupted):
        click.echo(f"Interrupted: finished {finished} are kept in {output}; run the same command to resume.",
                   err=True)
        sys.exit(130)


def _apply(function: Callable, options: list[Callable]) -> Callable:
    for option in reversed(options):
        function = option(function)
    return function


def server_options(what: str, required: bool = True, default_note: str = ""):
    """--base-url and --model of the one model server a command measures."""
    return lambda function: _apply(function, [
        click.option("--base-url", required=required, default=None,
                     help=f"OpenAI-compatible /v1 URL of the {what}{default_note and f' (default: {default_note})'}"),
        click.option("--model", required=required, default=None, help=f"the {what}'s model"),
    ])


def label_option(function):
    return click.option("--label", default=None, help="name of the server in the output (default: --base-url)")(
        function)


def model_options(function):
    """Options shared by the quality benchmarks: which judge model, how hard to push it, the cost gate."""
    return _apply(function, [
        click.option("--base-url", default=None, help="judge server (default: RERANKER_BASE_URL)"),
        click.option("--model", default=None, help="judge model (default: RERANKER_MODEL)"),
        click.option("--score-mode", type=click.Choice(RERANKER_SCORE_MODES), default=None,
                     help="default score mode (default: RERANKER_SCORE_MODE)"),
        click.option("--concurrency", type=click.IntRange(min=1), default=None,
                     help="model requests in flight per query (default: RERANKER_MAX_PARALLEL)"),
        click.option("--timeout-s", type=click.FloatRange(min=0.01), default=None,
                     help="per-request timeout (default: RERANKER_TIMEOUT_S)"),
        click.option("--deadline-s", type=click.FloatRange(min=0.01), default=None,
                     help="per rank call deadline (default: RERANKER_DEADLINE_S)"),
        click.option("--max-queries", type=click.IntRange(min=1), default=None, help="first N queries"),
        click.option("--output", type=click.Path(file_okay=False, path_type=Path), default=None,
                     help="results folder (default: bench-out/<dataset>-<benchmark>)"),
        click.option("--yes", is_flag=True, help="run even when the estimate is above --confirm-above"),
        click.option("--report-only", is_flag=True,
                     help="no model call: write the reports from the stored results of these arguments"),
        click.option("--confirm-above", type=click.IntRange(min=0), default=DEFAULT_CONFIRM_ABOVE,
                     show_default=True, help="model calls allowed without --yes"),
    ])


def print_summary(results: dict, output: Path) -> None:
    from bench.report import markdown_table

    click.echo(markdown_table(results))
    click.echo(f"Wrote {output}/results.json, results.md, quality_latency.png")


def app_script_info(app: Flask | None = None) -> ScriptInfo:
    """Where a command's app comes from: the commands that read the app's settings run in its app context
    (`with_appcontext`), which builds the app from this, as `flask --app app` builds it; `app` (the tests')
    instead of `create_app()` when given."""
    return ScriptInfo(create_app=create_app if app is None else (lambda: app))


def main(args: list[str] | None = None) -> None:
    """`python -m bench`: the group with the app's logging, as every entry point of the app has it."""
    configure_logging()
    bench_group.main(args=args, prog_name="python -m bench", obj=app_script_info())


# Each module adds its command to bench_group; imported last, since they use the helpers above.
from bench.cli import (  # noqa: E402
    choose_fusion, combine, distractor_judge, filter_cost, first_stage, first_stage_time, graph, import_search,
    ingest_speed, injection, judge_speed, load, prompt_layout, question_pool, replicas, report, rerank, scale,
    temporal, vector_recall,
)

__all__ = ["app_script_info", "bench_group", "main", "choose_fusion", "combine", "distractor_judge", "filter_cost",
           "first_stage", "first_stage_time", "graph", "import_search", "ingest_speed", "injection", "judge_speed", "load",
           "prompt_layout", "question_pool", "replicas", "report", "rerank", "scale", "temporal", "vector_recall"]
