"""The README's "Use the reranker in your own Graphiti app" program runs as written: its code block,
taken from README.md, in a fresh interpreter, on a real FalkorDB and the real local model server
(pointed at by the environment variables the program reads), and its answer puts the fact about the
contaminated water first."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from app.graph.embedded_falkordb import EmbeddedFalkorDB

README = Path(__file__).resolve().parents[1] / "README.md"
SECTION = "## Use the reranker in your own Graphiti app"
ANSWER = "Floodwater entered Well 4"


def example_program(readme: str) -> str:
    """The first ```python block of the section."""
    section = readme.split(SECTION, 1)[1].split("\n## ", 1)[0]
    found = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert found, f"no python block in {SECTION!r}"
    return found.group(1)


def test_the_program_is_found_in_the_readme():
    program = example_program(README.read_text(encoding="utf-8"))
    assert "OllamaReranker(RerankerConfig(" in program and "asyncio.run(main())" in program
    with pytest.raises(AssertionError):
        example_program(f"{SECTION}\n\nno code here\n\n## Next\n```python\nprint()\n```\n")


@pytest.fixture
def falkordb(tmp_path):
    server = EmbeddedFalkorDB(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_the_readme_program_reranks_on_a_real_model(local_llm, local_llm_config, falkordb, tmp_path):
    script = tmp_path / "example.py"
    script.write_text(example_program(README.read_text(encoding="utf-8")), encoding="utf-8")
    env = {**os.environ, "FALKORDB_HOST": falkordb.host, "FALKORDB_PORT": str(falkordb.port),
           "RERANKER_BASE_URL": local_llm, "RERANKER_MODEL": local_llm_config.local_llm_model}
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    print(result.stdout)  # the program's answer, for whoever reads the test log
    assert len(lines) == 3 and ANSWER in lines[0], result.stdout
    scores = [float(line.split()[0]) for line in lines]
    assert scores == sorted(scores, reverse=True) and all(score > 0 for score in scores)
