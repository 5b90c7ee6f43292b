"""The package layout keeps its promises: layers import only downward (relative imports resolved like
absolute ones), a package with a front door is entered only through it, a layered module imports at its top, never inside a function (where an import loop
hides), no module takes another's private (`_name`) names, the app never imports the benchmarks (`bench`) and they
use only the app's surface named here, and every module of `app` and `bench` imports on its own, first, in a
fresh interpreter (an import loop hidden by import order fails here)."""

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
# So are app.metrics (the Prometheus metrics: the API serves them, the reranker (through its observer)
# and the job queue record into them) and app.request_id (the request id every layer's log lines carry).
LAYERS = (("app.api",), ("app.report",), ("app.graph",), ("app.config", "app.tasks", "app.metrics", "app.request_id"))
# Entry points and tools sit above every layer: they may import any of them, and they are the only
# modules that may import inside a function (documented lazy imports: `create_app` in app/__init__.py
# keeps `import app.config` free of Flask and Graphiti; the CLI and demo load heavy tools on use).
ENTRY_MODULES = ("app", "app.wsgi")
ENTRY_PACKAGES = ("app.cli", "app.demo", "app.local_llm")

# `from app.x import _y` (or `x._y` on an imported module) pairs allowed anyway, each with its reason.
# Empty: every cross-module name is public. Add "importer -> module._name" only with a comment saying why.
PRIVATE_NAME_IMPORTS_ALLOWED: frozenset[str] = frozenset()


def in_package(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def module_names(root: Path = APP) -> list[str]:
    names = []
    for path in sorted(root.rglob("*.py")):
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


# The reranker is an installed package (reranker/, import graphiti_llm_rerank): the app enters it only
# through its top level, and only by the names it exports. The benchmarks measure its inner parts
# (the judge's prompt, fusion's variants) and may import its submodules; they are a package beside the
# app (`bench`), so the check below, which reads the app's modules, would pass them anyway.
PACKAGE = "graphiti_llm_rerank"
PACKAGE_DIR = BACKEND.parent / "reranker" / "src" / PACKAGE
INNER_PARTS_ALLOWED = ("bench",)


def package_modules() -> list[str]:
    names = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def package_imports(source: str) -> dict[str, set[str]]:
    """{package module imported: names taken from it} for one app module's source."""
    modules = set(package_modules())
    found: dict[str, set[str]] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if in_package(alias.name, PACKAGE):
                    found.setdefault(alias.name, set())
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and in_package(node.module or "", PACKAGE):
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                if submodule in modules:
                    found.setdefault(submodule, set())
                else:
                    found.setdefault(node.module, set()).add(alias.name)
    return found


def past_the_top_level(imports: dict[str, dict[str, set[str]]], exported: set[str]) -> list[str]:
    """'importer -> what' for each import of the package other than an exported name of its top level."""
    found = []
    for module, imported in imports.items():
        if any(in_package(module, allowed) for allowed in INNER_PARTS_ALLOWED):
            continue
        for target, names in imported.items():
            if target != PACKAGE:
                found.append(f"{module} -> {target}")
            found.extend(f"{module} -> {PACKAGE}.{name}" for name in sorted(names - exported))
    return sorted(found)


def test_the_app_enters_the_reranker_only_through_its_top_level():
    import graphiti_llm_rerank

    imports = {module: package_imports(source_of(module)[0]) for module in module_names()}
    assert any(PACKAGE in imported for imported in imports.values())  # the check sees the app's imports
    assert past_the_top_level(imports, set(graphiti_llm_rerank.__all__)) == []


def test_the_top_level_check_can_fail():
    exported = {"OllamaReranker", "judge_positions"}
    assert past_the_top_level({
        "app.graph.search": package_imports("from graphiti_llm_rerank import judge_positions, fuse\n"
                                            "from graphiti_llm_rerank import fusion\n"),
        "app.api.rerank": package_imports("import graphiti_llm_rerank.judge\n"),
        "bench.runner": package_imports("from graphiti_llm_rerank.judge_prompt import PROMPT_VERSION\n"),
        "app.graph.runtime": package_imports("from graphiti_llm_rerank import OllamaReranker\n"),
    }, exported) == ["app.api.rerank -> graphiti_llm_rerank.judge", "app.graph.search -> graphiti_llm_rerank.fuse",
                     "app.graph.search -> graphiti_llm_rerank.fusion"]


FOREIGN_TO_THE_PACKAGE = ("app", "flask", "werkzeug")


def foreign_imports(source: str) -> set[str]:
    """The modules of the app or of a web framework that one source imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found.add(node.module or "")
    return {name for name in found if name.split(".")[0] in FOREIGN_TO_THE_PACKAGE}


def test_the_reranker_package_imports_neither_the_app_nor_flask():
    """It installs into any Graphiti app: nothing of this app and no web framework inside it."""
    sources = {path.relative_to(PACKAGE_DIR).as_posix(): path.read_text(encoding="utf-8")
               for path in PACKAGE_DIR.rglob("*.py")}
    assert len(sources) > 20
    assert {path: sorted(foreign_imports(source)) for path, source in sources.items() if foreign_imports(source)} == {}


def test_the_foreign_import_check_can_fail():
    source = ("import asyncio\nfrom graphiti_core import Graphiti\nfrom app.metrics import breaker_state\n"
              "def f():\n    import flask\n    from werkzeug.exceptions import NotFound\n")
    assert foreign_imports(source) == {"app.metrics", "flask", "werkzeug.exceptions"}


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


# The benchmarks (`python -m bench`, backend/bench/) sit beside the app, outside it: the app never imports
# them (the production image does not hold them), and they reach the app only through the modules named
# here, its surface for tools outside it, never through a private name. A benchmark that needs more goes
# through the HTTP API (bench/load_run.py's ServedApp) or adds a small public function to one of these.
BENCH = BACKEND / "bench"
BENCH_MAY_IMPORT = frozenset({
    # the app itself (`create_app`, `configure_logging`), its settings, and the job queue's task states
    "app", "app.config", "app.tasks",
    # the graph as the app runs it: the adapter and its event loop, search and the first stage's halves,
    # the vector index, the graph registry, and what a database that cannot be used raises; the search
    # and scale benchmarks time these parts one by one
    "app.graph.runtime", "app.graph.loop", "app.graph.search", "app.graph.search_hook", "app.graph.vector_index",
    "app.graph.store", "app.graph.unavailable",
    # what a search is narrowed to (SearchFilter, parse_filter): the filter and time benchmarks search with it
    "app.graph.search_filters",
    # the embedder's similarities the search uses (query embedding, cosines): the cosine-only rows and the cheap order
    "app.graph.similarity",
    # the servers the app starts, and how: free ports and child processes, the local Neo4j, the embedded
    # FalkorDB, the local model server and Ollama
    "app.graph.server_process", "app.graph.local_neo4j", "app.graph.embedded_falkordb",
    "app.local_llm", "app.local_llm.ollama",
    # the report agent, its prompts, tools and store: what the report benchmarks run and score
    "app.report", "app.report.agent", "app.report.prompts", "app.report.store", "app.report.tool_registry",
    "app.report.tools", "app.report.citation_floor",
    # the shipped sample graph, and the client that uploads facts through the API in batches
    "app.demo.sample_graph", "app.cli.fact_upload",
})


def bench_imports(module: str, source: str | None = None, is_package: bool = False) -> set[str]:
    """Every module of `bench` this module imports, at its top or inside a function."""
    if source is None:
        source, is_package = source_of(module)
    return {name for node in ast.walk(ast.parse(source)) for name in loaded_by(node, module, is_package)
            if in_package(name, "bench")}


def past_the_bench_surface(imports: dict[str, set[str]]) -> list[str]:
    """'importer -> module' for each module of the app a benchmark imports outside BENCH_MAY_IMPORT."""
    return sorted(f"{module} -> {imported}" for module, imported_modules in imports.items()
                  for imported in imported_modules if imported not in BENCH_MAY_IMPORT)


def test_the_app_never_imports_the_benchmarks():
    assert sorted(f"{module} -> {imported}" for module in module_names() for imported in bench_imports(module)) == []


def test_the_benchmarks_reach_the_app_only_through_its_surface():
    imports = {module: app_imports(module) for module in module_names(BENCH)}
    assert "bench.cli.load" in imports and "bench.runner" in imports
    assert past_the_bench_surface(imports) == []
    assert sorted(BENCH_MAY_IMPORT - set().union(*imports.values())) == []  # a module no longer used leaves the list
    assert [hit for module in imports for hit in private_name_imports(module)] == []


def test_the_benchmark_checks_can_fail():
    assert bench_imports("app.cli.demo", "import bench\nfrom bench.load_run import ServedApp\n") == {
        "bench", "bench.load_run"}
    assert bench_imports("app.graph.search", "def f():\n    from bench import cli\n") == {"bench"}
    assert bench_imports("app.cli.demo", "import benchmark\nfrom app.demo import bench_note\n") == set()
    imports = app_imports("bench.scale", "from app.config import Config\nfrom app.graph.fact_import import x\n"
                                         "from app.api import graph\n")
    assert past_the_bench_surface({"bench.scale": imports}) == [
        "bench.scale -> app.api", "bench.scale -> app.api.graph", "bench.scale -> app.graph.fact_import"]
    assert private_name_imports("bench.scale", "from app.graph.runtime import _build_reranker\n") == [
        "bench.scale -> app.graph.runtime._build_reranker"]


def test_the_layer_check_catches_upward_and_hidden_imports():
    """The check above is only worth something if it can fail: the loop this layout removed
    (rerank resources importing the graph runtime inside a function) is what it must catch."""
    assert upward_imports({"app.graph.store": {"app.graph.runtime", "app.api.errors"}}) == [
        "app.graph.store -> app.api.errors"]
    assert upward_imports({"app.graph.search": {"app.report.tools", "app.config"}}) == [
        "app.graph.search -> app.report.tools"]
    assert upward_imports({"app.cli.demo": {"app.api.graph"}}) == []  # entry points sit above the layers
    assert upward_imports({"app.graph.store": {"app"}}) == ["app.graph.store -> app"]  # app/__init__ is an entry
    hidden = app_imports("app.api.rerank")
    assert {"app.graph.runtime", "app.graph.loop"} <= hidden


def test_the_layer_check_resolves_relative_imports():
    source = "from ..report import tools\nfrom . import store\nfrom .search import search_graph\n"
    imports = app_imports("app.graph.factory", source)
    assert {"app.report", "app.report.tools", "app.graph", "app.graph.store", "app.graph.search"} <= imports
    assert upward_imports({"app.graph.factory": imports}) == [
        "app.graph.factory -> app.report", "app.graph.factory -> app.report.tools"]
    # In a package's __init__, one dot is the package itself.
    assert app_imports("app.graph", "from .store import cypher_rows\n", is_package=True) == {"app.graph.store"}
    assert app_imports("app.graph", "from ..api import errors\n", is_package=True) == {"app.api", "app.api.errors"}
    with pytest.raises(ValueError):
        app_imports("app.config", "from ... import x\n")


def test_top_level_modules_are_checked_too():
    assert layer_of("app.tasks") == layer_of("app.config")  # a leaf: any layer may use it ...
    assert upward_imports({"app.tasks": {"app.graph.runtime"}}) == ["app.tasks -> app.graph.runtime"]  # ... uses none
    assert upward_imports({"app.config": {"app.tasks"}, "app.api.tasks": {"app.tasks"}}) == []
    assert unplaced(["app", "app.wsgi", "app.tasks", "app.config", "app.helpers", "app.cli.demo"]) == ["app.helpers"]
    assert unplaced(["app.apix", "app.cli_tools"]) == ["app.apix", "app.cli_tools"]  # packages, not name prefixes


def test_the_observability_leaves_sit_at_the_bottom():
    """The graph runtime connects the reranker's observer to app.metrics and the graph loop's lines carry
    app.request_id: both sit beside app.config, so every layer may use them and they may use no layer above it."""
    assert layer_of("app.metrics") == layer_of("app.request_id") == layer_of("app.config")
    assert upward_imports({"app.graph.runtime": {"app.metrics"}, "app.tasks": {"app.request_id"}}) == []
    assert upward_imports({"app.metrics": {"app.graph.runtime"}, "app.request_id": {"app.api.errors"}}) == [
        "app.metrics -> app.graph.runtime", "app.request_id -> app.api.errors"]


WEB_FRAMEWORK = ("flask", "werkzeug")


def web_framework_imports(module: str) -> set[str]:
    return {name for name in third_party_imports(module) if name.split(".")[0] in WEB_FRAMEWORK}


def test_only_the_api_layer_and_the_entry_points_import_flask():
    """Below app.api nothing knows it serves HTTP: the reranker, the graph and the metrics it records
    work the same under a job worker or a benchmark."""
    below_api = [module for module in module_names() if layer_of(module) not in (None, layer_of("app.api"))]
    assert "app.metrics" in below_api and "app.graph.search" in below_api
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
        "            from . import store\n"
        "        import app.graph.factory\n"
    )
    assert function_local_app_imports("app.graph.search", source) == [
        "app.graph.search:5 -> app.graph.runtime",
        "app.graph.search:9 -> app.graph",
        "app.graph.search:9 -> app.graph.store",
        "app.graph.search:10 -> app.graph.factory",
    ]
    assert function_local_app_imports("app.graph.search", "from app.config import Config\n") == []


def test_the_private_name_check_can_fail():
    source = (
        "from app.graph.runtime import _build_reranker, run_on_loop, __all__\n"
        "from .store import _redact\n"
        "from app.graph import store as graph_store\n"
        "import app.graph.timestamps\n"
        "import app.graph.loop as loop\n"
        "from app.graph.graph_locks import GraphLocks\n"
        "graph_store._query(1)\n"
        "app.graph.timestamps._check\n"
        "loop._client\n"
        "GraphLocks._state\n"  # a class's attribute, not a module's: another check's business
        "self._x\n"
    )
    assert private_name_imports("app.graph.factory", source) == [
        "app.graph.factory -> app.graph.loop._client",
        "app.graph.factory -> app.graph.runtime._build_reranker",
        "app.graph.factory -> app.graph.store._query",
        "app.graph.factory -> app.graph.store._redact",
        "app.graph.factory -> app.graph.timestamps._check",
    ]
    assert private_name_imports("app.graph.factory", "from app.graph.loop import run_on_loop\n") == []


def third_party_imports(module: str) -> set[str]:
    """The modules outside `app` and the standard library that this module imports."""
    source, is_package = source_of(module)
    return {name for node in ast.walk(ast.parse(source)) for name in loaded_by(node, module, is_package)
            if not is_app(name) and not in_package(name, "bench") and name.split(".")[0] not in sys.stdlib_module_names}


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
    preload = sorted(set().union(*(third_party_imports(m) for m in module_names() + module_names(BENCH))))
    result = subprocess.run(
        [sys.executable, "-c", _FORK_IMPORTER, json.dumps(preload), json.dumps(modules)],
        cwd=BACKEND, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_every_module_imports_first_in_a_fresh_interpreter():
    assert imports_alone(module_names() + module_names(BENCH)) == {}


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
