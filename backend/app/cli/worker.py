"""`flask worker`: run background tasks (reports, ingestion, deletions) from the queue the API
processes share. Deployed beside the API (`make worker`, compose's `worker` service); an app that
runs its own broker starts its workers itself (app/graph/task_broker.py).

SIGTERM finishes the task in hand, then exits: the tasks still queued wait for the next worker.
"""

from __future__ import annotations

import logging

import click
import redis
from prometheus_client import start_http_server
from flask import current_app
from flask.cli import with_appcontext

from app.graph.runtime import GraphitiAdapter, reset_graphiti
from app.graph.task_broker import BrokerNotConfiguredError, require_broker_url
from app.graph.unavailable import GraphUnavailableError
from graphiti_llm_rerank import redact_url
from app.tasks import QUEUE_NAME, TaskWorker, connect

logger = logging.getLogger(__name__)


@click.command("worker")
@click.option("--burst", is_flag=True, help="exit once the queue is empty (tests, one-off runs)")
@with_appcontext
def worker_command(burst: bool) -> None:
    """Run background tasks from the shared queue until SIGTERM."""
    config = current_app.config["APP_CONFIG"]
    try:
        url = require_broker_url(config)
    except BrokerNotConfiguredError as error:
        raise click.ClickException(str(error)) from None
    connection = connect(url)
    try:
        connection.ping()
    except redis.RedisError as error:
        raise click.ClickException(
            f"the task broker at {redact_url(url)} does not answer ({error}); start it, or point QUEUE_URL "
            "(or FALKORDB_URL) at the one the API uses") from None
    try:
        GraphitiAdapter(config).runtime  # the database answers before the first task is taken
    except GraphUnavailableError as error:
        raise click.ClickException(f"the graph database cannot be used: {error}") from None
    if config.worker_metrics_port:  # this worker's task outcomes, for a scraper that cannot read the API's sum
        start_http_server(config.worker_metrics_port, addr=config.host)
        logger.info("Worker metrics on http://%s:%d/metrics", config.host, config.worker_metrics_port)
    worker = TaskWorker([QUEUE_NAME], connection=connection)
    try:
        worker.work(burst=burst, logging_level=config.log_level, with_scheduler=False)
    finally:
        reset_graphiti()


commands = [worker_command]
