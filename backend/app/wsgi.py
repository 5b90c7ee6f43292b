"""WSGI entry for other servers: `waitress-serve --threads 16 app.wsgi:app` (one process).

Importing it runs the start step (app/cli/start.py): the graph database is connected and the
reranker's model starts warming before the server takes requests; a database that cannot be used
ends the process with one line naming the setting (exit status 3). Each process runs its own graph
runtime (an event-loop thread, the warm-up's thread), so load it in every worker process: not in a
parent that forks its workers afterwards (gunicorn's --preload), where those threads would be lost.
"""

from app import configure_logging, create_app
from app.cli.start import start_or_exit

configure_logging()
app = create_app()
start_or_exit(app.config["APP_CONFIG"])
