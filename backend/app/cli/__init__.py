"""Flask CLI commands (`flask --app app <command>`): serve, and the areas that add their own."""

from __future__ import annotations

from flask import Flask

# Each module exposes `commands`: a list of click commands or groups.
_COMMAND_MODULES = ("app.cli.serve", "app.cli.demo", "app.cli.local_llm", "app.cli.bench", "app.cli.load")


def register_cli(app: Flask) -> None:
    from app import import_present

    for module in import_present(*_COMMAND_MODULES):
        for command in module.commands:
            app.cli.add_command(command)
