"""The WSGI entry: `gunicorn --config python:app.cli.gunicorn_conf app.wsgi:app` (the image's command;
`flask serve` runs the same server). The server's worker hook runs the start step (app/cli/start.py) in
each worker process before it takes requests; this module only builds the app, so importing it contacts
nothing.
"""

from app import configure_logging, create_app

configure_logging()
app = create_app()
