"""kwire's top-level names: the codec imported with the package, the clients
and their vocabulary on first use (PEP 562), and a compiled ``kwire._codec``."""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import subprocess
import sys
from pathlib import Path

import kwire

INIT = Path(kwire.__file__)


def _type_checking_imports() -> dict:
    """``{name: module}`` of the ``if TYPE_CHECKING:`` imports of kwire/__init__.py."""
    tree = ast.parse(INIT.read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
    return {a.name: node.module for node in block.body for a in node.names}


def test_every_lazy_name_is_its_modules_object():
    for name, module in kwire._LAZY.items():
        assert getattr(kwire, name) is getattr(importlib.import_module(module), name), name


def test_type_checkers_see_every_lazy_name_and_all_lists_them():
    assert _type_checking_imports() == kwire._LAZY
    assert set(kwire._LAZY) <= set(kwire.__all__)
    assert len(kwire.__all__) == len(set(kwire.__all__))
    assert set(kwire._LAZY) <= set(dir(kwire))


def test_clients_are_where_users_look_for_them():
    assert kwire.Producer.__module__ == "kwire.producer"
    assert kwire.Consumer.__module__ == "kwire.consumer"
    assert kwire.Admin.__module__ == "kwire.admin"
    assert kwire.NewTopic("t", num_partitions=1).name == "t"
    assert kwire.TopicPartition("t", 0) == ("t", 0)


def test_unknown_attribute_raises_attribute_error():
    try:
        kwire.NoSuchThing  # noqa: B018
    except AttributeError as e:
        assert "NoSuchThing" in str(e)
    else:
        raise AssertionError("kwire.NoSuchThing did not raise")


def test_import_kwire_loads_no_client():
    code = ("import sys, kwire; "
            "print(sorted(m for m in sys.modules if m.startswith('kwire.') and not m.startswith('kwire._')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = set(eval(out))
    assert not loaded & {"kwire.producer", "kwire.consumer", "kwire.admin", "kwire.client", "kwire.net"}, loaded


def test_codec_is_a_compiled_module():
    assert kwire._codec.__file__.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)), kwire._codec.__file__
    assert not (INIT.parent / "_codec.py").exists()
