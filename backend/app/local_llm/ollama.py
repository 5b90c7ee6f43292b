"""Run the project's own Ollama (built by app/local_llm/ollama_build.py) with the kit's GGUF imported.

Production runs the judge on Ollama; llama-server (app/local_llm/server.py) is what the kit runs
by default. This is the same model on the production server software, on loopback, so what Ollama
does differently (its chat template, its logprobs, /v1/responses, its request scheduling) can be
checked here:

    python -m app.local_llm ollama install | start | stop | status

`start` builds Ollama if needed, starts `ollama serve` on 127.0.0.1:OLLAMA_LOCAL_PORT, waits for
/api/version, and imports the kit's GGUF (LOCAL_LLM_MODEL, assembled first if needed) under the
name `mirofish/<LOCAL_LLM_MODEL>` unless /api/tags already has it. A bare GGUF imported with only
`FROM` gets the template `{{ .Prompt }}`, which drops the system message and the chat markup, so
the Modelfile gives Qwen's ChatML template and its stop token, and the context the judge assumes.

State lives under `<DATA_DIR>/ollama/`:

    models/                    OLLAMA_MODELS: the imported model's blobs and manifest
    ollama-<port>.json         pid record: pid, port, start time
    ollama-<port>.log          the server's output (overwritten at each start)
    ollama-<port>.lock         inter-process lock while starting, importing or stopping
    <model key>.Modelfile      the Modelfile of the last import, compared before the next start

The server leads its own session, so Ctrl-C in the terminal that started it leaves it running;
`stop` (SIGTERM to its process group: the server and its model runners) ends it.
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from app.config import DEFAULT_CONTEXT_TOKENS, Config
from app.local_llm.assemble import ensure_model
from app.local_llm import processes
from app.local_llm.locking import exclusive_lock
from app.local_llm.ollama_build import OLLAMA_VERSION, ensure_ollama_installed

log = logging.getLogger(__name__)

HOST = "127.0.0.1"  # loopback only: Ollama has no authentication
MODEL_NAMESPACE = "mirofish"
STARTUP_TIMEOUT_S = 60.0  # `ollama serve` answers within a second or two; models load on first request
IMPORT_TIMEOUT_S = 900.0  # hashing and copying a 1.1 GB GGUF on a busy machine
STOP_GRACE_S = 10.0
PROBE_TIMEOUT_S = 5.0
LOG_TAIL_LINES = 30

# Qwen2.5's ChatML, as Ollama's Go template: every message (system included) in <|im_start|> markup,
# then the assistant's turn opened. Without it the system prompt and the roles never reach the model.
CHATML_TEMPLATE = """{{- range .Messages }}<|im_start|>{{ .Role }}
{{ .Content }}<|im_end|>
{{ end }}<|im_start|>assistant
"""


class OllamaError(RuntimeError):
    """The local Ollama could not be started, found, stopped or given the model."""


@dataclass(frozen=True)
class OllamaFiles:
    directory: Path
    models: Path
    record: Path
    log: Path
    lock: Path


@dataclass(frozen=True)
class OllamaStatus:
    """What answers on OLLAMA_LOCAL_PORT.

    state is one of:
      running        our `ollama serve` answers /api/version
      unmanaged      no pid record of ours, but an Ollama that already has our model answers: usable,
                     but `stop` here cannot stop it
      not_answering  our process is alive but does not answer yet
      port_in_use    no process of ours, and whatever answers is not an Ollama with our model
      stopped        nothing answers on the port
    """

    state: str
    base_url: str
    model: str  # the Ollama model name clients send
    pid: int | None
    version: str | None
    models: tuple[str, ...]
    log_path: Path

    @property
    def ready(self) -> bool:
        return self.state in ("running", "unmanaged")

    def describe(self) -> str:
        pid = f"pid {self.pid}" if self.pid else "no pid"
        has_model = "with" if self.model in self.models else "without"
        version = f"Ollama {self.version}" if self.version else "no Ollama"
        log_note = f"; log {self.log_path}" if self.pid else ""
        return f"{self.state}: {self.base_url} ({pid}; {version}; {has_model} {self.model}{log_note})"


def model_name(config: Config) -> str:
    """The name the kit's model gets in Ollama: `mirofish/<LOCAL_LLM_MODEL>`."""
    return f"{MODEL_NAMESPACE}/{config.local_llm_model}"


def server_url(config: Config) -> str:
    return f"http://{HOST}:{config.ollama_local_port}"


def base_url(config: Config) -> str:
    """The OpenAI-compatible base URL clients use, e.g. http://127.0.0.1:11434/v1."""
    return f"{server_url(config)}/v1"


def ollama_files(config: Config) -> OllamaFiles:
    directory = Path(config.data_dir) / "ollama"
    stem = f"ollama-{config.ollama_local_port}"
    return OllamaFiles(directory=directory, models=directory / "models", record=directory / f"{stem}.json",
                       log=directory / f"{stem}.log", lock=directory / f"{stem}.lock")


def server_environment(config: Config, files: OllamaFiles) -> dict[str, str]:
    """`ollama serve`'s environment: our port and model folder, and the scheduling the reranker expects."""
    return {
        **os.environ,
        "OLLAMA_HOST": f"{HOST}:{config.ollama_local_port}",
        "OLLAMA_MODELS": str(files.models),
        # A model unloaded between two searches costs the next one its load time (seconds, see README).
        "OLLAMA_KEEP_ALIVE": config.ollama_local_keep_alive,
        # The judge sends up to RERANKER_MAX_PARALLEL requests at once; on CPU they run fastest queued on
        # one slot (OLLAMA_LOCAL_NUM_PARALLEL, see config.py).
        "OLLAMA_NUM_PARALLEL": str(config.ollama_local_num_parallel),
        "OLLAMA_MAX_LOADED_MODELS": "1",
        "OLLAMA_NO_CLOUD": "1",  # nothing here may leave the machine
    }


def modelfile_text(gguf: Path, threads: int = 0) -> str:
    """The import's Modelfile; `threads` (LOCAL_LLM_THREADS) > 0 fixes the model's num_thread, else Ollama
    takes one per physical core."""
    return (
        f"FROM {gguf}\n"
        f'TEMPLATE """{CHATML_TEMPLATE}"""\n'
        "PARAMETER stop <|im_end|>\n"
        # Ollama's default on a machine without a GPU is 4096; the judge and Graphiti's prompts assume this.
        f"PARAMETER num_ctx {DEFAULT_CONTEXT_TOKENS}\n"
        + (f"PARAMETER num_thread {threads}\n" if threads else "")
    )


# ---------------------------------------------------------------- public API


def ollama_status(config: Config) -> OllamaStatus:
    """Inspect the pid record and the port; never starts or stops anything."""
    files = ollama_files(config)
    pid = _recorded_pid(files)
    alive = pid is not None and _is_our_server(pid)
    version = _version(config)
    models = _models(config) if version else ()
    name = model_name(config)
    if alive:
        state = "running" if version else "not_answering"
    elif version and name in models:
        state = "unmanaged"
    else:
        state = "port_in_use" if version or _listening(config) else "stopped"
    return OllamaStatus(state=state, base_url=base_url(config), model=name, pid=pid if alive else None,
                        version=version, models=models, log_path=files.log)


def ensure_ollama(config: Config, *, startup_timeout_s: float = STARTUP_TIMEOUT_S) -> str:
    """The base URL of an Ollama serving `mirofish/<LOCAL_LLM_MODEL>`, built, started and given the model if needed.

    An Ollama of ours that runs is reused (the model imported into it if /api/tags lacks it); one on
    the port that this kit did not start is used only when it already has the model, never written to
    or stopped.
    """
    files = ollama_files(config)
    with exclusive_lock(files.lock):
        status = ollama_status(config)
        if status.state == "unmanaged":
            log.warning("Using the Ollama already answering on %s; it has no pid record in %s, so stop it "
                        "where it was started", status.base_url, files.directory)
            return status.base_url
        if status.state == "port_in_use":
            raise OllamaError(
                f"Port {config.ollama_local_port} is in use by a server this kit did not start "
                f"({'Ollama ' + status.version + ' without ' + status.model if status.version else 'not Ollama'}). "
                "Stop it, or set OLLAMA_LOCAL_PORT to a free port.")
        binary = ensure_ollama_installed(config.ollama_cache_dir)
        gguf = ensure_model(config.local_llm_model, config.model_cache_dir)
        if status.state == "stopped":
            started = time.monotonic()
            pid = _start(config, files, binary)
            _wait_ready(config, files, pid, startup_timeout_s)
            log.info("Ollama %s ready at %s in %.1f s (pid %s)", OLLAMA_VERSION, server_url(config),
                     time.monotonic() - started, pid)
        elif status.state == "not_answering":
            _wait_ready(config, files, status.pid, startup_timeout_s)
        ensure_model_imported(config, binary, gguf, files)
        return base_url(config)


def ensure_model_imported(config: Config, binary: Path, gguf: Path, files: OllamaFiles | None = None) -> bool:
    """Create `mirofish/<model>` from the GGUF unless Ollama has it from the same Modelfile; True if created."""
    files = files or ollama_files(config)
    name = model_name(config)
    text = modelfile_text(gguf, config.local_llm_threads)
    modelfile = files.directory / f"{config.local_llm_model}.Modelfile"
    if name in _models(config) and _read_text(modelfile) == text:
        return False
    files.directory.mkdir(parents=True, exist_ok=True)
    pending = modelfile.with_name(modelfile.name + ".pending")  # becomes the record once Ollama has it
    pending.write_text(text, encoding="utf-8")
    log.info("Importing %s into Ollama as %s (hashes and copies the file once)", gguf.name, name)
    started = time.monotonic()
    environment = {**os.environ, "OLLAMA_HOST": f"{HOST}:{config.ollama_local_port}"}
    try:
        result = subprocess.run([str(binary), "create", name, "-f", str(pending)], capture_output=True,
                                text=True, env=environment, timeout=IMPORT_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise OllamaError(f"`ollama create {name}` did not finish within {IMPORT_TIMEOUT_S:.0f} s") from None
    if result.returncode != 0 or name not in _models(config):
        said = (result.stderr or result.stdout).strip().splitlines()
        raise OllamaError(f"`ollama create {name}` failed (exit {result.returncode}): "
                          f"{said[-1] if said else 'no output'}; server log: {files.log}")
    pending.replace(modelfile)
    log.info("Imported %s into Ollama in %.1f s", name, time.monotonic() - started)
    return True


def stop_ollama(config: Config, *, grace_s: float = STOP_GRACE_S) -> bool:
    """Stop our Ollama on the configured port (SIGTERM to its group, SIGKILL after `grace_s`).

    Returns False when none of ours was running; an Ollama without a pid record here is left alone.
    """
    files = ollama_files(config)
    with exclusive_lock(files.lock):
        return _stop_locked(files, grace_s)


# ---------------------------------------------------------------- start / wait / stop


def _start(config: Config, files: OllamaFiles, binary: Path) -> int:
    files.models.mkdir(parents=True, exist_ok=True)
    pid = processes.start([str(binary), "serve"], log_path=files.log, cwd=files.directory,
                          env=server_environment(config, files))
    processes.write_record(files.record, {"pid": pid, "port": config.ollama_local_port, "version": OLLAMA_VERSION,
                                          "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    return pid


def _wait_ready(config: Config, files: OllamaFiles, pid: int | None, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pid is None or not _is_our_server(pid):
            files.record.unlink(missing_ok=True)
            raise OllamaError(f"Ollama exited during startup. Last lines of {files.log}:\n{_log_tail(files.log)}")
        if _version(config) is not None:
            return
        time.sleep(0.2)
    _stop_locked(files, STOP_GRACE_S)
    raise OllamaError(f"Ollama did not answer {server_url(config)}/api/version within {timeout_s:.0f} s and was "
                      f"stopped. Last lines of {files.log}:\n{_log_tail(files.log)}")


def _stop_locked(files: OllamaFiles, grace_s: float) -> bool:
    return processes.stop_recorded(files.record, _runs_ollama, grace_s, "Ollama", OllamaError)


# ---------------------------------------------------------------- process and HTTP probes


def _is_our_server(pid: int) -> bool:
    """Alive and still `ollama serve`, so a recycled pid is never signalled."""
    return processes.runs(pid, _runs_ollama)


def _runs_ollama(arguments: list[bytes]) -> bool:
    return arguments[0].endswith(b"ollama") and b"serve" in arguments[1:]


def _recorded_pid(files: OllamaFiles) -> int | None:
    record = processes.read_record(files.record)
    return record["pid"] if record else None


def _get(config: Config, path: str) -> dict | None:
    try:
        response = httpx.get(f"{server_url(config)}{path}", timeout=PROBE_TIMEOUT_S)
        body = response.json() if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    return body if isinstance(body, dict) else None


def _version(config: Config) -> str | None:
    """Ollama's version from /api/version, or None when no Ollama answers."""
    version = (_get(config, "/api/version") or {}).get("version")
    return version if isinstance(version, str) else None


def _models(config: Config) -> tuple[str, ...]:
    """The names /api/tags lists, each also without Ollama's default `:latest` tag."""
    names: list[str] = []
    for entry in (_get(config, "/api/tags") or {}).get("models") or []:
        name = entry.get("name") if isinstance(entry, dict) else None
        if isinstance(name, str):
            names.append(name)
            if name.endswith(":latest"):
                names.append(name.removesuffix(":latest"))
    return tuple(names)


def _listening(config: Config) -> bool:
    try:
        httpx.get(server_url(config), timeout=PROBE_TIMEOUT_S)
    except (httpx.ConnectError, httpx.ConnectTimeout):
        return False
    except httpx.HTTPError:
        return True
    return True


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None


def _log_tail(path: Path) -> str:
    return processes.log_tail(path, LOG_TAIL_LINES)
