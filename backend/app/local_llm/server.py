"""Start, find, stop and inspect the local OpenAI-compatible model server (llama.cpp's `llama-server`).

One server per port. Its state lives under `<data_dir>/local-llm/`:

    llama-server-<port>.json   pid record: pid, port, model key, model path, start time
    llama-server-<port>.log    the server's stdout/stderr (overwritten at each start)
    llama-server-<port>.lock   inter-process lock held while starting or stopping

The server runs in its own session (`start_new_session=True`), so Ctrl-C in the terminal
that started it does not kill it halfway through a request; whoever starts it for a demo
stops it with `stop_server` / `python -m app.local_llm stop`.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from app.config import DEFAULT_CONTEXT_TOKENS, Config
from app.local_llm.assemble import ensure_model
from app.local_llm.install import ensure_llama_server_installed
from app.local_llm import processes
from app.local_llm.locking import exclusive_lock
from app.local_llm.models import get_model

log = logging.getLogger(__name__)

HOST = "127.0.0.1"  # loopback only: the server has no authentication
# One slot: consecutive judge requests for one query then share the cached system prompt and query,
# which measured faster than 2 or 4 slots on 2 cores (each slot evaluates that prefix again).
SLOTS = 1
STARTUP_TIMEOUT_S = 180.0
STOP_GRACE_S = 10.0
PROBE_TIMEOUT_S = 5.0
LOG_TAIL_LINES = 40


class LocalServerError(RuntimeError):
    """The local model server could not be started, found or stopped."""


@dataclass(frozen=True)
class ServerFiles:
    directory: Path
    record: Path
    log: Path
    lock: Path


@dataclass(frozen=True)
class ServerStatus:
    """What is known about the server on the configured port.

    state is one of:
      running        our process is alive and /v1/models answers with the configured model
      unmanaged      no pid record of ours (e.g. started with another DATA_DIR), but the port
                     answers with the configured model: usable, but `stop` here cannot stop it
      other_model    our process is alive but serves a different model
      busy           our process is alive and accepts connections, but /v1/models does not list
                     the model yet (still loading) or waits behind a running request; the pid
                     record names the configured model, so it is usable
      not_answering  our process is alive but does not accept connections (still loading)
      port_in_use    no process of ours, and the port answers without the configured model
      stopped        nothing answers on the port
    """

    state: str
    base_url: str
    model: str  # the configured model key
    pid: int | None
    served_models: tuple[str, ...]
    recorded_model: str | None
    log_path: Path

    @property
    def ready(self) -> bool:
        """Clients can use base_url with model name `model` now."""
        return self.state in ("running", "busy", "unmanaged")

    def describe(self) -> str:
        pid = f"pid {self.pid}" if self.pid else "no pid"
        served = ", ".join(self.served_models) or "-"
        log_note = f"; log {self.log_path}" if self.pid else ""
        return (
            f"{self.state}: {self.base_url} ({pid}; configured model {self.model}; "
            f"serving {served}{log_note})"
        )


def base_url(config: Config) -> str:
    """The OpenAI-compatible base URL clients use, e.g. http://127.0.0.1:8088/v1."""
    return f"http://{HOST}:{config.local_llm_port}/v1"


def server_files(config: Config) -> ServerFiles:
    directory = Path(config.data_dir) / "local-llm"
    stem = f"llama-server-{config.local_llm_port}"
    return ServerFiles(
        directory=directory,
        record=directory / f"{stem}.json",
        log=directory / f"{stem}.log",
        lock=directory / f"{stem}.lock",
    )


def server_threads(config: Config) -> int:
    """LOCAL_LLM_THREADS, or one thread per core we may run on when it is 0."""
    return config.local_llm_threads or cpu_cores()


def cpu_cores() -> int:
    """Cores this process may run on (the affinity mask, which containers narrow)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


# ---------------------------------------------------------------- public API


def server_status(config: Config) -> ServerStatus:
    """Inspect the pid record and the port; never starts or stops anything."""
    files = server_files(config)
    record = processes.read_record(files.record)
    pid = record["pid"] if record else None
    alive = pid is not None and _is_our_server(pid)
    probe = _probe(base_url(config))
    served = probe.models
    if alive:
        if config.local_llm_model in served:
            state = "running"
        elif served or (record and record.get("model") != config.local_llm_model):
            state = "other_model"
        elif probe.listening:
            # A listening server of ours that does not list the model yet is loading it or
            # answering a long request: busy, not broken.
            state = "busy"
        else:
            state = "not_answering"
    elif config.local_llm_model in served:
        state = "unmanaged"
    else:
        state = "port_in_use" if probe.listening else "stopped"
    return ServerStatus(
        state=state,
        base_url=base_url(config),
        model=config.local_llm_model,
        pid=pid if alive else None,
        served_models=tuple(served),
        recorded_model=record.get("model") if record else None,
        log_path=files.log,
    )


def ensure_server(config: Config, *, startup_timeout_s: float = STARTUP_TIMEOUT_S) -> str:
    """Return the base URL of a server for `config.local_llm_model`, starting one if needed.

    Returns at once when our server is alive and answers with the configured model, or when
    the port already answers with that model without a pid record here (a server started
    with another DATA_DIR; it is used but not managed). A server of ours with another model
    is stopped and replaced; anything else on the port is an error, never killed. Installs
    llama-server and assembles the model first when they are missing.
    """
    files = server_files(config)
    with exclusive_lock(files.lock):
        status = server_status(config)
        if status.state == "unmanaged":
            log.warning(
                "Using the server already answering on %s; it has no pid record in %s, "
                "so stop it where it was started",
                status.base_url, files.directory,
            )  # fmt: skip
        if status.ready:
            return status.base_url
        if status.state == "port_in_use":
            raise LocalServerError(
                f"Port {config.local_llm_port} is in use by a process this kit did not start "
                f"(it answers with models {list(status.served_models) or 'unknown'}, "
                f"not {config.local_llm_model}). Stop it, or set LOCAL_LLM_PORT to a free port."
            )
        if status.state == "other_model":
            log.warning(
                "Replacing the server on port %s (model %s) with %s",
                config.local_llm_port, status.recorded_model, config.local_llm_model,
            )  # fmt: skip
            _stop_locked(files)
        elif status.state == "not_answering":
            # Probably still loading (a start interrupted by Ctrl-C): wait instead of killing it.
            log.info("Server pid %s is alive but not listening yet; waiting", status.pid)
            _wait_ready(config, files, status.pid, startup_timeout_s, kill_on_failure=False)
            return status.base_url

        binary = ensure_llama_server_installed()
        model_file = ensure_model(config.local_llm_model, config.model_cache_dir)
        pid = _start(config, files, binary, model_file)
        _wait_ready(config, files, pid, startup_timeout_s, kill_on_failure=True)
        log.info("Local model server ready at %s (pid %s)", base_url(config), pid)
        return base_url(config)


def stop_server(config: Config, *, grace_s: float = STOP_GRACE_S) -> bool:
    """Stop our server on the configured port (SIGTERM, SIGKILL after `grace_s`).

    Returns False when no server with a live pid record here was running; a server that
    has no pid record here (see ServerStatus "unmanaged") is left alone.
    """
    files = server_files(config)
    with exclusive_lock(files.lock):
        return _stop_locked(files, grace_s=grace_s)


# ---------------------------------------------------------------- start / wait / stop


# llama.cpp's AMX kernels fault on some machines that advertise AMX: a general protection fault in
# `ldtilecfg` inside ggml_backend_amx_mul_mat on the first request (seen here on a 2-core Xeon VM with
# amx_tile/amx_int8 in /proc/cpuinfo; llama.cpp issue #20824, fix proposed in PR #26954). The AMX path
# is only taken for weights repacked into its buffer type, so on such CPUs the server keeps the weights
# as loaded (`--no-repack`). Elsewhere repacking stays on: it speeds up the AVX2/AVX-512 kernels.
AMX_CPU_FLAGS = frozenset({"amx_tile", "amx_int8", "amx_bf16"})


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The CPU feature flags the kernel reports (empty where /proc/cpuinfo is not there)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


def server_command(config: Config, binary: Path, model_file: Path,
                   flags: frozenset[str] | None = None) -> list[str]:
    threads = str(server_threads(config))  # for generation and prompts alike
    flags = cpu_flags() if flags is None else flags
    repack = ["--no-repack"] if flags & AMX_CPU_FLAGS else []
    return [
        str(binary),
        "--model", str(model_file),
        "--alias", config.local_llm_model,
        "--host", HOST,
        "--port", str(config.local_llm_port),
        "--ctx-size", str(DEFAULT_CONTEXT_TOKENS),  # what the judge assumes; Graphiti's prompts need > 2048
        "--threads", threads,
        "--threads-batch", threads,
        "--parallel", str(SLOTS),
        "--no-webui",
        *repack,
    ]  # fmt: skip


def _start(config: Config, files: ServerFiles, binary: Path, model_file: Path) -> int:
    files.directory.mkdir(parents=True, exist_ok=True)
    command = server_command(config, binary, model_file)
    spec = get_model(config.local_llm_model)
    print(
        f"Starting {spec.description} on {base_url(config)} "
        f"({server_threads(config)} threads, context {DEFAULT_CONTEXT_TOKENS}); log: {files.log}",
        file=sys.stderr,
        flush=True,
    )
    pid = processes.start(command, log_path=files.log, cwd=files.directory)
    processes.write_record(files.record, {
        "pid": pid,
        "port": config.local_llm_port,
        "model": config.local_llm_model,
        "model_path": str(model_file),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": command,
    })
    return pid


def _wait_ready(
    config: Config, files: ServerFiles, pid: int | None, timeout_s: float, *, kill_on_failure: bool
) -> None:
    """Poll /v1/models until it lists the configured model; raise with the log tail otherwise."""
    deadline = time.monotonic() + timeout_s
    url = base_url(config)
    while time.monotonic() < deadline:
        if pid is None or not _is_our_server(pid):
            files.record.unlink(missing_ok=True)
            raise LocalServerError(
                f"The local model server exited during startup. Last lines of {files.log}:\n"
                f"{_log_tail(files.log)}"
            )
        served = _probe(url).models
        if config.local_llm_model in served:
            return
        if served:
            raise LocalServerError(
                f"{url} answers with models {served}, not {config.local_llm_model}"
            )
        time.sleep(0.5)
    if kill_on_failure:
        _stop_locked(files)
    raise LocalServerError(
        f"The local model server did not answer {url}/models within {timeout_s:.0f} s"
        f"{' and was stopped' if kill_on_failure else ''}. Last lines of {files.log}:\n"
        f"{_log_tail(files.log)}"
    )


def _stop_locked(files: ServerFiles, grace_s: float = STOP_GRACE_S) -> bool:
    """SIGTERM, then SIGKILL after `grace_s`; remove the pid record. Caller holds the lock."""
    return processes.stop_recorded(files.record, _runs_llama_server, grace_s, "local model server",
                                   LocalServerError)


# ---------------------------------------------------------------- process and HTTP probes


def _is_our_server(pid: int) -> bool:
    """Alive and still a llama-server process, so a recycled pid is never signalled."""
    return processes.runs(pid, _runs_llama_server)


def _runs_llama_server(arguments: list[bytes]) -> bool:
    return any(b"llama-server" in argument for argument in arguments)


@dataclass(frozen=True)
class _Probe:
    listening: bool  # the port accepted a connection
    models: list[str]  # model ids from GET /models; empty when it did not answer in time


def _probe(url: str) -> _Probe:
    """GET {url}/models; a server still loading answers 503 without models, or not at all."""
    try:
        response = httpx.get(f"{url}/models", timeout=PROBE_TIMEOUT_S)
    except (httpx.ConnectError, httpx.ConnectTimeout):
        return _Probe(listening=False, models=[])
    except httpx.HTTPError:  # read timeout or dropped connection: someone is there
        return _Probe(listening=True, models=[])
    try:
        data = response.json().get("data", [])
        return _Probe(True, [str(item.get("id")) for item in data if isinstance(item, dict)])
    except (ValueError, AttributeError):
        return _Probe(listening=True, models=[])


def _log_tail(path: Path) -> str:
    return processes.log_tail(path, LOG_TAIL_LINES)
