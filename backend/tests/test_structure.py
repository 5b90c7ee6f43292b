"""The package layout keeps its promises: layers import only downward (relative imports resolved like
absolute ones), a package with a front door is entered only through it, a layered module imports at its top, never inside a function (where an import loop
hides), no module takes another's private (`_name`) names, and every module of `app` imports on its
own, first, in a fresh interpreter (an import loop hidden by import order fails here)."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BACKEND = Path(__file__).resolve().parents[1]
APP = BACKEND / "app"

# Highest first; a module may import its own layer and any layer below it, never one above.
# app.tasks (the background-task registry) is a leaf beside app.config: every layer may use it, it uses none.
# So are app.metrics (the Prometheus metrics: the API serves them, the reranker and the job queue record
# into them) and app.request_id (the request id every layer's log lines carry).
LAYERS = (("app.api",), ("app.report",), ("app.graph",), ("graphiti_llm_rerank",),
          ("app.config", "app.tasks", "app.metrics", "app.request_id"))
# Entry points and tools sit above every layer: they may import any of them, and they are the only
# modules that may import inside a function (documented lazy imports: `create_app` in app/__init__.py
# keeps `import app.config` free of Flask and Graphiti; the CLI, bench and demo load heavy tools on use).
ENTRY_MODULES = ("app", "app.wsgi")
ENTRY_PACKAGES = ("app.cli", "app.bench", "app.demo", "app.local_llm")

# `from app.x import _y` (or `x._y` on an imported module) pairs allowed anyway, each with its reason.
# Empty: every cross-module name is public. Add "importer -> module._name" only with a comment saying why.
PRIVATE_NAME_IMPORTS_ALLOWED: frozenset[str] = frozenset()


def in_package(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def module_names() -> list[str]:
    names = []
    for path in sorted(APP.rglob("*.py")):
        parts = path.relative_to(BACKEND).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


KNOWN_MODULES = frozenset(module_names())


def source_of(module: str) -> tuple[str, bool]:
    """The module's source, and whether it is a package (its __init__.py)."""
    path = BACKEND / (module.replace(".", "/") + ".py")
    if path.exists():
        return path.read_text(encoding="utf-8"), False
    return (BACKEND / module.replace(".", "/") / "__init__.py").read_text(encoding="utf-8"), True


def resolved(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module an ImportFrom names: `from .x import y` in graphiti_llm_rerank.types is graphiti_llm_rerank.x."""
    if node.level == 0:
        return node.module or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    if node.level - 1 >= len(package):
        raise ValueError(f"{module}: relative import beyond the top package (level {node.level})")
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def is_app(name: str) -> bool:
    return in_package(name, "app")


def loaded_by(node: ast.AST, module: str, is_package: bool) -> set[str]:
    """The modules one import statement loads (a package, and a submodule of `app` taken from it)."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names}
    if isinstance(node, ast.ImportFrom):
        base = resolved(module, is_package, node)
        return {base} | {f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in KNOWN_MODULES}
    return set()


def imports_of(node: ast.AST, module: str, is_package: bool) -> set[str]:
    """The `app.*` modules one import statement loads."""
    return {name for name in loaded_by(node, module, is_package) if is_app(name)}


def app_imports(module: str, source: str | None = None, is_package: bool = False) -> set[str]:
    """Every `app.*` module this module imports, at module level or inside functions, relative or absolute."""
    if source is None:
        source, is_package = source_of(module)
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        found |= imports_of(node, module, is_package)
    return found


def layer_of(module: str) -> int | None:
    for index, layer in enumerate(LAYERS):
        if any(in_package(module, package) for package in layer):
            return index
    return None


def is_entry_point(module: str) -> bool:
    return module in ENTRY_MODULES or any(in_package(module, package) for package in ENTRY_PACKAGES)


def unplaced(modules: list[str]) -> list[str]:
    """Modules (top-level ones included) that are neither in a layer nor an entry point."""
    return [name for name in modules if layer_of(name) is None and not is_entry_point(name)]


def test_every_module_is_in_a_layer_or_above_them():
    assert unplaced(module_names()) == []


def upward_imports(imports: dict[str, set[str]]) -> list[str]:
    upward = []
    for module, imported_modules in imports.items():
        own = layer_of(module)
        if own is None:
            continue
        for imported in sorted(imported_modules):
            target = layer_of(imported)
            if (target is not None and target < own) or is_entry_point(imported):
                upward.append(f"{module} -> {imported}")
    return upward


def test_layers_import_only_downward():
    assert upward_imports({module: app_imports(module) for module in module_names()}) == []


def function_local_app_imports(module: str, source: str | None = None, is_package: bool = False) -> list[str]:
    """`app.*` imports inside a function body (nested functions and methods included), as 'module:line -> target'."""
    if source is None:
        source, is_package = source_of(module)
    found = set()
    for function in ast.walk(ast.parse(source)):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(function):
            found.update((node.lineno, target) for target in imports_of(node, module, is_package))
    return [f"{module}:{line} -> {target}" for line, target in sorted(found)]


# Packages entered only through their __init__: a module outside one imports the package itself,
# never one of its modules. graphiti_llm_rerank's front door (graphiti_llm_rerank/__init__.py) is what graph/, api/,
# bench/, cli/, demo/ and report/ use; what lies behind it can move without touching them.
FRONT_DOORS = ("graphiti_llm_rerank",)


def past_front_doors(imports: dict[str, set[str]]) -> list[str]:
    """'importer -> module' for each module behind a front door imported from outside its package."""
    found = []
    for module, imported_modules in imports.items():
        for imported in sorted(imported_modules):
            for door in FRONT_DOORS:
                if in_package(imported, door) and imported != door and not in_package(module, door):
                    found.append(f"{module} -> {imported}")
    return sorted(found)


def test_outside_app_rerank_only_its_front_door_is_imported():
    assert past_front_doors({module: app_imports(module) for module in module_names()}) == []


def test_the_front_door_check_can_fail():
    assert past_front_doors({
        "app.graph.search": {"graphiti_llm_rerank", "graphiti_llm_rerank.fusion"},
        "app.bench.runner": {"graphiti_llm_rerank.strategies.registry"},
        "graphiti_llm_rerank.cross_encoder": {"graphiti_llm_rerank.fusion"},  # inside the package: its own business
        "app.api.health": {"graphiti_llm_rerank"},
    }) == ["app.bench.runner -> graphiti_llm_rerank.strategies.registry", "app.graph.search -> graphiti_llm_rerank.fusion"]
    # `from ..rerank import fusion` (a submodule taken from the package) goes past the door too.
    relative = app_imports("app.graph.search", "from ..rerank import fusion, fuse\n")
    assert past_front_doors({"app.graph.search": relative}) == ["app.graph.search -> graphiti_llm_rerank.fusion"]


def test_the_front_door_exports_what_it_names():
    import graphiti_llm_rerank

    assert sorted(set(graphiti_llm_rerank.__all__)) == sorted(graphiti_llm_rerank.__all__)
    assert [name for name in graphiti_llm_rerank.__all__ if not hasattr(graphiti_llm_rerank, name)] == []


def test_layered_modules_import_only_at_their_top():
    """An import inside a function is how an import loop hides; only entry points may import lazily."""
    layered = [module for module in module_names() if layer_of(module) is not None]
    assert layered and [hit for module in layered for hit in function_local_app_imports(module)] == []


def private_name_imports(module: str, source: str | None = None, is_package: bool = False) -> list[str]:
    """Names starting with one underscore that this module takes from another app module, as
    'module -> source._name': `from app.x import _y`, relative alike, and `x._y` on an imported app module."""
    if source is None:
        source, is_package = source_of(module)
    tree = ast.parse(source)
    found = set()
    bound: dict[str, str] = {}  # local name -> the app module it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = resolved(module, is_package, node)
            if not is_app(base):
                continue
            for alias in node.names:
                if _private(alias.name) and base != module:
                    found.add(f"{module} -> {base}.{alias.name}")
                if f"{base}.{alias.name}" in KNOWN_MODULES:
                    bound[alias.asname or alias.name] = f"{base}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if is_app(alias.name):
                    if alias.asname:
                        bound[alias.asname] = alias.name
                    else:
                        bound[alias.name.split(".")[0]] = alias.name.split(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            owner = _dotted(node.value)
            if owner is None or owner.split(".")[0] not in bound:
                continue
            first, _, rest = owner.partition(".")
            target = bound[first] + ("." + rest if rest else "")
            if target in KNOWN_MODULES and target != module:
                found.add(f"{module} -> {target}.{node.attr}")
    return sorted(found)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        owner = _dotted(node.value)
        return None if owner is None else f"{owner}.{node.attr}"
    return None


def test_no_module_takes_another_modules_private_names():
    """A name used across modules is public; `_name` promises it is used only where it is defined."""
    found = {hit for module in module_names() for hit in private_name_imports(module)}
    assert sorted(found - PRIVATE_NAME_IMPORTS_ALLOWED) == []
    assert sorted(PRIVATE_NAME_IMPORTS_ALLOWED - found) == []  # an allowance nothing uses any more goes


def test_the_layer_check_catches_upward_and_hidden_imports():
    """The check above is only worth something if it can fail: the loop this layout removed
    (rerank resources importing the graph runtime inside a function) is what it must catch."""
    assert upward_imports({"graphiti_llm_rerank.factory": {"app.graph.runtime"}}) == ["graphiti_llm_rerank.factory -> app.graph.runtime"]
    assert upward_imports({"app.graph.search": {"app.report.tools", "graphiti_llm_rerank.cross_encoder"}}) == [
        "app.graph.search -> app.report.tools"]
    assert upward_imports({"app.cli.demo": {"app.api.graph"}}) == []  # entry points sit above the layers
    assert upward_imports({"app.graph.store": {"app"}}) == ["app.graph.store -> app"]  # app/__init__ is an entry
    hidden = app_imports("app.api.rerank")
    assert {"app.graph.runtime", "graphiti_llm_rerank"} <= hidden


def test_the_layer_check_resolves_relative_imports():
    source = "from ..graph import runtime\nfrom . import judge\nfrom .strategies.base import shown_texts\n"
    imports = app_imports("graphiti_llm_rerank.factory", source)
    assert {"app.graph", "app.graph.runtime", "graphiti_llm_rerank", "graphiti_llm_rerank.judge", "graphiti_llm_rerank.strategies.base"} <= imports
    assert upward_imports({"graphiti_llm_rerank.factory": imports}) == [
        "graphiti_llm_rerank.factory -> app.graph", "graphiti_llm_rerank.factory -> app.graph.runtime"]
    # In a package's __init__, one dot is the package itself.
    assert app_imports("graphiti_llm_rerank", "from .types import Document\n", is_package=True) == {"graphiti_llm_rerank.types"}
    assert app_imports("graphiti_llm_rerank", "from ..api import errors\n", is_package=True) == {"app.api", "app.api.errors"}
    with pytest.raises(ValueError):
        app_imports("app.config", "from ... import x\n")


def test_top_level_modules_are_checked_too():
    assert layer_of("app.tasks") == layer_of("app.config")  # a leaf: any layer may use it ...
    assert upward_imports({"app.tasks": {"app.graph.runtime"}}) == ["app.tasks -> app.graph.runtime"]  # ... uses none
    assert upward_imports({"app.config": {"app.tasks"}, "app.api.tasks": {"app.tasks"}}) == []
    assert unplaced(["app", "app.wsgi", "app.tasks", "app.config", "app.helpers", "app.cli.demo"]) == ["app.helpers"]
    assert unplaced(["app.apix", "app.cli_tools"]) == ["app.apix", "app.cli_tools"]  # packages, not name prefixes


def test_the_observability_leaves_sit_at_the_bottom():
    """The reranker records into app.metrics and the graph loop's lines carry app.request_id: both sit
    beside app.config, so every layer may use them and they may use no layer above it."""
    assert layer_of("app.metrics") == layer_of("app.request_id") == layer_of("app.config")
    assert upward_imports({"graphiti_llm_rerank.cross_encoder": {"app.metrics"}, "app.tasks": {"app.request_id"}}) == []
    assert upward_imports({"app.metrics": {"graphiti_llm_rerank"}, "app.request_id": {"app.api.errors"}}) == [
        "app.metrics -> graphiti_llm_rerank", "app.request_id -> app.api.errors"]


WEB_FRAMEWORK = ("flask", "werkzeug")


def web_framework_imports(module: str) -> set[str]:
    return {name for name in third_party_imports(module) if name.split(".")[0] in WEB_FRAMEWORK}


def test_only_the_api_layer_and_the_entry_points_import_flask():
    """Below app.api nothing knows it serves HTTP: the reranker, the graph and the metrics it records
    work the same under a job worker or a benchmark."""
    below_api = [module for module in module_names() if layer_of(module) not in (None, layer_of("app.api"))]
    assert "app.metrics" in below_api and "graphiti_llm_rerank.cross_encoder" in below_api
    assert {module: sorted(web_framework_imports(module)) for module in below_api
            if web_framework_imports(module)} == {}
    assert web_framework_imports("app.api.metrics") == {"flask"}  # the check sees Flask where it is imported


def test_the_function_local_import_check_can_fail():
    source = (
        "import json\n"
        "from app.graph.runtime import run_on_loop\n"  # the top: fine
        "def build():\n"
        "    import os\n"  # not an app module: fine
        "    from app.graph.runtime import shared_embedder\n"
        "class Reranker:\n"
        "    async def rank(self):\n"
        "        def inner():\n"
        "            from . import judge\n"
        "        import graphiti_llm_rerank.factory\n"
    )
    assert function_local_app_imports("graphiti_llm_rerank.cross_encoder", source) == [
        "graphiti_llm_rerank.cross_encoder:5 -> app.graph.runtime",
        "graphiti_llm_rerank.cross_encoder:9 -> graphiti_llm_rerank",
        "graphiti_llm_rerank.cross_encoder:9 -> graphiti_llm_rerank.judge",
        "graphiti_llm_rerank.cross_encoder:10 -> graphiti_llm_rerank.factory",
    ]
    assert function_local_app_imports("graphiti_llm_rerank.cross_encoder", "from app.config import Config\n") == []


def test_the_private_name_check_can_fail():
    source = (
        "from app.graph.runtime import _build_reranker, run_on_loop, __all__\n"
        "from .judge import _redact\n"
        "from app.graph import store as graph_store\n"
        "import graphiti_llm_rerank.types\n"
        "import graphiti_llm_rerank.judge as judge\n"
        "from graphiti_llm_rerank.circuit_breaker import CircuitBreaker\n"
        "graph_store._query(1)\n"
        "graphiti_llm_rerank.types._check\n"
        "judge._client\n"
        "CircuitBreaker._state\n"  # a class's attribute, not a module's: another check's business
        "self._x\n"
    )
    assert private_name_imports("graphiti_llm_rerank.factory", source) == [
        "graphiti_llm_rerank.factory -> app.graph.runtime._build_reranker",
        "graphiti_llm_rerank.factory -> app.graph.store._query",
        "graphiti_llm_rerank.factory -> graphiti_llm_rerank.judge._client",
        "graphiti_llm_rerank.factory -> graphiti_llm_rerank.judge._redact",
        "graphiti_llm_rerank.factory -> graphiti_llm_rerank.types._check",
    ]
    assert private_name_imports("graphiti_llm_rerank.factory", "from graphiti_llm_rerank.judge import LLMJudge\n") == []


def third_party_imports(module: str) -> set[str]:
    """The modules outside `app` and the standard library that this module imports."""
    source, is_package = source_of(module)
    return {name for node in ast.walk(ast.parse(source)) for name in loaded_by(node, module, is_package)
            if not is_app(name) and name.split(".")[0] not in sys.stdlib_module_names}


# One interpreter loads the third-party modules `app` imports (Graphiti, Flask, the clients: about 3 s
# of each start), then forks one child per module, which imports that one `app` module first. No `app`
# module is loaded before the fork, so an import loop that hides behind import order fails as it would
# in a fresh interpreter; 166 fresh interpreters took 170 s of the suite, the forks take seconds.
_FORK_IMPORTER = """
import importlib, json, os, sys, traceback
preload, modules = json.loads(sys.argv[1]), json.loads(sys.argv[2])
for name in preload:
    try:
        importlib.import_module(name)
    except Exception:
        pass  # an optional extra that is not installed: the child's own import says so if app needs it
assert not [m for m in sys.modules if m == "app" or m.startswith("app.")], "app loaded before the fork"
failures = {}
for module in modules:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        code = 0
        try:
            importlib.import_module(module)
        except BaseException:
            os.write(write, traceback.format_exc()[-2000:].encode())
            code = 1
        os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        error = pipe.read().decode()
    _, status = os.waitpid(pid, 0)
    if status != 0:
        failures[module] = error or f"exit status {status}"
print(json.dumps(failures))
"""


def imports_alone(modules: list[str]) -> dict[str, str]:
    """{module: traceback} for each module that fails to import first in its own forked child."""
    preload = sorted(set().union(*(third_party_imports(m) for m in module_names())))
    result = subprocess.run(
        [sys.executable, "-c", _FORK_IMPORTER, json.dumps(preload), json.dumps(modules)],
        cwd=BACKEND, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_every_module_imports_first_in_a_fresh_interpreter():
    assert imports_alone(module_names()) == {}


def test_the_fresh_import_check_catches_an_import_loop():
    # Two modules that import each other's names at their top: importing either first fails, whatever
    # the other modules did before (none ran: each child starts from the preloaded interpreter).
    package = BACKEND / "app" / "_loop_probe"
    package.mkdir()
    try:
        (package / "__init__.py").write_text("")
        (package / "first.py").write_text("from app._loop_probe.second import B\nA = 1\n")
        (package / "second.py").write_text("from app._loop_probe.first import A\nB = 2\n")
        failures = imports_alone(["app._loop_probe.first", "app._loop_probe.second", "app.config"])
    finally:
        shutil.rmtree(package)
    assert set(failures) == {"app._loop_probe.first", "app._loop_probe.second"}
    assert "ImportError" in failures["app._loop_probe.first"]
