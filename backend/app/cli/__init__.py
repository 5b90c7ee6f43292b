"""Flask CLI commands (`flask --app app <command>`): serve, and the areas that add their own."""

from __future__ import annotations

import importlib

from flask import Flask

# Each module exposes `commands`: a list of click commands or groups.
_COMMAND_MODULES = ("app.cli.serve", "app.cli.demo", "app.cli.local_llm", "app.cli.bench", "app.cli.load")


def register_cli(app: Flask) -> None:
    for module_name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name != module_name:
                raise
            continue
        for command in module.commands:
            app.cli.add_command(command)
