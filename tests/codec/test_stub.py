"""The .pyi stub of kwire._codec names exactly its public API: the public
names of the compiled core (the extension modules of kwire._core), which
kwire._codec re-exports, all of them."""

from __future__ import annotations

import ast
import os

import importlib
import pkgutil

import kwire
import kwire._core
from kwire import _codec

CORE = "kwire._core."
# The typed formats' compiled decoders: their public face is kwire.formats
# (kwire.formats.avro, kwire.formats.protobuf), not the record codec's; the
# metrics' measure (meter) is kwire.metrics'; a share group's records (acquired) are kwire.share's.
FORMAT_MODULES = {"typedcols", "avro", "avroenc", "protobuf", "meter", "acquired"}


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


def _core_modules():
    mods = [importlib.import_module(CORE + m.name) for m in pkgutil.iter_modules(kwire._core.__path__)
            if m.name not in FORMAT_MODULES]
    assert {m.__name__[len(CORE):] for m in mods} >= {"native", "records", "columnar", "legacy", "build", "send"}
    return mods


def _defined_public(module):
    """The public names ``module`` defines itself (not those it imports:
    objects of another module, or another module's exceptions)."""
    return {n for n in _public(module)
            if getattr(getattr(module, n), "__module__", module.__name__) == module.__name__}


def test_stub_lists_every_public_name():
    names, _ = _stub()
    runtime = {n for n in _public(_codec)
               if getattr(getattr(_codec, n), "__module__", CORE).startswith(CORE)}
    assert names == runtime
    assert names == set(_codec.__all__)


def test_codec_reexports_every_public_name_of_the_core():
    """Nothing public in a module of the core is missing from kwire._codec
    (and so from the stub), and each name is the core's own object."""
    for module in _core_modules():
        for n in _defined_public(module):
            assert getattr(_codec, n, None) is getattr(module, n), f"{module.__name__}.{n}"


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
