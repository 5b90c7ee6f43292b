"""Make sure llama-cpp-python's OpenAI-compatible server is importable in this interpreter."""

from __future__ import annotations

import logging
import subprocess
import sys

log = logging.getLogger(__name__)

LLAMA_CPP_REQUIREMENT = "llama-cpp-python[server]==0.3.36"


def llama_server_importable(python: str = sys.executable) -> bool:
    """Whether `import llama_cpp.server` works in `python`.

    Checked in a child process: the import loads llama.cpp's shared library and FastAPI,
    which this process does not need, and a half-installed package fails there too.
    """
    result = subprocess.run(
        [python, "-c", "import llama_cpp.server"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return result.returncode == 0


def ensure_llama_cpp_installed(python: str = sys.executable) -> None:
    """Install llama-cpp-python[server] into the environment of `python` when it is missing."""
    if llama_server_importable(python):
        return
    print(
        f"Installing {LLAMA_CPP_REQUIREMENT} into {sys.prefix}.\n"
        "It compiles llama.cpp from source: this takes several minutes (about 6 on 2 cores) "
        "the first time; pip reuses its cached wheel afterwards.",
        file=sys.stderr,
        flush=True,
    )
    command = [python, "-m", "pip", "install", "--disable-pip-version-check", LLAMA_CPP_REQUIREMENT]
    # Output goes straight to our stderr so the user sees pip (and the compiler) working.
    completed = subprocess.run(command, stdout=sys.__stderr__, stderr=sys.__stderr__)
    if completed.returncode != 0:
        raise RuntimeError(
            f"`pip install {LLAMA_CPP_REQUIREMENT}` failed (exit {completed.returncode}); "
            "a C/C++ compiler and cmake are needed to build it. See pip's output above."
        )
    if not llama_server_importable(python):
        raise RuntimeError(
            f"{LLAMA_CPP_REQUIREMENT} was installed but `import llama_cpp.server` still fails "
            f"in {python}"
        )
    log.info("Installed %s", LLAMA_CPP_REQUIREMENT)
