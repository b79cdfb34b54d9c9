"""Seeded Avro schemas and data for the decoder's tests, its fuzz corpus and
its benchmark: every type and logical type, nested; values random but fixed
by the seed. And :func:`expected`: what kwire's Arrow column must hold for a
value, computed from fastavro's reading of the same bytes (or, for logical
types fastavro does not read, from the raw value), in ``to_pylist`` form."""

from __future__ import annotations

import datetime
import decimal
import io
import random
import string
import uuid
from typing import Any, Dict, List, Optional

import fastavro

UTC = datetime.timezone.utc
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=UTC)

# (schema, fastavro reads it as its logical value)
LOGICAL = [
    ({"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 4}, True),
    ({"type": "int", "logicalType": "date"}, True),
    ({"type": "int", "logicalType": "time-millis"}, True),
    ({"type": "long", "logicalType": "time-micros"}, True),
    ({"type": "long", "logicalType": "timestamp-millis"}, True),
    ({"type": "long", "logicalType": "timestamp-micros"}, True),
    ({"type": "long", "logicalType": "timestamp-nanos"}, False),
    ({"type": "long", "logicalType": "local-timestamp-millis"}, True),
    ({"type": "long", "logicalType": "local-timestamp-micros"}, True),
    ({"type": "long", "logicalType": "local-timestamp-nanos"}, False),
    ({"type": "string", "logicalType": "uuid"}, True),
]
KNOWN_LOGICAL = {s["logicalType"] for s, _ in LOGICAL} | {"duration"}
PRIMS = ["null", "boolean", "int", "long", "float", "double", "bytes", "string"]


class SchemaGen:
    """Random schemas: records of every type, nested up to ``depth``."""

    def __init__(self, seed: int, depth: int = 3) -> None:
        self.rng = random.Random(seed)
        self.depth = depth
        self.n = 0

    def _name(self, kind: str) -> str:
        self.n += 1
        return f"{kind}{self.n}"

    def record(self, depth: int = 0, fields: int = 0) -> Dict[str, Any]:
        count = fields or self.rng.randint(1, 6)
        return {"type": "record", "name": self._name("R"),
                "fields": [{"name": f"f{i}", "type": self.any(depth + 1)} for i in range(count)]}

    def any(self, depth: int) -> Any:
        r = self.rng.random()
        if depth >= self.depth or r < 0.35:
            return self.leaf()
        if r < 0.5:
            return self.record(depth)
        if r < 0.6:
            return {"type": "array", "items": self.any(depth + 1)}
        if r < 0.7:
            return {"type": "map", "values": self.any(depth + 1)}
        if r < 0.85:
            inner = self.any(depth + 1)
            while isinstance(inner, list):        # a union may not hold a union
                inner = self.any(depth + 1)
            return ["null", inner] if self.rng.random() < 0.7 else [inner, "null"]
        return self.union(depth)

    def union(self, depth: int) -> List[Any]:
        # branches fastavro's reading tells apart: a number, a string, a record (named), null
        branches: List[Any] = [self.rng.choice(["int", "long", "double"]), "string"]
        if depth < self.depth:
            branches.append(self.record(depth + 1))
        if self.rng.random() < 0.5:
            branches.insert(self.rng.randrange(len(branches) + 1), "null")
        return branches

    def leaf(self) -> Any:
        r = self.rng.random()
        if r < 0.45:
            return self.rng.choice(PRIMS[1:])
        if r < 0.7:
            return dict(self.rng.choice(LOGICAL)[0])
        if r < 0.8:
            return {"type": "enum", "name": self._name("E"),
                    "symbols": [f"S{i}" for i in range(self.rng.randint(1, 5))]}
        if r < 0.9:
            return {"type": "fixed", "name": self._name("F"), "size": self.rng.randint(0, 9)}
        return dict(self.rng.choice([
            {"type": "fixed", "size": 16, "logicalType": "uuid"},
            {"type": "fixed", "size": 12, "logicalType": "duration"},
            {"type": "fixed", "size": 9, "logicalType": "decimal", "precision": 21, "scale": 3},
            {"type": "bytes", "logicalType": "decimal", "precision": 50, "scale": 10},
        ]), name=self._name("L"))


class DataGen:
    """Random values of a (fastavro-parsed) schema, in the form fastavro writes."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def value(self, s: Any) -> Any:
        if isinstance(s, list):
            return self.value(self.rng.choice(s))
        if isinstance(s, str):
            return self._prim(s)
        t, lt = s["type"], s.get("logicalType")
        if lt in KNOWN_LOGICAL:
            return self._logical(s, t, lt)
        if t == "record":
            return {f["name"]: self.value(f["type"]) for f in s["fields"]}
        if t == "array":
            return [self.value(s["items"]) for _ in range(self.rng.randint(0, 4))]
        if t == "map":
            return {self._text(): self.value(s["values"]) for _ in range(self.rng.randint(0, 3))}
        if t == "enum":
            return self.rng.choice(s["symbols"])
        if t == "fixed":
            return self.rng.randbytes(s["size"])
        return self._prim(t)

    def _text(self) -> str:
        alphabet = string.ascii_letters + "éü€😀 \n"
        return "".join(self.rng.choice(alphabet) for _ in range(self.rng.randint(0, 12)))

    def _prim(self, t: str) -> Any:
        rng = self.rng
        return {
            "null": lambda: None,
            "boolean": lambda: rng.random() < 0.5,
            "int": lambda: rng.choice([0, -1, 1, 2**31 - 1, -(2**31), rng.randint(-(2**31), 2**31 - 1)]),
            "long": lambda: rng.choice([0, -1, 2**63 - 1, -(2**63), rng.randint(-(2**63), 2**63 - 1)]),
            "float": lambda: float(rng.choice([0.0, -1.5, 3.25, 1e30])),
            "double": lambda: rng.choice([0.0, -1.5, 1e300, rng.random()]),
            "bytes": lambda: rng.randbytes(rng.randint(0, 10)),
            "string": self._text,
        }[t]()

    def _logical(self, s: Dict[str, Any], t: str, lt: str) -> Any:
        rng = self.rng
        if lt == "decimal" and s.get("precision", 0) <= 0:
            return rng.randbytes(rng.randint(0, 5))          # not a valid decimal: its bytes
        if lt == "decimal":
            digits = rng.randint(0, s["precision"])
            unscaled = rng.randint(-(10**digits) + 1, 10**digits - 1)
            return decimal.Decimal(unscaled).scaleb(-s.get("scale", 0))
        if lt == "uuid":
            u = uuid.UUID(int=rng.getrandbits(128))
            return u if t == "string" else u.bytes
        if lt == "duration":
            return b"".join(rng.randint(0, 2**31 - 1).to_bytes(4, "little") for _ in range(3))
        if lt == "date":
            return datetime.date(1970, 1, 1) + datetime.timedelta(days=rng.randint(-700000, 2900000))
        if lt == "time-millis":
            return (datetime.datetime(2000, 1, 1) + datetime.timedelta(milliseconds=rng.randint(0, 86399999))).time()
        if lt == "time-micros":
            return (datetime.datetime(2000, 1, 1) + datetime.timedelta(microseconds=rng.randint(0, 86399999999))).time()
        if lt.endswith("nanos"):
            return rng.randint(-(2**62), 2**62)
        micros = rng.randint(-(10**15), 10**16)
        if lt.endswith("millis"):
            micros -= micros % 1000
        ts = EPOCH + datetime.timedelta(microseconds=micros)
        return ts if lt.startswith("timestamp") else ts.replace(tzinfo=None)


def encode(parsed: Any, value: Any) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed, value)
    return out.getvalue()


def read(parsed: Any, data: bytes, reader: Any = None) -> Any:
    return fastavro.schemaless_reader(io.BytesIO(data), parsed, reader, return_record_name=True)


def expected(s: Any, v: Any, names: Optional[Dict[str, Any]] = None) -> Any:
    """fastavro's reading ``v`` (``return_record_name=True``) of schema ``s``
    (its JSON form, names resolved through ``names``) as kwire's column's
    ``to_pylist()`` holds it."""
    names = {} if names is None else names
    if isinstance(s, str) and s in names:
        s = names[s]
    if isinstance(s, list):
        return _union(s, v, names)
    if isinstance(s, str):
        return v
    t, lt = s["type"], s.get("logicalType")
    if isinstance(t, (dict, list)) or (isinstance(t, str) and t in names):
        return expected(t, v, names)
    if "name" in s:
        names[s["name"]] = s
    if lt == "duration" and t == "fixed":
        m, d, ms = (int.from_bytes(v[i:i + 4], "little") for i in (0, 4, 8))
        return (m, d, ms * 1_000_000)
    if lt == "uuid" and t == "fixed":
        return uuid.UUID(bytes=v)
    if lt in ("timestamp-nanos", "local-timestamp-nanos"):
        import pandas as pd
        return pd.Timestamp(v, unit="ns", tz="UTC" if lt.startswith("timestamp") else None)
    if t == "record":
        return {f["name"]: expected(f["type"], v[f["name"]], names) for f in s["fields"]}
    if t == "array":
        return [expected(s["items"], x, names) for x in v]
    if t == "map":
        return [(k, expected(s["values"], x, names)) for k, x in v.items()]
    return v


def _branch_of(b: Any, v: Any, names: Dict[str, Any]) -> bool:
    if isinstance(b, dict) and b.get("type") == "record" or (isinstance(b, str) and b in names):
        return isinstance(v, tuple)
    kind = b if isinstance(b, str) else b.get("type")
    return {"null": v is None, "string": isinstance(v, str), "double": isinstance(v, float),
            "int": isinstance(v, int) and not isinstance(v, bool), "long": isinstance(v, int) and not isinstance(v, bool),
            }.get(kind, not isinstance(v, tuple) and v is not None)


def _union(s: List[Any], v: Any, names: Dict[str, Any]) -> Any:
    others = [b for b in s if b != "null"]
    if v is None:
        return None
    if len(others) == 1:
        return expected(others[0], v[1] if isinstance(v, tuple) else v, names)
    if isinstance(v, tuple):
        v = v[1]
        which = next(i for i, b in enumerate(others) if isinstance(b, dict) and b.get("type") == "record"
                     or (isinstance(b, str) and b in names))
    else:
        which = next(i for i, b in enumerate(others) if _branch_of(b, v, names))
    value = expected(others[which], v, names)
    if len(others) == 1:
        return value
    return {f"member{i}": (value if i == which else None) for i in range(len(others))}
