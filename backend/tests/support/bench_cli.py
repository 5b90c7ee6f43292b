"""`python -m bench` inside the test's own process, on the test's app when it has one: what Flask's
`app.test_cli_runner()` is for `flask --app app`."""

from __future__ import annotations

from click.testing import CliRunner, Result
from flask import Flask

from bench.cli import app_script_info, bench_group


def bench_cli(args: list[str], app: Flask | None = None, **kwargs) -> Result:
    """`python -m bench ARGS`; a command that reads the app's settings gets `app` (else `create_app()`)."""
    return CliRunner().invoke(bench_group, args, obj=app_script_info(app), **kwargs)
