"""WSGI entry for other servers: `waitress-serve --threads 16 app.wsgi:app` (one process)."""

from app import configure_logging, create_app

configure_logging()
app = create_app()
