"""Build Ollama (CPU only) from the Go module proxy into the cache, once.

Ollama's releases are binaries on GitHub, which this project cannot reach; its source is on the Go
module proxy, so `go install github.com/ollama/ollama@v<version>` builds it, llama.cpp included,
with cgo. One catch: Go module zips leave out every `vendor/` folder, and llama.cpp keeps three
header-only libraries in `llama/llama.cpp/vendor/`. They are fetched from registries that carry the
same headers and handed to the compiler with CGO_CPPFLAGS=-I<cache>/include:

    nlohmann/     the nlohmann-json wheel on PyPI (nlohmann_json/include/nlohmann/)
    miniaudio/    miniaudio.h from the miniaudio sdist on PyPI
    stb/          stb_image.h from Debian's libstb-dev (`apt-get download`, no system install)

Layout under the cache (OLLAMA_CACHE_DIR, default ~/.cache/mirofish):

    ollama-<version>/bin/ollama     the binary
    ollama-<version>/include/       the three header sets
    ollama-<version>/downloads/     the wheel, sdist and .deb they came from
    ollama-<version>/build.log      the compiler's output of the last build

The compiler flags matter: `go install` alone compiles ggml's CPU code with cgo's default `-O2`, for
the x86-64 baseline (SSE2), because Ollama's own releases build their CPU variants with cmake instead.
That build evaluated a 167-token judge prompt in 115-154 s here. So the C and C++ code is compiled for
this machine's CPU (`-O3 -march=native`), as llama-server's build is, except AMX: llama.cpp's AMX
kernels fault on CPUs that advertise it here (see app/local_llm/server.py), and Ollama has no
`--no-repack` to keep them out, so on such CPUs the build leaves AMX out (`-mno-amx-*`). And ggml's
weight repacking is turned on (`-DGGML_USE_CPU_REPACK`, which ggml's cmake build defines by default and
cgo's does not): at load the quantized weights are laid out in the interleaved blocks that the AVX2 and
AVX-512 kernels read fastest, as llama-server does. Without it this Ollama evaluated prompts at a fraction
of llama-server's rate on the same model file (docs/bench/SERVERS.md).

A header set already in include/ is not fetched again (so on a machine without apt-get one can put
stb/stb_image.h there by hand), and a binary that answers `--version` with the pinned version and was
built with the flags this machine gets now (recorded in bin/ollama.flags) is kept: nothing is fetched
or built then.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

from app.local_llm.server import AMX_CPU_FLAGS, cpu_flags

log = logging.getLogger(__name__)

OLLAMA_VERSION = "0.17.4"  # the newest on the Go module proxy with /v1/responses and logprobs
OLLAMA_MODULE = "github.com/ollama/ollama"
GO_MINIMUM = (1, 24)  # Ollama 0.17.4's go.mod says go 1.24.1; GOTOOLCHAIN=local forbids fetching a newer Go
NLOHMANN_REQUIREMENT = "nlohmann-json==3.12.0"
MINIAUDIO_REQUIREMENT = "miniaudio==1.71"  # its sdist carries miniaudio.h 0.11.x, the version llama.cpp vendors
STB_PACKAGE = "libstb-dev"
STB_VERSION = "0.0~git20220908.8b5f1f3+ds-1"  # Debian 12's
# The ldflags of Ollama's own release builds: the version it reports, release mode, no debug symbols.
LDFLAGS = f"-w -s -X={OLLAMA_MODULE}/version.Version={OLLAMA_VERSION} -X={OLLAMA_MODULE}/server.mode=release"
BUILD_NICENESS = 10  # the build takes minutes of both cores; let everything else go first
VERSION_TIMEOUT_S = 30.0
# `ollama --version` asks the server at OLLAMA_HOST for its version too; port 1 refuses at once, so the
# answer is the binary's own ("client version is X"), whatever runs on the usual port.
_NO_SERVER = "127.0.0.1:1"
_CLIENT_VERSION = re.compile(r"client version is (\S+)")
_LOG_TAIL_LINES = 15


class OllamaInstallError(RuntimeError):
    """Ollama could not be built; the message says what is missing and how to get it."""


def install_dir(cache_dir: Path) -> Path:
    return Path(cache_dir) / f"ollama-{OLLAMA_VERSION}"


def binary_path(cache_dir: Path) -> Path:
    return install_dir(cache_dir) / "bin" / "ollama"


def binary_version(binary: Path) -> str | None:
    """The version `binary --version` reports for itself, or None when it is missing or does not run."""
    if not os.access(binary, os.X_OK):
        return None
    try:
        result = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                                timeout=VERSION_TIMEOUT_S, env={**os.environ, "OLLAMA_HOST": _NO_SERVER})
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = _CLIENT_VERSION.search(result.stdout + result.stderr)
    return match.group(1) if match else None


def compiler_flags(flags: frozenset[str] | None = None) -> str:
    """CGO_CFLAGS and CGO_CXXFLAGS: optimised for this CPU, without AMX where the CPU has it, with ggml's
    weight repacking."""
    flags = cpu_flags() if flags is None else flags
    no_amx = " -mno-amx-tile -mno-amx-int8 -mno-amx-bf16" if flags & AMX_CPU_FLAGS else ""
    return f"-O3 -march=native{no_amx} -DGGML_USE_CPU_REPACK"


def flags_record(binary: Path) -> Path:
    return binary.with_name(binary.name + ".flags")


def is_installed(cache_dir: Path) -> bool:
    binary = binary_path(cache_dir)
    try:
        built_with = flags_record(binary).read_text(encoding="utf-8").strip()
    except OSError:
        return False
    return built_with == compiler_flags() and binary_version(binary) == OLLAMA_VERSION


def ensure_ollama_installed(cache_dir: Path) -> Path:
    """The binary of the pinned Ollama under `cache_dir`, built first when it is missing or another version."""
    binary = binary_path(cache_dir)
    if is_installed(cache_dir):
        return binary
    go = _go()
    _require_compilers(go)
    target = install_dir(cache_dir)
    include = target / "include"
    downloads = target / "downloads"
    started = time.monotonic()
    fetch_headers(include, downloads)
    log.info("Headers ready in %s (%.0f s)", include, time.monotonic() - started)
    print(f"Building Ollama {OLLAMA_VERSION} (CPU, {compiler_flags()}) from the Go module proxy: about 6-9 "
          f"minutes on 2 cores the first time, seconds with Go's build cache warm; output: {target / 'build.log'}",
          file=sys.stderr, flush=True)
    build_started = time.monotonic()
    _go_install(go, include, target)
    version = binary_version(binary)
    if version != OLLAMA_VERSION:
        raise OllamaInstallError(f"the built {binary} reports version {version!r}, not {OLLAMA_VERSION}")
    log.info("Built Ollama %s in %.0f s (%s)", OLLAMA_VERSION, time.monotonic() - build_started, binary)
    return binary


# ---------------------------------------------------------------- tools


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise OllamaInstallError(
            f"building Ollama needs Go {_dotted(GO_MINIMUM)} or newer on PATH: install it from https://go.dev/dl "
            "(Debian's golang-go is too old before trixie)")
    result = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True)
    found = _go_version(result.stdout.strip())
    if found is None or found < GO_MINIMUM:
        raise OllamaInstallError(
            f"building Ollama {OLLAMA_VERSION} needs Go {_dotted(GO_MINIMUM)} or newer, {go} is "
            f"{result.stdout.strip() or 'unknown'}: install a newer one from https://go.dev/dl")
    return go


def _go_version(text: str) -> tuple[int, int] | None:
    match = re.match(r"go(\d+)\.(\d+)", text)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _dotted(version: tuple[int, int]) -> str:
    return ".".join(map(str, version))


def _require_compilers(go: str) -> None:
    """cgo compiles llama.cpp with Go's CC and CXX (gcc and g++ unless set)."""
    for variable in ("CC", "CXX"):
        result = subprocess.run([go, "env", variable], capture_output=True, text=True)
        compiler = (result.stdout.strip().split() or [""])[0]
        if not compiler or shutil.which(compiler) is None:
            raise OllamaInstallError(
                f"building Ollama needs a C and a C++ compiler ({variable}={compiler or 'unset'} is not on PATH): "
                "apt-get install build-essential, or set CC / CXX")


# ---------------------------------------------------------------- the three header sets


def fetch_headers(include: Path, downloads: Path) -> None:
    """Put nlohmann/, miniaudio/miniaudio.h and stb/stb_image.h under `include`, fetching what is missing."""
    include.mkdir(parents=True, exist_ok=True)
    downloads.mkdir(parents=True, exist_ok=True)
    if not (include / "nlohmann" / "json.hpp").is_file():
        wheel = _pip_download(NLOHMANN_REQUIREMENT, downloads, "--only-binary", ":all:")
        _extract_zip_folder(wheel, "nlohmann_json/include/nlohmann/", include / "nlohmann")
    if not (include / "miniaudio" / "miniaudio.h").is_file():
        sdist = _pip_download(MINIAUDIO_REQUIREMENT, downloads, "--no-binary", ":all:")
        _extract_tar_member(sdist, "/miniaudio/miniaudio.h", include / "miniaudio" / "miniaudio.h")
    if not (include / "stb" / "stb_image.h").is_file():
        deb = _apt_download(downloads)
        _extract_deb_member(deb, "/usr/include/stb/stb_image.h", include / "stb" / "stb_image.h")


def _pip_download(requirement: str, downloads: Path, *options: str) -> Path:
    name, version = requirement.split("==")
    stem = f"{name.replace('-', '_')}-{version}"
    existing = [path for path in downloads.iterdir() if path.name.lower().startswith(stem.lower())]
    if existing:
        return existing[0]
    command = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps",
               "-d", str(downloads), *options, requirement]
    result = subprocess.run(command, capture_output=True, text=True)
    found = [path for path in downloads.iterdir() if path.name.lower().startswith(stem.lower())]
    if result.returncode != 0 or not found:
        raise OllamaInstallError(
            f"pip could not download {requirement} (for Ollama's llama.cpp headers): is the package index "
            f"reachable? Set PIP_INDEX_URL to a mirror if not. pip said: {_last_line(result)}")
    return found[0]


def _apt_download(downloads: Path) -> Path:
    """Debian's libstb-dev .deb, downloaded only (nothing is installed)."""
    existing = sorted(downloads.glob(f"{STB_PACKAGE}_*.deb"))
    if existing:
        return existing[0]
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        raise OllamaInstallError(
            f"fetching stb_image.h for Ollama needs apt-get and dpkg-deb (Debian/Ubuntu); elsewhere put "
            f"stb_image.h (from https://github.com/nothings/stb) at {downloads.parent / 'include' / 'stb'}/")
    result = subprocess.run(["apt-get", "download", f"{STB_PACKAGE}={STB_VERSION}"], cwd=downloads,
                            capture_output=True, text=True)
    found = sorted(downloads.glob(f"{STB_PACKAGE}_*.deb"))
    if result.returncode != 0 or not found:
        raise OllamaInstallError(
            f"apt-get could not download {STB_PACKAGE}={STB_VERSION} (stb_image.h for Ollama): run "
            f"`apt-get update` and check that a Debian 12 mirror is reachable. apt-get said: {_last_line(result)}")
    return found[0]


def _extract_zip_folder(wheel: Path, folder: str, destination: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        members = [name for name in archive.namelist() if name.startswith(folder) and not name.endswith("/")]
        if not members:
            raise OllamaInstallError(f"{wheel.name} has no {folder}: not the expected nlohmann-json wheel")
        for name in members:
            target = destination / name[len(folder):]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(archive.read(name))


def _extract_tar_member(archive_path: Path, suffix: str, destination: Path) -> None:
    with tarfile.open(archive_path) as archive:
        _write_member(archive, suffix, destination, archive_path.name)


def _extract_deb_member(deb: Path, suffix: str, destination: Path) -> None:
    """A .deb's files are in its data.tar; dpkg-deb hands that over as one stream."""
    with subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE) as process:
        with tarfile.open(fileobj=process.stdout, mode="r|") as archive:
            _write_member(archive, suffix, destination, deb.name)


def _write_member(archive: tarfile.TarFile, suffix: str, destination: Path, archive_name: str) -> None:
    for member in archive:
        if member.isfile() and member.name.endswith(suffix):
            source = archive.extractfile(member)
            destination.parent.mkdir(parents=True, exist_ok=True)
            temporary = destination.with_name(destination.name + ".partial")
            temporary.write_bytes(source.read())
            temporary.replace(destination)
            return
    raise OllamaInstallError(f"{archive_name} has no file ending in {suffix}")


# ---------------------------------------------------------------- the build


def build_environment(include: Path, gobin: Path) -> dict[str, str]:
    return {
        **os.environ,
        "CGO_ENABLED": "1",
        "CGO_CPPFLAGS": f"-I{include}",
        "CGO_CFLAGS": compiler_flags(),
        "CGO_CXXFLAGS": compiler_flags(),
        "GOBIN": str(gobin),
        # One package at a time: llama.cpp's C++ alone keeps a core busy, and two cgo packages at once
        # need about 2 GB of memory. No VCS stamping: the source comes from the module proxy, not git.
        "GOFLAGS": "-buildvcs=false -p=1",
        "GOTOOLCHAIN": "local",  # never download another Go behind the user's back
    }


def _go_install(go: str, include: Path, target: Path) -> None:
    """`go install` into bin.partial/, then the binary moves to bin/ (a failed build leaves no binary)."""
    partial = target / "bin.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    command = [go, "install", "-trimpath", f"-ldflags={LDFLAGS}", f"{OLLAMA_MODULE}@v{OLLAMA_VERSION}"]
    build_log = target / "build.log"
    with open(build_log, "wb") as output:
        result = subprocess.run(command, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=build_environment(include, partial), cwd=target,
                                preexec_fn=lambda: os.nice(BUILD_NICENESS))
    built = partial / "ollama"
    if result.returncode != 0 or not built.is_file():
        tail = "\n".join(build_log.read_text(errors="replace").strip().splitlines()[-_LOG_TAIL_LINES:])
        hint = (" The Go module proxy may be unreachable (set GOPROXY to a mirror)."
                if "proxy.golang.org" in tail or "dial tcp" in tail else "")
        raise OllamaInstallError(f"`go install {OLLAMA_MODULE}@v{OLLAMA_VERSION}` failed (exit "
                                 f"{result.returncode}).{hint} Last lines of {build_log}:\n{tail}")
    (target / "bin").mkdir(exist_ok=True)
    binary = target / "bin" / "ollama"
    built.replace(binary)
    flags_record(binary).write_text(compiler_flags() + "\n", encoding="utf-8")
    shutil.rmtree(partial, ignore_errors=True)


def _last_line(result: subprocess.CompletedProcess) -> str:
    lines = (result.stderr or result.stdout or "").strip().splitlines()
    return lines[-1] if lines else f"exit {result.returncode}"
