"""The top level: a small typed surface, cheap to import, the version the distribution declares."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import graphiti_llm_rerank

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def test_every_exported_name_resolves():
    assert sorted(set(graphiti_llm_rerank.__all__)) == sorted(graphiti_llm_rerank.__all__)
    assert [name for name in graphiti_llm_rerank.__all__ if getattr(graphiti_llm_rerank, name, None) is None] == []


def test_an_unknown_name_is_an_attribute_error():
    try:
        graphiti_llm_rerank.LLMJudge  # behind the top level: its submodule has it
    except AttributeError as error:
        assert "LLMJudge" in str(error)
    else:
        raise AssertionError("LLMJudge is not a top-level name")


def test_the_version_is_the_distributions():
    declared = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["version"]
    assert graphiti_llm_rerank.__version__ == declared


def test_reading_the_config_loads_neither_graphiti_nor_the_model_client():
    """An app's settings module imports RerankerConfig; its lightweight commands must stay lightweight."""
    script = ("import sys\nfrom graphiti_llm_rerank import RerankerConfig\nRerankerConfig.ALLOWED\n"
              "print(sorted({m.split('.')[0] for m in sys.modules} & {'graphiti_core', 'openai', 'numpy', 'httpx'}))\n"
              "from graphiti_llm_rerank import OllamaReranker\n"
              "print('graphiti_core' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["[]", "True"]
