"""The .pyi stub of the compiled module names exactly its public API."""

from __future__ import annotations

import ast
import os

import kwire
from kwire import _codec


def _stub():
    path = os.path.join(os.path.dirname(kwire.__file__), "_codec.pyi")
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    names, members = set(), {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names.add(node.name)
            members[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef)} | {
                n.target.id for n in node.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
        elif isinstance(node, ast.FunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if not n.startswith("_")}, members


def _public(obj):
    return {n for n in dir(obj) if not n.startswith("_")}


def test_stub_lists_every_public_name():
    names, _ = _stub()
    runtime = {n for n in _public(_codec) if getattr(getattr(_codec, n), "__module__", "kwire._codec") == "kwire._codec"}
    assert names == runtime


def test_stub_lists_every_public_member():
    _, members = _stub()
    for cls, stubbed in members.items():
        if cls.startswith("_"):
            continue
        runtime = _public(getattr(_codec, cls))
        assert {m for m in stubbed if not m.startswith("_")} == runtime, cls


def test_package_exports_resolve():
    for name in kwire.__all__:
        assert hasattr(kwire, name), name
