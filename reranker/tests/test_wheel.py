"""The distribution builds as a wheel that installs and imports on its own, from no source checkout."""

from __future__ import annotations

import os
import site
import subprocess
import sys
import venv
from pathlib import Path

RERANKER = Path(__file__).resolve().parents[1]


def test_the_wheel_installs_into_a_fresh_venv_and_serves_the_reranker(tmp_path):
    # No build isolation and --no-deps: nothing is downloaded; the dependencies come from this venv's packages.
    built = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path / "dist"),
                            str(RERANKER)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("graphiti_llm_rerank-*-py3-none-any.whl")

    fresh = tmp_path / "venv"
    venv.create(fresh, with_pip=False)
    python = fresh / "bin" / "python"
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    # The dependencies (graphiti-core, openai, ...) from this interpreter's site-packages, after the venv's own.
    Path(purelib, "dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    clean = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}  # no source checkout
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
                                "--no-index", str(wheel)], capture_output=True, text=True, timeout=300, env=clean)
    assert installed.returncode == 0, installed.stderr[-2000:]

    probe = ("import graphiti_llm_rerank as g\nfrom graphiti_llm_rerank import OllamaReranker, RerankerConfig\n"
             "from graphiti_core.cross_encoder.client import CrossEncoderClient\n"
             "r = OllamaReranker(RerankerConfig(model='m'))\n"
             "print(g.__file__)\nprint(isinstance(r, CrossEncoderClient))\n")
    result = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=clean)
    assert result.returncode == 0, result.stderr[-2000:]
    location, is_cross_encoder = result.stdout.split()
    assert location.startswith(purelib) and is_cross_encoder == "True"
