"""Hypothesis strategies for every generated message, built from the same
JSON model the generator uses (scripts/gen_protocol.py)."""

from __future__ import annotations

import os
import sys
import uuid
from functools import lru_cache
from typing import Any, Dict

from hypothesis import strategies as st

_SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "scripts")
if _SCRIPTS not in sys.path:
    sys.path.insert(0, _SCRIPTS)

import gen_protocol  # noqa: E402

from kwire.protocol import MESSAGES  # noqa: E402

INT_RANGES = {"int8": (-2**7, 2**7 - 1), "int16": (-2**15, 2**15 - 1), "uint16": (0, 2**16 - 1),
              "int32": (-2**31, 2**31 - 1), "uint32": (0, 2**32 - 1), "int64": (-2**63, 2**63 - 1)}


@lru_cache(maxsize=None)
def model(name: str) -> "gen_protocol.Message":
    return gen_protocol.Message(gen_protocol.load(name))


def all_message_names():
    return [stem + kind for stem in gen_protocol.APIS for kind in ("Request", "Response")] + list(gen_protocol.DATA)


def _scalar(t: str, nullable: bool):
    if t in INT_RANGES:
        lo, hi = INT_RANGES[t]
        s = st.integers(lo, hi)
    elif t == "bool":
        s = st.booleans()
    elif t == "float64":
        s = st.floats(allow_nan=False)
    elif t == "string":
        s = st.text(max_size=8)
    elif t in ("bytes", "records"):
        s = st.binary(max_size=16)
    elif t == "uuid":
        s = st.uuids()
    else:
        raise ValueError(t)
    return st.one_of(st.none(), s) if nullable else s


def _field(msg, f, v: int, flex: bool):
    nullable = gen_protocol.within(v, f.nullable)
    if f.struct is not None:
        elem = struct_strategy(msg, f.struct, v, flex)
        if nullable and not f.is_array:
            elem = st.one_of(st.none(), elem)
    else:
        elem = _scalar(f.elem, nullable and not f.is_array)
    if f.is_array:
        lst = st.lists(elem, max_size=3)
        return st.one_of(st.none(), lst) if nullable else lst
    return elem


def struct_strategy(msg, struct, v: int, flex: bool):
    cls_name = struct.name if struct.name == msg.name else f"{msg.name}.{struct.name}"
    root = MESSAGES[msg.name]
    cls = root if struct.name == msg.name else getattr(root, struct.name)
    known_tags = {f.tag for f in struct.fields if f.tag is not None}
    parts: Dict[str, Any] = {}
    for f in struct.fields:
        if not gen_protocol.within(v, f.versions):
            continue
        s = _field(msg, f, v, flex)
        parts[f.attr] = s
    if flex:
        parts["unknown_tags"] = st.one_of(st.none(), st.dictionaries(
            st.integers(0, 300).filter(lambda t: t not in known_tags), st.binary(max_size=6), min_size=1, max_size=2))

    def build(values):
        obj = cls()
        for k, val in values.items():
            setattr(obj, k, val)
        return obj

    return st.fixed_dictionaries(parts).map(build)


def message_strategy(name: str, version: int):
    msg = model(name)
    return struct_strategy(msg, msg.root, version, gen_protocol.within(version, msg.flexible))
