"""The package layout keeps its promises: layers import only downward, and every module of `app`
imports on its own, first, in a fresh interpreter (an import loop hidden by import order fails here)."""

from __future__ import annotations

import ast
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

BACKEND = Path(__file__).resolve().parents[1]
APP = BACKEND / "app"

# Highest first; a module may import its own layer and any layer below it, never one above.
LAYERS = ("app.api", "app.report", "app.graph", "app.rerank", "app.config")
# Entry points and tools sit above every layer; app.tasks is a leaf every layer may use.
ABOVE_LAYERS = ("app.cli", "app.bench", "app.demo", "app.wsgi", "app.local_llm", "app.__init__")


def module_names() -> list[str]:
    names = []
    for path in sorted(APP.rglob("*.py")):
        parts = path.relative_to(BACKEND).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def app_imports(module: str) -> set[str]:
    """Every `app.*` module this module imports, at module level or inside functions."""
    path = APP.parent / (module.replace(".", "/") + ".py")
    if not path.exists():
        path = APP.parent / module.replace(".", "/") / "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("app"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("app"))
    return found


def layer_of(module: str) -> int | None:
    for index, layer in enumerate(LAYERS):
        if module == layer or module.startswith(layer + "."):
            return index
    return None


def test_every_module_is_in_a_layer_or_above_them():
    stray = [name for name in module_names()
             if name not in ("app", "app.tasks") and layer_of(name) is None
             and not name.startswith(ABOVE_LAYERS)]
    assert stray == []


def upward_imports(imports: dict[str, set[str]]) -> list[str]:
    upward = []
    for module, imported_modules in imports.items():
        own = layer_of(module)
        if own is None:
            continue
        for imported in imported_modules:
            target = layer_of(imported)
            if (target is not None and target < own) or imported == "app" or imported.startswith(ABOVE_LAYERS):
                upward.append(f"{module} -> {imported}")
    return upward


def test_layers_import_only_downward():
    assert upward_imports({module: app_imports(module) for module in module_names()}) == []


def test_the_layer_check_catches_upward_and_hidden_imports():
    """The check above is only worth something if it can fail: the loop this layout removed
    (rerank resources importing the graph runtime inside a function) is what it must catch."""
    assert upward_imports({"app.rerank.factory": {"app.graph.runtime"}}) == ["app.rerank.factory -> app.graph.runtime"]
    assert upward_imports({"app.graph.search": {"app.report.tools", "app.rerank.guarded"}}) == [
        "app.graph.search -> app.report.tools"]
    assert upward_imports({"app.cli.demo": {"app.api.graph"}}) == []  # entry points sit above the layers
    hidden = app_imports("app.api.rerank")  # imports at module level and inside functions alike
    assert {"app.graph.runtime", "app.rerank.factory"} <= hidden


def _import_alone(module: str) -> tuple[str, int, str]:
    result = subprocess.run(
        [sys.executable, "-c", f"import {module}"], cwd=BACKEND, capture_output=True, text=True, timeout=300,
    )
    return module, result.returncode, result.stderr[-2000:]


@pytest.mark.parametrize("batch", [0, 1])
def test_every_module_imports_first_in_a_fresh_interpreter(batch):
    # Two batches, two workers each: the 2-core machine stays usable for whatever else runs.
    modules = module_names()[batch::2]
    with ThreadPoolExecutor(max_workers=2) as pool:
        failures = [(name, err) for name, code, err in pool.map(_import_alone, modules) if code != 0]
    assert failures == []
