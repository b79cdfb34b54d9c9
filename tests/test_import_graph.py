"""kwire's modules import each other without cycles, and each imports on
its own.

The graph is read from the source (``ast``), not from an interpreter: every
``import kwire...``, ``from kwire... import ...`` and relative import, at
the top of a module or inside a function (a lazy import that closes a cycle
is still a cycle: it only moves the failure to whichever module happens to
be imported first). Importing ``a.b.c`` runs the ``__init__`` of ``a.b``
too, so that counts as an edge, except where the importer lives inside that
package (its package is being imported already).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Set

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "kwire"

#: Lazy imports allowed to stay inside a cycle: {(importer, imported): reason}.
#: None today; a new entry needs a reason no restructuring can remove.
ALLOWED_LAZY: Dict[tuple, str] = {}

#: Modules that import an optional dependency at their top: imported only
#: where that dependency is installed.
OPTIONAL = {"kwire.spark": "pyspark", "kwire._arrow": "pyarrow", "kwire.registry.framing": "pyarrow",
            "kwire.formats": "pyarrow", "kwire.scanning": "pyarrow",
            **{f"kwire.registry.{m}": "httpx" for m in ("steps", "auth", "client", "aio")}}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> Dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _ancestors(name: str) -> List[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _imports(name: str, path: Path, modules: Dict[str, Path]) -> Dict[str, bool]:
    """{imported kwire module: whether only lazily (inside a function)}."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    is_package = path.name == "__init__.py"
    found: Dict[str, bool] = {}

    def add(target: str, lazy: bool) -> None:
        own = set(_ancestors(name)) | ({name} if is_package else set())
        for mod in _ancestors(target) + [target]:
            if mod in modules and mod != name and mod not in own:
                found[mod] = found.get(mod, True) and lazy

    def visit(node: ast.AST, lazy: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name == "kwire" or alias.name.startswith("kwire."):
                        add(alias.name, lazy)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[:len(base) - (child.level - 1)]
                    source = ".".join(base + ([child.module] if child.module else []))
                else:
                    source = child.module or ""
                if source != "kwire" and not source.startswith("kwire."):
                    continue
                for alias in child.names:
                    sub = f"{source}.{alias.name}"
                    add(sub if sub in modules else source, lazy)
            visit(child, inner)

    visit(tree, False)
    return found


def import_graph() -> Dict[str, Dict[str, bool]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _cycles(graph: Dict[str, Dict[str, bool]]) -> List[List[str]]:
    """The strongly connected components with more than one module (or a
    module importing itself), each as a sorted list (Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    out: List[List[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, {}):
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def test_the_graph_is_read():
    graph = import_graph()
    assert "kwire.consumer" in graph and "kwire.protocol.versions" in graph
    assert "kwire.client" in graph["kwire.consumer"]
    assert "kwire.protocol" in graph["kwire.client"]          # from kwire import protocol
    assert "kwire.errors" in graph["kwire.compression"]       # from .errors import ...
    assert graph["kwire.cli"]["kwire.admin"] is True          # lazy only


def test_the_cycle_finder_finds_lazy_cycles():
    graph = {"a": {"b": False}, "b": {"c": False}, "c": {"a": True}, "d": {"a": False}}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_no_import_cycles():
    graph = import_graph()
    for (importer, imported), reason in ALLOWED_LAZY.items():
        assert reason and graph[importer].get(imported) is True, (importer, imported)
        del graph[importer][imported]
    cycles = _cycles(graph)
    detail = []
    for comp in cycles:
        members = set(comp)
        edges = [f"{a} -> {b}{' (lazy)' if graph[a][b] else ''}" for a in comp for b in sorted(graph[a])
                 if b in members]
        detail.append("cycle among " + ", ".join(comp) + ":\n    " + "\n    ".join(edges))
    assert not cycles, "\n".join(detail)


def _importable(name: str) -> bool:
    for prefix, dependency in OPTIONAL.items():
        if (name == prefix or name.startswith(prefix + ".")) and importlib.util.find_spec(dependency) is None:
            return False
    return True


#: Imported once before the children fork (their import time, not kwire's, is what a fresh interpreter per
#: module would pay each time); kwire itself is never imported by the parent.
PRELOAD = ("pyarrow", "pyarrow.compute", "pyspark.sql", "httpx", "numpy", "opentelemetry.metrics",
           "opentelemetry.trace", "prometheus_client", "fastavro", "google.protobuf")

_FORKER = """
import importlib, json, os, sys, traceback
for dep in sys.argv[1:]:
    try:
        importlib.import_module(dep)
    except ImportError:
        pass
assert not any(m == "kwire" or m.startswith("kwire.") for m in sys.modules), "the parent imported kwire"
out = {}
for name in sys.stdin.read().split():
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            importlib.import_module(name)
            code = 0
        except BaseException:
            os.write(w, traceback.format_exc().encode())
            code = 1
        os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        err = f.read().decode()
    _, status = os.waitpid(pid, 0)
    out[name] = [os.waitstatus_to_exitcode(status), err]
json.dump(out, sys.stdout)
"""


@pytest.fixture(scope="module")
def imported_alone(tmp_path_factory) -> Dict[str, list]:
    """Each importable module imported in its own process, forked from an
    interpreter that has kwire's third-party dependencies loaded and none of
    kwire: {module: [exit code, traceback]}. Byte code is cached (outside
    the tree) whatever PYTHONDONTWRITEBYTECODE says, so that the generated
    protocol module is compiled once, not by each child."""
    names = [n for n in sorted(_modules()) if _importable(n)]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(tmp_path_factory.mktemp("pycache"))
    env["PYTHONPATH"] = os.pathsep.join([str(SRC)] + [p for p in [env.get("PYTHONPATH")] if p])
    proc = subprocess.run([sys.executable, "-c", _FORKER, *PRELOAD], input=" ".join(names), capture_output=True,
                          text=True, env=env, cwd=str(SRC.parent), timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("name", sorted(_modules()))
def test_each_module_imports_alone(name, imported_alone):
    if not _importable(name):
        pytest.skip(f"{name} needs an optional dependency that is not installed")
    code, err = imported_alone[name]
    assert code == 0, err
