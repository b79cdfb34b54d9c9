"""The test schemas of the Protobuf format, their message classes (dynamic,
from the protobuf package's own pool of the same descriptors), random values
of them from a seeded generator, and the oracle: what each value is in
Arrow, read through the protobuf package's API (not kwire's plan)."""

from __future__ import annotations

import datetime
import math
import random
import struct
from typing import Any, Dict, List, Optional

from google.protobuf.descriptor import Descriptor, FieldDescriptor as F
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass

from kwire.formats.protobuf.plan import WRAPPERS
from kwire.formats.protobuf.schema import Schema, parse_schema

COMMON = """
syntax = "proto3";
package kwire.test;

enum Color { COLOR_UNSPECIFIED = 0; RED = 1; GREEN = 2; BLUE = -3; }
message Point { sint32 x = 1; sint32 y = 2; string label = 3; }
"""

SCALARS = """
syntax = "proto3";
package kwire.test;
import "common.proto";

// every scalar type, singular, proto3 optional and repeated (packed by default)
message Scalars {
  double f_double = 1; float f_float = 2; int32 f_int32 = 3; int64 f_int64 = 4; uint32 f_uint32 = 5;
  uint64 f_uint64 = 6; sint32 f_sint32 = 7; sint64 f_sint64 = 8; fixed32 f_fixed32 = 9; fixed64 f_fixed64 = 10;
  sfixed32 f_sfixed32 = 11; sfixed64 f_sfixed64 = 12; bool f_bool = 13; string f_string = 14; bytes f_bytes = 15;
  Color f_enum = 16;
  optional double o_double = 21; optional float o_float = 22; optional int32 o_int32 = 23; optional int64 o_int64 = 24;
  optional uint32 o_uint32 = 25; optional uint64 o_uint64 = 26; optional sint32 o_sint32 = 27;
  optional sint64 o_sint64 = 28; optional fixed32 o_fixed32 = 29; optional fixed64 o_fixed64 = 30;
  optional sfixed32 o_sfixed32 = 31; optional sfixed64 o_sfixed64 = 32; optional bool o_bool = 33;
  optional string o_string = 34; optional bytes o_bytes = 35; optional Color o_enum = 36;
  repeated double r_double = 41; repeated float r_float = 42; repeated int32 r_int32 = 43; repeated int64 r_int64 = 44;
  repeated uint32 r_uint32 = 45; repeated uint64 r_uint64 = 46; repeated sint32 r_sint32 = 47;
  repeated sint64 r_sint64 = 48; repeated fixed32 r_fixed32 = 49; repeated fixed64 r_fixed64 = 50;
  repeated sfixed32 r_sfixed32 = 51; repeated sfixed64 r_sfixed64 = 52; repeated bool r_bool = 53;
  repeated string r_string = 54; repeated bytes r_bytes = 55; repeated Color r_enum = 56;
  repeated int64 u_int64 = 57 [packed = false]; repeated fixed32 u_fixed32 = 58 [packed = false];
  repeated double u_double = 59 [packed = false]; repeated Color u_enum = 60 [packed = false];
}
"""

NESTED = """
syntax = "proto3";
package kwire.test;
import "common.proto";
import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";
import "google/protobuf/wrappers.proto";
import "google/protobuf/empty.proto";

// nesting, repeated messages, maps, oneofs and the well-known types
message Order {
  message Line {
    string sku = 1;
    uint32 quantity = 2;
    Point at = 3;
    repeated string tags = 4;
    map<string, int64> attributes = 5;
  }
  int64 id = 1;
  string customer = 2;
  repeated Line lines = 3;
  Point origin = 4;
  Point destination = 5;
  map<string, Point> places = 6;
  map<int32, string> names = 7;
  map<sint64, Color> colors = 8;
  map<bool, bytes> flags = 9;
  map<uint64, google.protobuf.Int64Value> counts = 10;
  oneof payment {
    string card = 11;
    int64 account = 12;
    Point pickup = 13;
    google.protobuf.Empty cash = 14;
  }
  google.protobuf.Timestamp created = 15;
  google.protobuf.Duration ttl = 16;
  repeated google.protobuf.Timestamp history = 17;
  google.protobuf.DoubleValue w_double = 18;
  google.protobuf.FloatValue w_float = 19;
  google.protobuf.Int64Value w_int64 = 20;
  google.protobuf.UInt64Value w_uint64 = 21;
  google.protobuf.Int32Value w_int32 = 22;
  google.protobuf.UInt32Value w_uint32 = 23;
  google.protobuf.BoolValue w_bool = 24;
  google.protobuf.StringValue w_string = 25;
  google.protobuf.BytesValue w_bytes = 26;
  repeated google.protobuf.StringValue w_strings = 27;
  Color color = 28;
  repeated Color palette = 29;
  oneof route { string via = 30; Line express = 31; }
  optional Point maybe = 32;
}
"""

PROTO2 = """
syntax = "proto2";
package kwire.test2;

// proto2: declared defaults, closed enums, required, unpacked repeated, groups
enum Level { LOW = 1; MID = 5; HIGH = 9; }
message Legacy {
  optional int32 plain = 1;
  optional int32 seven = 2 [default = 7];
  optional string hello = 3 [default = "hello"];
  optional double half = 4 [default = 0.5];
  optional bool yes = 5 [default = true];
  optional Level level = 6 [default = MID];
  optional Level any_level = 7;
  required int64 key = 8;
  repeated int32 numbers = 9;
  repeated int32 packed_numbers = 10 [packed = true];
  repeated Level levels = 11;
  optional group Extra = 12 { optional string note = 13; repeated int32 marks = 14; }
  repeated group Item = 15 { optional int32 weight = 16; }
  optional bytes blob = 17 [default = "\\001\\002"];
  optional float ratio = 18 [default = -1.25];
  optional uint64 big = 19 [default = 18446744073709551615];
  optional sint32 neg = 20 [default = -20];
}
"""

EVOLUTION_V1 = """
syntax = "proto3";
package kwire.evo;
message Event { int64 id = 1; string name = 2; int32 size = 3; repeated string tags = 4; }
"""

EVOLUTION_V2 = """
syntax = "proto3";
package kwire.evo;
// size (3) removed, kind (5) and at (6) added, id widened from int64 to a still-varint uint64
message Event {
  reserved 3;
  uint64 id = 1; string name = 2; repeated string tags = 4; Kind kind = 5; Where at = 6;
  enum Kind { KIND_UNSPECIFIED = 0; CLICK = 1; }
  message Where { string city = 1; }
}
"""

REFERENCES = {"common.proto": COMMON}


def schema(text: str) -> Schema:
    return parse_schema(text, REFERENCES)


def message_class(desc: Descriptor) -> type:
    return GetMessageClass(desc)


# ----------------------------------------------------------- random values
INT_RANGES = {
    F.TYPE_INT32: (-2**31, 2**31 - 1), F.TYPE_SINT32: (-2**31, 2**31 - 1), F.TYPE_SFIXED32: (-2**31, 2**31 - 1),
    F.TYPE_UINT32: (0, 2**32 - 1), F.TYPE_FIXED32: (0, 2**32 - 1),
    F.TYPE_INT64: (-2**63, 2**63 - 1), F.TYPE_SINT64: (-2**63, 2**63 - 1), F.TYPE_SFIXED64: (-2**63, 2**63 - 1),
    F.TYPE_UINT64: (0, 2**64 - 1), F.TYPE_FIXED64: (0, 2**64 - 1),
}


def _int(rng: random.Random, t: int) -> int:
    lo, hi = INT_RANGES[t]
    pick = rng.random()
    if pick < 0.2:
        return rng.choice([lo, hi, 0, 1, -1 if lo < 0 else 2])
    if pick < 0.6:
        return max(lo, min(hi, rng.randint(-300, 300)))
    return rng.randint(lo, hi)


def _float(rng: random.Random, single: bool) -> float:
    pick = rng.random()
    if pick < 0.15:
        v = rng.choice([0.0, -0.0, math.inf, -math.inf, math.nan, 1e-300, 3.4e38])
    else:
        v = rng.uniform(-1e6, 1e6)
    return struct.unpack("<f", struct.pack("<f", v))[0] if single and math.isfinite(v) and abs(v) < 3.4e38 else v


def _text(rng: random.Random) -> str:
    alphabet = "abcXYZ09 -é€😀\u0000"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))


def scalar(rng: random.Random, fd: Any, exact: bool = False) -> Any:
    t = fd.type
    if t in INT_RANGES:
        return _int(rng, t)
    if t in (F.TYPE_DOUBLE, F.TYPE_FLOAT):
        return _float(rng, t == F.TYPE_FLOAT)
    if t == F.TYPE_BOOL:
        return rng.random() < 0.5
    if t == F.TYPE_STRING:
        return _text(rng)
    if t == F.TYPE_BYTES:
        return bytes(rng.randrange(256) for _ in range(rng.randint(0, 10)))
    if t == F.TYPE_ENUM:
        values = [v.number for v in fd.enum_type.values]
        if not fd.enum_type.is_closed and not exact and rng.random() < 0.1:
            return rng.choice([77, -5])              # a number the open enum does not declare
        return rng.choice(values)
    raise AssertionError(t)


def fill(rng: random.Random, msg: Message, depth: int = 0, exact: bool = False) -> Message:
    """Sets a random subset of ``msg``'s fields to random values. ``exact``:
    only values Arrow holds exactly and whose bytes are one (no unknown enum
    numbers, whole microseconds, maps of one entry at most: the protobuf
    package writes maps in its hash table's order)."""
    desc = msg.DESCRIPTOR
    if desc.full_name == "google.protobuf.Timestamp":
        msg.seconds = rng.randint(-62135596800, 253402300799)
        msg.nanos = rng.randint(0, 999_999) * 1000 if exact else rng.randint(0, 999_999_999)
        return msg
    if desc.full_name == "google.protobuf.Duration":
        secs = rng.randint(-315576000000, 315576000000)
        msg.seconds = secs
        nanos = rng.randint(0, 999_999) * 1000 if exact else rng.randint(0, 999_999_999)
        msg.nanos = nanos * (-1 if secs < 0 or (secs == 0 and rng.random() < 0.5) else 1)
        return msg
    for fd in desc.fields:
        if rng.random() < 0.3:
            continue
        if fd.is_repeated:
            entry = fd.message_type
            is_map = entry is not None and entry.GetOptions().map_entry
            for _ in range(rng.randint(0, 1 if is_map and exact else 4)):
                if is_map:
                    key = scalar(rng, entry.fields_by_number[1], exact)
                    vd = entry.fields_by_number[2]
                    target = getattr(msg, fd.name)
                    if vd.message_type is not None:
                        fill(rng, target[key], depth + 1, exact)
                    else:
                        target[key] = scalar(rng, vd, exact)
                elif fd.message_type is not None:
                    fill(rng, getattr(msg, fd.name).add(), depth + 1, exact)
                else:
                    getattr(msg, fd.name).append(scalar(rng, fd, exact))
        elif fd.message_type is not None:
            if depth < 4:
                sub = getattr(msg, fd.name)
                sub.SetInParent()
                fill(rng, sub, depth + 1, exact)
        else:
            setattr(msg, fd.name, scalar(rng, fd, exact))
    return msg


def random_messages(cls: type, n: int, seed: int, exact: bool = False) -> List[Message]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        m = cls()
        fill(rng, m, exact=exact)
        if hasattr(m, "key") and m.DESCRIPTOR.fields_by_name.get("key") is not None and \
                m.DESCRIPTOR.fields_by_name["key"].is_required:
            m.key = rng.randint(-5, 5)
        out.append(m)
    return out


def random_values(cls: type, n: int, seed: int, exact: bool = False) -> List[bytes]:
    return [m.SerializeToString() for m in random_messages(cls, n, seed, exact)]


# ------------------------------------------------------------------ the oracle
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def _micros_ts(seconds: int, nanos: int) -> datetime.datetime:
    return EPOCH + datetime.timedelta(microseconds=seconds * 1_000_000 + (nanos // 1000 if nanos >= 0 else -(-nanos // 1000)))


def _micros_duration(seconds: int, nanos: int) -> datetime.timedelta:
    return datetime.timedelta(microseconds=seconds * 1_000_000 + nanos // 1000)


def expected(msg: Message) -> Dict[str, Any]:
    """``msg`` as kwire's Arrow row should hold it (``to_pylist`` form),
    from the protobuf package's API."""
    out: Dict[str, Any] = {}
    for fd in msg.DESCRIPTOR.fields:
        out[fd.name] = _field(msg, fd)
    return out


def _field(msg: Message, fd: Any) -> Any:
    value = getattr(msg, fd.name)
    if fd.is_repeated:
        entry = fd.message_type
        if entry is not None and entry.GetOptions().map_entry:
            vd = entry.fields_by_number[2]
            return {k: _value(vd, value[k]) for k in value}
        return [_value(fd, v) for v in value]
    oneof = fd.containing_oneof
    if oneof is not None and msg.WhichOneof(oneof.name) != fd.name:
        return None
    if fd.has_presence and not msg.HasField(fd.name):
        if fd.has_default_value and fd.message_type is None and oneof is None:
            return _value(fd, value)
        return None
    return _value(fd, value)


def _value(fd: Any, v: Any) -> Any:
    if fd.message_type is not None:
        name = fd.message_type.full_name
        if name == "google.protobuf.Timestamp":
            return _micros_ts(v.seconds, v.nanos)
        if name == "google.protobuf.Duration":
            return _micros_duration(v.seconds, v.nanos)
        if name in WRAPPERS:
            return v.value
        return expected(v)
    if fd.type == F.TYPE_ENUM:
        known = fd.enum_type.values_by_number.get(v)
        return known.name if known is not None else None
    return v


def normalize(v: Any, t: Any = None) -> Any:
    """A value comparable with ==: NaN as a marker; with its Arrow type
    ``t``, an Arrow map (a list of pairs) as a dict."""
    import pyarrow as pa

    if isinstance(v, float) and math.isnan(v):
        return "NaN"
    if v is None:
        return None
    if t is not None and pa.types.is_map(t):
        return {k: normalize(x, t.item_type) for k, x in (v.items() if isinstance(v, dict) else v)}
    if isinstance(v, dict):
        if t is not None and pa.types.is_struct(t):
            return {k: normalize(x, t.field(k).type) for k, x in v.items()}
        return {k: normalize(x) for k, x in v.items()}
    if isinstance(v, list):
        item = t.value_type if t is not None and pa.types.is_list(t) else None
        return [normalize(x, item) for x in v]
    return v
