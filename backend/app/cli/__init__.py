"""Flask CLI commands (`flask --app app <command>`): serve, demo, bench, load."""

from __future__ import annotations

from flask import Flask

from app.cli import bench, demo, load, serve


def register_cli(app: Flask) -> None:
    for module in (serve, demo, bench, load):
        for command in module.commands:
            app.cli.add_command(command)
