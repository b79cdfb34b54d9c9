"""Schema resolution: a writer schema read as the reader schema, as the Avro
specification's rules say, compiled into the decoding program the compiled
core runs (:class:`kwire._core.avro.Program`).

A program is a list of :class:`Op`, the root first. An op reads one writer
type and says where its value goes (``col``, -1 for nowhere: a writer field
the reader lacks, skipped) and how it is stored (``store``). Reader fields
the writer lacks get their default: the default's Avro bytes (encoded here,
from its JSON) read by the reader's own program for that field. A writer
union branch that matches nothing in the reader is an ``error`` op: reading
it fails, as the specification says, but only a value that takes it.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from typing import Any, List, Optional, Tuple


from kwire.formats.avro.arrow import Slot
from kwire.formats.avro.schema import NO_DEFAULT, AvroSchemaError, Node

__all__ = ["Op", "compile_program", "encode_value"]

# writer int/long/float may be read as a wider reader type; string and bytes as each other
_PROMOTE = {"int": ("long", "float", "double"), "long": ("float", "double"), "float": ("double",),
            "string": ("bytes",), "bytes": ("string",)}
_NUMBER_STORE = {"int": "i32", "long": "i64", "float": "f32", "double": "f64"}
_MIN_SIZE = {"null": 0, "boolean": 1, "int": 1, "long": 1, "float": 4, "double": 8, "bytes": 1, "string": 1,
             "enum": 1, "array": 1, "map": 1, "union": 1}


@dataclass(eq=False)
class Op:
    code: str                     # the writer's type: a primitive's name, fixed, enum, record, array, map,
                                  # union, as_union (a non-union read into a reader union), error
    store: str = "none"           # none, null_row, bool, i32, i64, f32, f64, bin, str, fixed, dec, uuid,
                                  # duration, enum, struct, list, map
    col: int = -1
    size: int = 0                 # fixed: the writer's size
    kids: List[int] = field(default_factory=list)
    enum_map: List[int] = field(default_factory=list)
    member: int = -1              # as_union: the member of the reader's union struct the value goes to
    aux: int = -1                 # map: the column of its entries struct (a valid row an entry)
    defaults: List[Tuple[int, bytes]] = field(default_factory=list)
    min_size: int = 0             # the fewest bytes a value takes (array and map block counts are checked with it)
    precision: int = 0            # dec: the reader's precision (a value with more digits is refused)
    path: str = ""
    message: str = ""             # error ops: why


def compile_program(writer: Node, reader: Slot) -> List[Op]:
    """The program reading ``writer`` into ``reader``'s columns, root first;
    ``AvroSchemaError`` when the writer schema cannot be read as the reader's."""
    if writer.recursive:
        raise AvroSchemaError(f"writer schema {writer!r} is recursive: kwire reads no recursive Avro schema")
    c = _Compiler()
    c.resolve(writer, reader, "")
    return c.ops


def _short(name: Optional[str]) -> str:
    return (name or "").rsplit(".", 1)[-1]


def _names_match(w: Node, r: Node) -> bool:
    return _short(w.name) == _short(r.name) or w.name in r.aliases or _short(w.name) in map(_short, r.aliases)


def matches(w: Node, r: Node) -> bool:
    """Whether writer type ``w`` can be read as reader type ``r`` (not a union) at this level."""
    if w.type == r.type:
        if w.named:
            return _names_match(w, r) and (w.type != "fixed" or w.size == r.size)
        return True
    return r.type in _PROMOTE.get(w.type, ())


def _reader_branch(w: Node, r: Node) -> int:
    """The reader union's branch a writer type is read as: the first exact match, else the first match."""
    for exact in (True, False):
        for i, b in enumerate(r.branches):
            if (w.type == b.type if exact else True) and matches(w, b):
                return i
    return -1


class _Compiler:
    def __init__(self) -> None:
        self.ops: List[Op] = []

    def _new(self, op: Op) -> int:
        self.ops.append(op)
        return len(self.ops) - 1

    def resolve(self, w: Node, r: Optional[Slot], path: str) -> int:
        """One op (and its kids): ``w`` read into ``r`` (None: skipped)."""
        if w.type == "union":
            return self._writer_union(w, r, path)
        if r is not None and r.node.type == "union":
            return self._into_union(w, r, path)
        if r is not None and not matches(w, r.node):
            raise AvroSchemaError(f"{path or 'the value'}: the writer's {w!r} cannot be read as the reader's {r.node!r}")
        at = self._new(Op(w.type, path=path, size=w.size, min_size=_min_size(w)))
        op = self.ops[at]
        if r is not None:
            op.col = r.col
        if w.type == "record":
            self._record(op, w, r, path)
        elif w.type == "array":
            op.kids = [self.resolve(w.items, r.kids[0] if r else None, path + "[]")]
            op.store = "list" if r else "none"
        elif w.type == "map":
            self._map(op, w, r, path)
        elif w.type == "enum":
            self._enum(op, w, r)
        elif r is not None:
            op.store = _store(w, r)
            op.precision = r.node.precision
        return at

    def _record(self, op: Op, w: Node, r: Optional[Slot], path: str) -> None:
        if r is None:
            op.kids = [self.resolve(f.type, None, f"{path}.{f.name}".lstrip(".")) for f in w.fields]
            return
        op.store = "struct"
        by_name = {}
        for i, f in enumerate(r.node.fields):
            for n in [f.name] + f.aliases:
                by_name.setdefault(n, i)
        taken = set()
        for f in w.fields:
            i = by_name.get(f.name)
            if i in taken:
                i = None
            taken.add(i)
            op.kids.append(self.resolve(f.type, r.kids[i] if i is not None else None, f"{path}.{f.name}".lstrip(".")))
        for i, f in enumerate(r.node.fields):
            if i not in taken:
                op.defaults.append(self._default(f, r.kids[i], f"{path}.{f.name}".lstrip(".")))

    def _default(self, f, slot: Slot, path: str) -> Tuple[int, bytes]:
        if f.default is NO_DEFAULT:
            raise AvroSchemaError(f"{path}: the reader's field has no default and the writer's schema lacks it")
        data = encode_default(f.type, f.default, path)
        return self.resolve(f.type, slot, path), data

    def _map(self, op: Op, w: Node, r: Optional[Slot], path: str) -> None:
        entries = r.kids[0] if r else None
        key = self._new(Op("string", store="str" if r else "none", col=entries.kids[0].col if r else -1,
                           min_size=1, path=path + "{key}"))
        op.kids = [key, self.resolve(w.values, entries.kids[1] if r else None, path + "{}")]
        if r is not None:
            op.store = "map"
            op.aux = entries.col

    def _enum(self, op: Op, w: Node, r: Optional[Slot]) -> None:
        if r is None:
            op.enum_map = [0] * len(w.symbols)
            return
        op.store = "enum"
        symbols = r.node.symbols
        fallback = symbols.index(r.node.enum_default) if r.node.enum_default in symbols else -1
        op.enum_map = [symbols.index(s) if s in symbols else fallback for s in w.symbols]

    def _writer_union(self, w: Node, r: Optional[Slot], path: str) -> int:
        at = self._new(Op("union", path=path, min_size=1))
        kids = [self._writer_branch(b, r, f"{path}<{i}>") for i, b in enumerate(w.branches)]
        self.ops[at].kids = kids
        return at

    def _writer_branch(self, b: Node, r: Optional[Slot], path: str) -> int:
        if r is None:
            return self.resolve(b, None, path)
        if r.node.type == "union":
            if _reader_branch(b, r.node) < 0:
                return self._error(b, r, path)
            return self._into_union(b, r, path)
        if b.type == "null" and r.node.type != "null":
            return self._error(b, r, path)
        if not matches(b, r.node):
            return self._error(b, r, path)
        return self.resolve(b, r, path)

    def _error(self, w: Node, r: Slot, path: str) -> int:
        return self._new(Op("error", path=path, message=f"the writer's {w!r} has no match in the reader's {r.node!r}"))

    def _into_union(self, w: Node, r: Slot, path: str) -> int:
        """A writer type (not a union) read into the reader union ``r``."""
        i = _reader_branch(w, r.node)
        if i < 0:
            raise AvroSchemaError(f"{path or 'the value'}: the writer's {w!r} matches no branch of the reader's union")
        target = r.branches[i]
        if target is None:               # null into the union's null
            return self._new(Op("null", store="null_row", col=r.col, path=path))
        kid = self.resolve(w, target, path)
        if not r.members:
            return kid
        member = r.kids.index(target)
        return self._new(Op("as_union", store="struct", col=r.col, kids=[kid], member=member,
                            min_size=self.ops[kid].min_size, path=path))


def _min_size(w: Node) -> int:
    if w.type == "fixed":
        return w.size
    if w.type == "record":
        return sum(_min_size(f.type) for f in w.fields)
    return _MIN_SIZE[w.type]


def _store(w: Node, r: Slot) -> str:
    """How a writer primitive or fixed is stored in the reader's column."""
    rt, lt = r.node.type, r.node.logical
    if rt == "null":
        return "null_row"
    if rt == "boolean":
        return "bool"
    if rt in _NUMBER_STORE:
        return _NUMBER_STORE[rt]
    if lt == "decimal":
        if w.logical == "decimal" and (w.scale != r.node.scale):
            raise AvroSchemaError(f"the writer's decimal scale {w.scale} is not the reader's {r.node.scale}")
        return "dec"
    if lt == "uuid":
        return "uuid" if rt == "string" else "fixed"
    if lt == "duration":
        return "duration"
    if rt == "fixed":
        return "fixed"
    return "str" if rt == "string" else "bin"


# ----------------------------------------------------- default values
def encode_default(node: Node, value: Any, path: str = "") -> bytes:
    """A field default (its JSON form) as Avro binary of ``node``; a union's
    default is of its first branch (or, as Avro 1.12 allows, any branch it
    fits), encoded with that branch's index."""
    try:
        return encode_value(node, value, json_form=True)
    except (TypeError, ValueError, KeyError, OverflowError, struct.error) as e:
        raise AvroSchemaError(f"{path}: default {value!r} does not fit {node!r}: {e}") from None


def encode_value(node: Node, value: Any, *, json_form: bool = False) -> bytes:
    """``value`` as Avro binary of ``node`` (defaults, tests); ``json_form``:
    bytes and fixed given as JSON strings of code points 0-255."""
    out = bytearray()
    _Encoder(json_form).write(out, node, value)
    return bytes(out)


def _zigzag(out: bytearray, n: int) -> None:
    if not -(2**63) <= n < 2**63:
        raise OverflowError(f"{n} does not fit a long")
    u = (n << 1) ^ (n >> 63)
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)


class _Encoder:
    def __init__(self, json_form: bool) -> None:
        self.json_form = json_form

    def _raw(self, v: Any) -> bytes:
        return v.encode("latin-1") if self.json_form and isinstance(v, str) else bytes(v)

    def write(self, out: bytearray, node: Node, v: Any) -> None:
        t = node.type
        if t == "null":
            if v is not None:
                raise ValueError("null expected")
        elif t == "boolean":
            out.append(1 if _bool(v) else 0)
        elif t in ("int", "long"):
            if isinstance(v, bool) or not isinstance(v, int) or (t == "int" and not -(2**31) <= v < 2**31):
                raise ValueError(f"{v!r} is not an Avro {t}")
            _zigzag(out, v)
        elif t in ("float", "double"):
            out += struct.pack("<f" if t == "float" else "<d", _number(v))
        elif t in ("bytes", "string"):
            data = v.encode() if t == "string" else self._raw(v)
            _zigzag(out, len(data))
            out += data
        elif t == "fixed":
            data = self._raw(v)
            if len(data) != node.size:
                raise ValueError(f"{len(data)} bytes for a fixed of {node.size}")
            out += data
        elif t == "enum":
            _zigzag(out, node.symbols.index(v))
        elif t == "record":
            for f in node.fields:
                self.write(out, f.type, v[f.name] if f.name in v or f.default is NO_DEFAULT else f.default)
        elif t in ("array", "map"):
            self._block(out, node, v)
        else:
            self._union(out, node, v)

    def _block(self, out: bytearray, node: Node, v: Any) -> None:
        if v:
            _zigzag(out, len(v))
            for item in (v.items() if node.type == "map" else v):
                if node.type == "map":
                    self.write(out, Node("string"), item[0])
                    self.write(out, node.values, item[1])
                else:
                    self.write(out, node.items, item)
        out.append(0)

    def _union(self, out: bytearray, node: Node, v: Any) -> None:
        errors = []
        for i, b in enumerate(node.branches):
            trial = bytearray()
            try:
                self.write(trial, b, v)
            except (TypeError, ValueError, KeyError, OverflowError, AttributeError, struct.error) as e:
                errors.append(str(e))
                continue
            _zigzag(out, i)
            out += trial
            return
        raise ValueError(f"{v!r} fits no branch of the union ({'; '.join(errors)})")


def _bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise ValueError(f"{v!r} is not a boolean")
    return v


def _number(v: Any) -> float:
    if isinstance(v, str) and v in ("NaN", "Infinity", "-Infinity"):
        return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}[v]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"{v!r} is not a number")
    return float(v)
