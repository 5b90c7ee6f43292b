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


PACKAGE_DIR = Path(graphiti_llm_rerank.__file__).resolve().parent


def typed_names(source: str) -> set[str]:
    """The names the top level imports for type checkers (its `if TYPE_CHECKING:` block)."""
    import ast

    names: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            names |= {alias.name for statement in node.body if isinstance(statement, ast.ImportFrom)
                      for alias in statement.names}
    return names


def test_the_surface_is_small_and_every_lazy_name_is_typed():
    assert len(graphiti_llm_rerank.__all__) <= 20
    lazy = set(graphiti_llm_rerank.__all__) - {"RerankObserver", "RerankerConfig", "__version__", "set_observer"}
    assert typed_names((PACKAGE_DIR / "__init__.py").read_text(encoding="utf-8")) == lazy
    assert (PACKAGE_DIR / "py.typed").is_file()


def test_the_typed_names_check_can_fail():
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from x import A, B\nfrom y import C\n"
    assert typed_names(source) == {"A", "B"}


def test_one_error_type_tells_every_failure_apart():
    from graphiti_llm_rerank import types

    subclasses = [value for value in vars(types).values()
                  if isinstance(value, type) and issubclass(value, graphiti_llm_rerank.RerankError)]
    codes = [cls.code for cls in subclasses]
    assert len(subclasses) == 8 and len(set(codes)) == len(codes)
