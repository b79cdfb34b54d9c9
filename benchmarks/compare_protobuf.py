"""Protobuf values into Arrow: kwire's compiled decoder
(``ProtobufFormat.decode``) against the ``protobuf`` package (upb:
``FromString`` per value, then its fields read into dicts) +
``pyarrow.Table.from_pylist``, on the same values, one thread: rows/s and
the ratio, per shape.

Shapes (messages made by the protobuf package from seeded random data):

- ``flat4``: a small flat message (int64, int32, double, a string of ~10 bytes);
- ``event12``: 12 fields: three strings, two int64s, an int32, a double, an
  enum, a bool, a nested message (string, sint32), a repeated string and a
  ``google.protobuf.Timestamp`` (about 110 bytes a value);
- ``wide40``: 40 fields: int64s, doubles, strings and proto3 optional strings.

The peer's dicts are made field by field from the descriptor (a Timestamp
as a datetime, an enum as its name): what a Python consumer writes, and
faster than ``json_format.MessageToDict``. Values are decoded in columns of
``--batch-rows``; the rounds take turns (``--repeat``), each way's best round
counts. The peer decodes ``--peer-records`` rows (its rate is per row, so the
ratio stands).

    python -m benchmarks.compare_protobuf [--records 400000] [--batch-rows 10000] [--repeat 3]
                                          [--peer-records 40000] [--shape event12 ...] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from typing import Any, Callable, Dict, List, Optional

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pyarrow as pa  # noqa: E402
from google.protobuf.descriptor import FieldDescriptor  # noqa: E402
from google.protobuf.message_factory import GetMessageClass  # noqa: E402

from kwire.formats.protobuf import ProtobufFormat, parse_schema  # noqa: E402

SCHEMAS = {
    "flat4": 'syntax = "proto3"; message Flat { int64 id = 1; int32 count = 2; double price = 3; string name = 4; }',
    "event12": """syntax = "proto3"; import "google/protobuf/timestamp.proto";
        enum Kind { KIND_UNSPECIFIED = 0; CLICK = 1; VIEW = 2; BUY = 3; }
        message Event {
          message Where { string city = 1; sint32 zone = 2; }
          string user = 1; string session = 2; string page = 3; int64 id = 4; int64 seq = 5; int32 status = 6;
          double amount = 7; Kind kind = 8; bool ok = 9; Where where = 10; repeated string tags = 11;
          google.protobuf.Timestamp at = 12;
        }""",
    "wide40": 'syntax = "proto3"; message Wide { ' + " ".join(
        f"{('int64', 'double', 'string', 'optional string')[i % 4]} f{i} = {i + 1};" for i in range(40)) + " }",
}
SHAPES = tuple(SCHEMAS)


def message_class(shape: str) -> type:
    return GetMessageClass(parse_schema(SCHEMAS[shape]).message([0]))


def _word(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(n))


def make_values(shape: str, n: int, seed: int = 31) -> List[bytes]:
    cls = message_class(shape)
    rng = random.Random(seed)
    out = []
    for i in range(n):
        if shape == "flat4":
            m = cls(id=rng.randrange(1 << 40), count=rng.randrange(1000), price=rng.random() * 100,
                    name=_word(rng, 10))
        elif shape == "event12":
            m = cls(user=_word(rng, 12), session=_word(rng, 16), page="/p/" + _word(rng, 8), id=i,
                    seq=rng.randrange(1 << 50), status=rng.choice((200, 404, 500)), amount=rng.random() * 1e4,
                    kind=rng.randrange(4), ok=rng.random() < 0.9, tags=[_word(rng, 5) for _ in range(rng.randrange(4))])
            m.where.city = _word(rng, 7)
            m.where.zone = rng.randrange(-50, 50)
            m.at.seconds = 1_700_000_000 + i
            m.at.nanos = rng.randrange(1_000_000) * 1000
        else:
            m = cls()
            for j in range(40):
                kind = j % 4
                if kind == 0:
                    setattr(m, f"f{j}", rng.randrange(1 << 40))
                elif kind == 1:
                    setattr(m, f"f{j}", rng.random())
                elif kind == 2 or rng.random() < 0.7:
                    setattr(m, f"f{j}", _word(rng, 8))
        out.append(m.SerializeToString())
    return out


def _reader(desc: Any) -> Callable[[Any], Dict[str, Any]]:
    """A message's fields as a dict, by its descriptor (the peer's decoding)."""
    F = FieldDescriptor
    fields = []
    for fd in desc.fields:
        if fd.message_type is not None and fd.message_type.full_name == "google.protobuf.Timestamp":
            fields.append((fd.name, lambda v: v.ToDatetime()))
        elif fd.message_type is not None:
            sub = _reader(fd.message_type)
            fields.append((fd.name, lambda v, sub=sub: [sub(x) for x in v] if fd.is_repeated else sub(v)))
        elif fd.type == F.TYPE_ENUM:
            names = {v.number: v.name for v in fd.enum_type.values}
            fields.append((fd.name, lambda v, names=names: names.get(v)))
        elif fd.is_repeated:
            fields.append((fd.name, list))
        else:
            fields.append((fd.name, None))
    presence = {fd.name for fd in desc.fields if fd.has_presence and not fd.is_repeated}

    def read(m: Any) -> Dict[str, Any]:
        out = {}
        for name, conv in fields:
            if name in presence and not m.HasField(name):
                out[name] = None
                continue
            v = getattr(m, name)
            out[name] = conv(v) if conv is not None else v
        return out

    return read


def run_kwire(fmt: ProtobufFormat, columns: List[pa.Array], offsets: List[pa.Array]) -> int:
    """Each column decoded as poll_columnar's batches come: their offsets beside them."""
    rows = 0
    for col, offs in zip(columns, offsets):
        rows += len(fmt.decode(col, topic="bench", partition=0, offsets=offs))
    return rows


def run_protobuf(cls: type, values: List[bytes], batch_rows: int) -> int:
    read = _reader(cls.DESCRIPTOR)
    parse = cls.FromString
    rows = 0
    for start in range(0, len(values), batch_rows):
        rows += pa.Table.from_pylist([read(parse(v)) for v in values[start:start + batch_rows]]).num_rows
    return rows


def _timed(fn: Callable[[], int]) -> float:
    t = time.perf_counter()
    rows = fn()
    return rows / (time.perf_counter() - t)


def bench(shape: str, records: int, batch_rows: int, peer_records: int, repeat: int) -> Dict[str, Any]:
    values = make_values(shape, records)
    columns = [pa.array(values[i:i + batch_rows], pa.binary()) for i in range(0, len(values), batch_rows)]
    offsets = [pa.array(range(i, i + len(c)), pa.int64()) for i, c in zip(range(0, len(values), batch_rows), columns)]
    cls = message_class(shape)
    fmt = ProtobufFormat(cls)
    peer_values = values[:peer_records]
    run_kwire(fmt, columns[:1], offsets)          # the plan compiled, memory warm
    best = {"kwire": 0.0, "protobuf+from_pylist": 0.0}
    for _ in range(repeat):
        best["kwire"] = max(best["kwire"], _timed(lambda: run_kwire(fmt, columns, offsets)))
        best["protobuf+from_pylist"] = max(best["protobuf+from_pylist"],
                                           _timed(lambda: run_protobuf(cls, peer_values, batch_rows)))
    return {"shape": shape, "bytes_per_value": sum(map(len, values)) / len(values), **best,
            "ratio": best["kwire"] / best["protobuf+from_pylist"]}


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=400_000)
    ap.add_argument("--batch-rows", type=int, default=10_000)
    ap.add_argument("--peer-records", type=int, default=40_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--shape", action="append", choices=SHAPES)
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args(argv)
    from google.protobuf.internal import api_implementation

    print(f"protobuf {api_implementation.Type()} backend; {args.records:,} values, peer {args.peer_records:,}")
    print(f"{'shape':<10} {'B/value':>8} {'kwire rows/s':>14} {'protobuf+from_pylist':>22} {'ratio':>8}")
    results = []
    for shape in args.shape or list(SHAPES):
        r = bench(shape, args.records, args.batch_rows, min(args.peer_records, args.records), args.repeat)
        results.append(r)
        print(f"{shape:<10} {r['bytes_per_value']:>8.0f} {r['kwire']:>14,.0f} {r['protobuf+from_pylist']:>22,.0f} "
              f"{r['ratio']:>7.1f}x", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
