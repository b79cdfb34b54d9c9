#!/usr/bin/env python3
"""Generate kwire's Kafka message classes from Apache Kafka's JSON definitions.

Reads ``scripts/kafka-protocol/message/*.json`` (a vendored copy of Kafka
4.3's definitions, see FORMAT.md there; the definitions 4.3's copy lacks, as
listed in ``scripts/kafka-protocol/FROM_KAFKA_CLIENTS``, come from the
``common/message/`` resources of ``org.apache.kafka:kafka-clients`` on
Maven Central, at the version named there) and writes

* ``src/kwire/protocol/messages.py``: one class per message of the APIs kwire
  speaks, with nested classes for its structs, and per version flat
  encode/decode functions (fixed-width runs of fields packed with one
  precompiled ``struct.Struct``), named after their message and version
  (``_decode_FetchResponse_v12``) and deduplicated across versions with the
  same layout (the first version keeps the name);
* ``src/kwire/protocol/api_keys.py``: ``ApiKey`` and ``API_NAMES`` from the
  ``apiKey`` and ``name`` of every request definition (every API, spoken or
  not), and ``ErrorCode`` from kwire's error table,
  ``src/kwire/error_codes.py`` (the one source of the codes: the generator
  reads it, kwire.errors makes the exception classes from it).

    python scripts/gen_protocol.py          # write the modules
    python scripts/gen_protocol.py --check  # exit 1 if a checked-in module is stale
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import sys
from typing import Any, Dict, List, Optional, Set, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFS = os.path.join(ROOT, "scripts", "kafka-protocol", "message")
OUT = os.path.join(ROOT, "src", "kwire", "protocol", "messages.py")
API_KEYS_OUT = os.path.join(ROOT, "src", "kwire", "protocol", "api_keys.py")
ERROR_TABLE = os.path.join(ROOT, "src", "kwire", "error_codes.py")

# The APIs kwire speaks (issue 3), by message name stem; the embedded data
# structs of the consumer group protocol; the headers are written by hand in
# kwire.protocol (their layout is fixed, see FORMAT.md).
APIS = [
    "ApiVersions", "Metadata", "Produce", "Fetch", "ListOffsets", "FindCoordinator", "OffsetCommit",
    "OffsetFetch", "JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup", "ListGroups", "DescribeGroups",
    "DeleteGroups", "CreateTopics", "DeleteTopics", "CreatePartitions", "DeleteRecords", "DescribeConfigs",
    "InitProducerId", "AddPartitionsToTxn", "AddOffsetsToTxn", "EndTxn", "TxnOffsetCommit", "SaslHandshake",
    "SaslAuthenticate", "DescribeCluster", "OffsetForLeaderEpoch",
    # KIP-848's consumer group protocol (issue 16)
    "ConsumerGroupHeartbeat", "ConsumerGroupDescribe",
    # ACLs and client quotas (issue 16)
    "CreateAcls", "DescribeAcls", "DeleteAcls", "AlterClientQuotas", "DescribeClientQuotas",
    # leader elections (issue 17: unclean election on the cluster; preferred-leader rebalancing)
    "ElectLeaders",
    # moving replicas and retiring a broker (issue 17: brokers leaving the cluster)
    "AlterPartitionReassignments", "UnregisterBroker",
    # the moves in progress (kwire reassign-partitions --list, --verify)
    "ListPartitionReassignments",
    # delegation tokens (issue 30; their definitions from the kafka-clients jar)
    "CreateDelegationToken", "RenewDelegationToken", "ExpireDelegationToken", "DescribeDelegationToken",
    # the rest of Kafka's admin calls (issue 33): configs, group offsets, log dirs, SCRAM credentials,
    # producers and transactions (KIP-664), the KRaft quorum and features
    "IncrementalAlterConfigs", "AlterConfigs", "OffsetDelete", "DescribeLogDirs", "AlterReplicaLogDirs",
    "DescribeUserScramCredentials", "AlterUserScramCredentials", "DescribeProducers", "ListTransactions",
    "DescribeTransactions", "WriteTxnMarkers", "DescribeQuorum", "UpdateFeatures",
    # KIP-714's client telemetry (issue 35; their definitions from the kafka-clients jar)
    "GetTelemetrySubscriptions", "PushTelemetry",
    # KIP-932's share groups (issue 36; their definitions from the kafka-clients jar)
    "ShareGroupHeartbeat", "ShareGroupDescribe", "ShareFetch", "ShareAcknowledge", "DescribeShareGroupOffsets",
    "AlterShareGroupOffsets", "DeleteShareGroupOffsets",
]
DATA = ["ConsumerProtocolSubscription", "ConsumerProtocolAssignment"]

FIXED = {"bool": ("?", 1), "int8": ("b", 1), "int16": ("h", 2), "uint16": ("H", 2), "int32": ("i", 4),
         "uint32": ("I", 4), "int64": ("q", 8), "float64": ("d", 8)}


# ------------------------------------------------------------------ loading
def strip_comments(text: str) -> str:
    """Remove // comments outside of strings."""
    out, i, n, in_str = [], 0, len(text), False
    while i < n:
        c = text[i]
        if in_str:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if c == '"':
                in_str = False
        elif c == '"':
            in_str = True
            out.append(c)
        elif c == "/" and text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


def load(name: str) -> Dict[str, Any]:
    with open(os.path.join(DEFS, name + ".json"), encoding="utf-8") as f:
        return json.loads(strip_comments(f.read()))


def versions(spec: Optional[str], hi: int = 10**6) -> Tuple[int, int]:
    """(lo, hi) of a version spec; (1, 0) (empty) for none/absent."""
    if spec is None or spec == "none":
        return (1, 0)
    if spec.endswith("+"):
        return (int(spec[:-1]), hi)
    if "-" in spec:
        a, b = spec.split("-")
        return (int(a), int(b))
    return (int(spec), int(spec))


def within(v: int, r: Tuple[int, int]) -> bool:
    return r[0] <= v <= r[1]


def snake(name: str) -> str:
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", s)
    return s.lower()


# ------------------------------------------------------------------- model
class Field:
    def __init__(self, d: Dict[str, Any], structs: Dict[str, "Struct"], owner: str) -> None:
        self.name = d["name"]
        self.attr = snake(self.name)
        self.type = d["type"]
        self.versions = versions(d.get("versions"))
        self.nullable = versions(d.get("nullableVersions"))
        self.tagged = versions(d.get("taggedVersions"))
        self.tag = d.get("tag")
        self.ignorable = bool(d.get("ignorable", False))
        self.default_raw = d.get("default")
        self.is_array = self.type.startswith("[]")
        self.elem = self.type[2:] if self.is_array else self.type
        self.struct: Optional[Struct] = None
        if self.elem not in FIXED and self.elem not in ("string", "bytes", "records", "uuid"):
            if "fields" in d:
                self.struct = Struct(self.elem, d["fields"], structs, d.get("versions"))
                structs[self.elem] = self.struct
            else:
                self.struct = structs.get(self.elem)   # a commonStruct, resolved later if needed
                self.struct_name = self.elem

    def default_expr(self) -> str:
        raw = self.default_raw
        if self.is_array:
            return "None" if raw == "null" else "[]"
        t = self.elem
        if raw == "null":
            return "None"
        if self.struct is not None:
            return f"{self.msg_name}.{self.struct.name}()"
        if t == "bool":
            return "True" if raw in (True, "true") else "False"
        if t in FIXED:
            if raw is None or raw == "":
                return "0.0" if t == "float64" else "0"
            s = str(raw)
            return repr(float(s)) if t == "float64" else str(int(s, 0))
        if t == "string":
            return repr("" if raw is None else str(raw))
        if t == "uuid":
            return "ZERO_UUID"
        if t in ("bytes", "records"):
            return "b''" if raw is None else repr(str(raw).encode())
        raise ValueError(t)

    def mutable_default(self) -> bool:
        return self.default_expr() in ("[]",) or (self.struct is not None and not self.is_array and self.default_raw != "null")


class Struct:
    def __init__(self, name: str, fields: List[Dict[str, Any]], structs: Dict[str, "Struct"], vspec: Optional[str]) -> None:
        self.name = name
        self.versions = versions(vspec or "0+")
        self.fields = [Field(f, structs, name) for f in fields]


def resolve_common(st: Struct, structs: Dict[str, Struct]) -> None:
    for f in st.fields:
        if f.struct is None and f.elem not in FIXED and f.elem not in ("string", "bytes", "records", "uuid"):
            f.struct = structs[f.elem]
        if f.struct is not None:
            resolve_common(f.struct, structs)


class Message:
    def __init__(self, d: Dict[str, Any]) -> None:
        self.name = d["name"]
        self.kind = d["type"]
        self.api_key = d.get("apiKey")
        self.valid = versions(d["validVersions"])
        # Kafka's "latestVersionUnstable": the newest version is still being designed (brokers offer it only
        # with unstable.api.versions.enable); kwire decodes it but does not send it (MAX_STABLE_VERSION)
        self.max_stable = self.valid[1] - 1 if d.get("latestVersionUnstable") else self.valid[1]
        self.flexible = versions(d.get("flexibleVersions"))
        self.structs: Dict[str, Struct] = {}
        for cs in d.get("commonStructs", []):
            self.structs[cs["name"]] = Struct(cs["name"], cs["fields"], self.structs, cs.get("versions"))
        self.root = Struct(self.name, d["fields"], self.structs, d["validVersions"])
        for s in list(self.structs.values()):
            resolve_common(s, self.structs)
        resolve_common(self.root, self.structs)
        for st in [self.root, *self.structs.values()]:
            for f in st.fields:
                f.msg_name = self.name


# --------------------------------------------------------------- codegen
class Gen:
    def __init__(self) -> None:
        self.structs_fmt: Dict[str, str] = {}     # struct format -> name
        self.lines: List[str] = []
        self.bodies: Dict[str, str] = {}          # function text -> name (dedupe)
        self.names: Set[str] = set()              # the functions' names
        self.funcs: List[str] = []
        self.classes: Dict[str, str] = {}         # qualified class name -> module constant

    def cls_const(self, qual: str) -> str:
        if qual not in self.classes:
            self.classes[qual] = f"_C{len(self.classes)}"
        return self.classes[qual]

    def fmt(self, f: str) -> str:
        if f not in self.structs_fmt:
            self.structs_fmt[f] = f"_S{len(self.structs_fmt)}"
        return self.structs_fmt[f]

    def add_func(self, name: str, params: str, body: List[str]) -> str:
        """The function ``name`` with ``body``; a body made before keeps the
        name it was first given (versions with the same layout share it)."""
        text = "\n".join(body)
        key = params + "\n" + text
        if key in self.bodies:
            return self.bodies[key]
        if name in self.names:
            n = 2
            while f"{name}_{n}" in self.names:
                n += 1
            name = f"{name}_{n}"
        self.names.add(name)
        self.bodies[key] = name
        self.funcs.append(f"def {name}({params}):\n" + ("\n".join(body) if body else "    pass"))
        return name

    # ---- decode
    def dec_struct(self, msg: Message, st: Struct, cls: str, v: int) -> str:
        """Name of a function ``(buf, pos, end) -> (obj, pos)`` for ``st`` at ``v``."""
        flex = within(v, msg.flexible)
        c = self.cls_const(cls)
        body = [f"    o = {c}.__new__({c})"]
        fixed: List[Tuple[str, str]] = []      # (attr, fmt char) pending
        assigned = set()

        def flush() -> None:
            if not fixed:
                return
            fmt = ">" + "".join(c for _, c in fixed)
            size = sum(FIXED_SIZES[c] for _, c in fixed)
            s = self.fmt(fmt)
            targets = ", ".join(f"o.{a}" for a, _ in fixed)
            if len(fixed) == 1:
                targets += ","
            body.append(f"    if pos + {size} > end: _short()")
            body.append(f"    {targets} = {s}.unpack_from(buf, pos)")
            body.append(f"    pos += {size}")
            fixed.clear()

        tagged = []
        for f in st.fields:
            if not within(v, f.versions):
                continue
            if flex and within(v, f.tagged):
                tagged.append(f)
                continue
            if not f.is_array and f.elem in FIXED:
                fixed.append((f.attr, FIXED[f.elem][0]))
                assigned.add(f.attr)
                continue
            flush()
            assigned.add(f.attr)
            if f.is_array:
                nullable = within(v, f.nullable)
                inner = self.dec_elem(msg, f, v, flex)
                if flex:
                    body.append("    if pos >= end: _short()")
                    body.append("    n = buf[pos] - 1")
                    body.append("    if n < 0x7f: pos += 1")
                    body.append("    else: n, pos = _len_c(buf, pos, end)")
                else:
                    body.append("    if pos + 4 > end: _short()")
                    body.append("    n = _i32.unpack_from(buf, pos)[0]")
                    body.append("    pos += 4")
                body.append("    if n > 0:")
                body.append(f"        o.{f.attr}, pos = _array_n(buf, pos, end, {inner}, n, {self.min_size(f, v, flex)})")
                body.append("    elif n == 0:")
                body.append(f"        o.{f.attr} = []")
                body.append("    else:")
                body.append(f"        o.{f.attr} = _null(n, {nullable})")
                continue
            if flex and not f.is_array and f.elem in ("bytes", "records"):
                # inlined: a compact length of one byte, then a view
                nullable = within(v, f.nullable)
                body.append("    if pos >= end: _short()")
                body.append("    n = buf[pos] - 1")
                body.append("    if n < 0x7f: pos += 1")
                body.append("    else: n, pos = _len_c(buf, pos, end)")
                body.append(f"    o.{f.attr}, pos = _take_bytes(buf, pos, end, n, {nullable})")
                continue
            body.append(f"    o.{f.attr}, pos = {self.dec_value(msg, f, v, flex)}(buf, pos, end)")
        flush()
        # absent and tagged fields take their defaults
        for f in st.fields:
            if f.attr not in assigned:
                body += self.default_lines(f, "o", "    ")
        if flex:
            body.append("    if pos < end and buf[pos] == 0:")
            body.append("        pos += 1")
            body.append("        o.unknown_tags = None")
            body.append("        return o, pos")
            if tagged:
                cases = []
                for f in tagged:
                    cases.append((f.tag, f"{self.dec_value(msg, f, v, flex)}"))
                body.append("    n, pos = _uvarint(buf, pos, end)")
                body.append("    unknown = None")
                body.append("    for _ in range(n):")
                body.append("        tag, pos = _uvarint(buf, pos, end)")
                body.append("        size, pos = _uvarint(buf, pos, end)")
                body.append("        stop = pos + size")
                body.append("        if stop > end: _short()")
                first = True
                for tag, fn in cases:
                    attr = next(f.attr for f in tagged if f.tag == tag)
                    body.append(f"        {'if' if first else 'elif'} tag == {tag}:")
                    body.append(f"            o.{attr}, p2 = {fn}(buf, pos, stop)")
                    body.append("            if p2 != stop: _bad('tagged field size mismatch')")
                    first = False
                body.append("        else:" if cases else "        if True:")
                body.append("            if unknown is None: unknown = {}")
                body.append("            unknown[tag] = bytes(buf[pos:stop])")
                body.append("        pos = stop")
                body.append("    o.unknown_tags = unknown")
            else:
                body.append("    o.unknown_tags, pos = _tags(buf, pos, end)")
        else:
            body.append("    o.unknown_tags = None")
        body.append("    return o, pos")
        return self.add_func(f"_decode_{cls.replace('.', '_')}_v{v}", "buf, pos, end", body)

    def default_lines(self, f: Field, target: str, indent: str, depth: int = 0) -> List[str]:
        """Statements setting ``target.attr`` to ``f``'s default; a struct
        default is built in place (no constructor call)."""
        if f.struct is not None and not f.is_array and f.default_raw != "null":
            c = self.cls_const(f"{f.msg_name}.{f.struct.name}")
            d = f"d{depth}"
            lines = [f"{indent}{d} = {c}.__new__({c})"]
            for g in f.struct.fields:
                lines += self.default_lines(g, d, indent, depth + 1)
            lines.append(f"{indent}{d}.unknown_tags = None")
            lines.append(f"{indent}{target}.{f.attr} = {d}")
            return lines
        return [f"{indent}{target}.{f.attr} = {f.default_expr()}"]

    def dec_value(self, msg: Message, f: Field, v: int, flex: bool) -> str:
        nullable = within(v, f.nullable)
        if f.is_array:
            inner = self.dec_elem(msg, f, v, flex)
            return self.add_func(self.array_name("_decode", f, inner, flex, nullable), "buf, pos, end", [
                f"    return _array(buf, pos, end, {inner}, {flex}, {nullable}, {self.min_size(f, v, flex)})"])
        if f.struct is not None and nullable:
            # a nullable struct: an int8 marker first, -1 for null (Kafka's readByte() < 0), 1 when present
            inner = self.dec_elem(msg, f, v, flex)
            return self.add_func(f"{inner}_nullable", "buf, pos, end", [
                "    if pos >= end: _short()",
                "    if buf[pos] >= 0x80: return None, pos + 1",
                f"    return {inner}(buf, pos + 1, end)"])
        return self.dec_elem(msg, f, v, flex, nullable)

    @staticmethod
    def array_name(kind: str, f: Field, inner: str, flex: bool, nullable: bool) -> str:
        """An array function's name: after its struct's function
        (``_decode_FetchResponse_FetchableTopicResponse_v12_array``), or
        after its element type (``_encode_int32_array_compact``)."""
        name = f"{inner}_array" if f.struct is not None else f"{kind}_{f.elem}_array{'_compact' if flex else ''}"
        return name + ("_nullable" if nullable else "")

    def dec_elem(self, msg: Message, f: Field, v: int, flex: bool, nullable: bool = False) -> str:
        t = f.elem
        if f.struct is not None:
            return self.dec_struct(msg, f.struct, f"{msg.name}.{f.struct.name}" if f.struct.name != msg.name else msg.name, v)
        if t in FIXED:
            return f"_fx_{t}"
        if t == "string":
            return f"_str_{'c' if flex else 'k'}{'n' if nullable else ''}"
        if t in ("bytes", "records"):
            return f"_bytes_{'c' if flex else 'k'}{'n' if nullable else ''}"
        if t == "uuid":
            return "_uuid"
        raise ValueError(t)

    def min_size(self, f: Field, v: int, flex: bool) -> int:
        t = f.elem
        if f.struct is not None:
            total = 1 if flex else 0
            for g in f.struct.fields:
                if within(v, g.versions) and not (flex and within(v, g.tagged)):
                    total += self.min_size(g, v, flex) if not g.is_array else (1 if flex else 4)
            return max(total, 1)
        if t in FIXED:
            return FIXED[t][1]
        if t == "uuid":
            return 16
        return 1 if flex else (2 if t == "string" else 4)

    # ---- encode
    def enc_struct(self, msg: Message, st: Struct, v: int) -> str:
        """Name of a function ``(o, out, chunks)`` writing ``st`` at ``v``
        into bytearray ``out`` (records go to ``chunks`` as they are)."""
        flex = within(v, msg.flexible)
        body: List[str] = []
        fixed: List[Tuple[str, str]] = []

        def flush() -> None:
            if not fixed:
                return
            fmt = ">" + "".join(c for _, c in fixed)
            s = self.fmt(fmt)
            body.append(f"    out += {s}.pack({', '.join('o.' + a for a, _ in fixed)})")
            fixed.clear()

        tagged = []
        for f in st.fields:
            if not within(v, f.versions):
                if not f.ignorable:
                    body.append(f"    if o.{f.attr} != {f.default_expr()}: _absent({st.name!r}, {f.attr!r}, {v})")
                continue
            if flex and within(v, f.tagged):
                tagged.append(f)
                continue
            if not f.is_array and f.elem in FIXED:
                fixed.append((f.attr, FIXED[f.elem][0]))
                continue
            flush()
            body.append(f"    {self.enc_value(msg, f, v, flex)}(o.{f.attr}, out, chunks)")
        flush()
        if flex:
            if tagged:
                body.append("    tags = []")
                for f in sorted(tagged, key=lambda f: f.tag):
                    fn = self.enc_value(msg, f, v, flex)
                    body.append(f"    if o.{f.attr} != {f.default_expr()}:")
                    body.append("        b = bytearray()")
                    body.append(f"        {fn}(o.{f.attr}, b, None)")
                    body.append(f"        tags.append(({f.tag}, b))")
                body.append("    _put_tags(out, tags, o.unknown_tags)")
            else:
                body.append("    _put_tags(out, None, o.unknown_tags)")
        cls = msg.name if st.name == msg.name else f"{msg.name}_{st.name}"
        return self.add_func(f"_encode_{cls}_v{v}", "o, out, chunks", body)

    def enc_value(self, msg: Message, f: Field, v: int, flex: bool) -> str:
        nullable = within(v, f.nullable)
        if f.is_array:
            inner = self.enc_elem(msg, f, v, flex)
            return self.add_func(self.array_name("_encode", f, inner, flex, nullable), "x, out, chunks", [
                f"    _put_array(x, out, chunks, {inner}, {flex}, {nullable})"])
        if f.struct is not None and nullable:
            inner = self.enc_elem(msg, f, v, flex)
            return self.add_func(f"{inner}_nullable", "x, out, chunks", [
                "    if x is None:",
                "        out.append(0xff)",
                "        return",
                "    out.append(1)",
                f"    {inner}(x, out, chunks)"])
        return self.enc_elem(msg, f, v, flex, nullable)

    def enc_elem(self, msg: Message, f: Field, v: int, flex: bool, nullable: bool = False) -> str:
        t = f.elem
        if f.struct is not None:
            return self.enc_struct(msg, f.struct, v)
        if t in FIXED:
            return f"_pfx_{t}"
        if t == "string":
            return f"_put_str_{'c' if flex else 'k'}{'n' if nullable else ''}"
        if t == "bytes":
            return f"_put_bytes_{'c' if flex else 'k'}{'n' if nullable else ''}"
        if t == "records":
            return f"_put_records_{'c' if flex else 'k'}"
        if t == "uuid":
            return "_put_uuid"
        raise ValueError(t)


FIXED_SIZES = {c: n for c, n in FIXED.values()}


PY_TYPES = {"bool": "bool", "float64": "float", "string": "str", "bytes": "Buffer", "records": "Records",
            "uuid": "UUID"}


def annotation(msg: Message, f: Field) -> str:
    """The type hint of ``f`` (Optional when some version lets it be null)."""
    if f.struct is not None:
        t = f"{msg.name}.{f.struct.name}" if f.struct.name != msg.name else msg.name
    else:
        t = PY_TYPES.get(f.elem, "int")
    if f.is_array:
        t = f"List[{t}]"
    return f"Optional[{t}]" if f.nullable[0] <= f.nullable[1] or f.default_raw == "null" else t


def class_source(msg: Message, st: Struct, indent: str, nested: List[Struct]) -> List[str]:
    lines = [f"{indent}class {st.name}(_Message):"]
    attrs = [f.attr for f in st.fields]
    lines.append(f"{indent}    __slots__ = {tuple(attrs + ['unknown_tags'])!r}")
    lines.append(f"{indent}    _FIELDS = {tuple(attrs)!r}")
    for f in st.fields:
        lines.append(f"{indent}    {f.attr}: {annotation(msg, f)}")
    lines.append(f"{indent}    unknown_tags: Optional[Dict[int, bytes]]")
    for sub in nested:
        lines += class_source(msg, sub, indent + "    ", [])
    params = []
    assigns = []
    for f in st.fields:
        hint = annotation(msg, f)
        if f.mutable_default():
            params.append(f"{f.attr}: {hint} = _UNSET")
            assigns.append(f"{indent}        self.{f.attr} = {f.default_expr()} if {f.attr} is _UNSET else {f.attr}")
        else:
            params.append(f"{f.attr}: {hint} = {f.default_expr()}")
            assigns.append(f"{indent}        self.{f.attr} = {f.attr}")
    tags = "unknown_tags: Optional[Dict[int, bytes]] = None"
    sig = ", ".join(["self", "*"] + params + [tags]) if params else f"self, *, {tags}"
    lines.append(f"{indent}    def __init__({sig}) -> None:")
    lines += assigns
    lines.append(f"{indent}        self.unknown_tags = unknown_tags")
    return lines


def struct_tree(msg: Message) -> List[Struct]:
    """Every struct used by the message (nested ones), in first-use order."""
    seen: Dict[str, Struct] = {}

    def walk(st: Struct) -> None:
        for f in st.fields:
            if f.struct is not None and f.struct.name not in seen and f.struct.name != msg.name:
                seen[f.struct.name] = f.struct
                walk(f.struct)

    walk(msg.root)
    return list(seen.values())


def generate() -> str:
    gen = Gen()
    messages: List[Message] = []
    for stem in APIS:
        for kind in ("Request", "Response"):
            messages.append(Message(load(stem + kind)))
    for name in DATA:
        messages.append(Message(load(name)))
    class_lines: List[str] = []
    tables: List[str] = []
    for msg in messages:
        nested = struct_tree(msg)
        class_lines += class_source(msg, msg.root, "", nested)
        class_lines.append(f"{msg.name}.API_KEY = {msg.api_key!r}")
        class_lines.append(f"{msg.name}.MIN_VERSION = {msg.valid[0]}")
        class_lines.append(f"{msg.name}.MAX_VERSION = {msg.valid[1]}")
        if msg.max_stable != msg.valid[1]:
            class_lines.append(f"{msg.name}.MAX_STABLE_VERSION = {msg.max_stable}")
        class_lines.append(f"{msg.name}.FLEXIBLE_MIN = {msg.flexible[0] if msg.flexible[0] <= msg.flexible[1] else None!r}")
        class_lines.append("")
        decs, encs = [], []
        for v in range(msg.valid[0], msg.valid[1] + 1):
            decs.append(f"{v}: {gen.dec_struct(msg, msg.root, msg.name, v)}")
            encs.append(f"{v}: {gen.enc_struct(msg, msg.root, v)}")
        tables.append(f"{msg.name}._DECODERS = {{{', '.join(decs)}}}")
        tables.append(f"{msg.name}._ENCODERS = {{{', '.join(encs)}}}")
    head = [
        "# Generated by scripts/gen_protocol.py from Apache Kafka 4.3's message definitions",
        "# (scripts/kafka-protocol/message). Do not edit: run `python scripts/gen_protocol.py`.",
        "# flake8: noqa",
        '"""Kafka request and response messages (generated)."""',
        "",
        "from __future__ import annotations",
        "",
        "from struct import Struct as _Struct",
        "from typing import Any, Dict, List, Optional, Sequence, Union",
        "from uuid import UUID",
        "",
        "Buffer = Union[bytes, bytearray, memoryview]",
        "Records = Union[Buffer, Sequence[Buffer]]",
        "",
    ]
    body_text = "\n".join(class_lines + gen.funcs)
    used = sorted(set(re.findall(r"\b(_(?:fx|str|bytes|put|pfx|uuid|short|bad|absent|uvarint|tags|array|Message|UNSET|len_c|take_bytes|null|i32)\w*|ZERO_UUID)\b", body_text)))
    used = [u for u in used if not re.match(r"_(?:decode|encode)_", u)]
    head.append("from kwire.protocol._wire import (")
    head += [f"    {u}," for u in used]
    head += [")", ""]
    for fmt, name in gen.structs_fmt.items():
        head.append(f"{name} = _Struct({fmt!r})")
    head.append("")
    apis = {}
    for msg in messages:
        if msg.api_key is not None:
            apis.setdefault(msg.api_key, {})[msg.kind] = msg.name
    registry = ["", "APIS = {"]
    for key in sorted(apis):
        registry.append(f"    {key}: ({apis[key]['request']}, {apis[key]['response']}),")
    registry.append("}")
    registry.append("MESSAGES = {c.__name__: c for c in (" + ", ".join(m.name for m in messages) + ")}")
    consts = [f"{name} = {qual}" for qual, name in gen.classes.items()]
    return "\n".join(head + class_lines + [""] + consts + [""] + gen.funcs + [""] + tables + registry) + "\n"


def api_keys() -> List[Tuple[int, str]]:
    """(apiKey, name without ``Request``) of every request definition."""
    out: Dict[int, str] = {}
    for fn in sorted(os.listdir(DEFS)):
        if fn.endswith("Request.json"):
            d = load(fn[:-len(".json")])
            if d.get("type") == "request" and d.get("apiKey") is not None:
                out[d["apiKey"]] = d["name"][:-len("Request")]
    return sorted(out.items())


def error_codes() -> List[Tuple[int, str]]:
    """(code, NAME) of kwire's error table, read from its module (plain data:
    it imports nothing of kwire's, so it loads without the package)."""
    spec = importlib.util.spec_from_file_location("_kwire_error_codes", ERROR_TABLE)
    assert spec is not None and spec.loader is not None
    table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(table)
    return [(row[0], row[1]) for row in table.ERROR_CODES]


def generate_api_keys() -> str:
    keys = api_keys()
    lines = [
        "# Generated by scripts/gen_protocol.py from Apache Kafka 4.3's message definitions",
        "# (scripts/kafka-protocol/message) and kwire's error table (src/kwire/error_codes.py).",
        "# Do not edit: run `python scripts/gen_protocol.py`.",
        '"""' + "Kafka's API keys and error codes by name (generated).",
        "",
        "- :class:`ApiKey`: the ``apiKey`` of every request of Kafka's message",
        "  definitions, named after the API (``ApiKey.FETCH``, ``ApiKey.API_VERSIONS``).",
        "- :data:`API_NAMES`: api key -> Kafka's name of the API (``\"Fetch\"``).",
        "- :class:`ErrorCode`: every code of kwire's error table",
        "  (:data:`kwire.error_codes.ERROR_CODES`, the one source of the codes) by",
        "  Kafka's name (``ErrorCode.NOT_COORDINATOR``).",
        "",
        "The codes of the Kafka 0.7 wire format are another table",
        "(:data:`kwire.error_codes.V07_ERROR_CODES`) and are not here.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from enum import IntEnum",
        "from typing import Dict",
        "",
        '__all__ = ["ApiKey", "API_NAMES", "ErrorCode"]',
        "",
        "",
        "class ApiKey(IntEnum):",
        '    """The api key of each of Kafka\'s APIs."""',
        "",
    ]
    lines += [f"    {snake(name).upper()} = {key}" for key, name in keys]
    lines += ["", "", "#: Every API of the message definitions: apiKey -> name (the JSON ``name``",
              "#: without ``Request``).", "API_NAMES: Dict[int, str] = {"]
    lines += [f"    {key}: {name!r}," for key, name in keys]
    lines += ["}", "", "", "class ErrorCode(IntEnum):", '    """Each error code of Kafka\'s table by its name."""', ""]
    lines += [f"    {name} = {code}" for code, name in error_codes()]
    return "\n".join(lines) + "\n"


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 if a checked-in module differs")
    args = p.parse_args(argv)
    outputs = [(OUT, generate()), (API_KEYS_OUT, generate_api_keys())]
    if args.check:
        stale = 0
        for path, text in outputs:
            try:
                with open(path, encoding="utf-8") as f:
                    current = f.read()
            except FileNotFoundError:
                current = ""
            if current != text:
                print(f"{os.path.relpath(path, ROOT)} is stale: run python scripts/gen_protocol.py", file=sys.stderr)
                stale = 1
        return stale
    for path, text in outputs:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"wrote {os.path.relpath(path, ROOT)} ({text.count(chr(10))} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
