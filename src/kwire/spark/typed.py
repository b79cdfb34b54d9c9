"""The Spark type of a typed key or value column (``valueFormat`` /
``keyFormat``), and the conversions between kwire's Arrow columns and
Spark's: the one place where kwire's Arrow types (:mod:`kwire.formats`)
meet Spark's.

A format's column becomes exactly what Spark's own functions give for the
same schema: ``from_avro(value_without_header, schema)`` for Avro
(``SchemaConverters.toSqlType``, default options) and ``from_protobuf``'s
type for Protobuf; the Arrow layout is the one PySpark expects for that
type (``to_arrow_type``), which Spark checks batches against. A
:class:`Conv` tree, built once per schema from the schema itself (a union,
a wrapper or a logical type is not visible in the Arrow type alone), turns
each decoded batch into that layout without copying what is already in it
(structs, lists and maps are rebuilt around converted children; only the
leaves below change their buffers), and turns a DataFrame's Spark arrays
back into what the format's encoder takes (:meth:`Conv.to_format`).

Where kwire's Arrow type differs from Spark's (docs/guide/spark.md, "Typed keys and
values"):

==========================================  ======================================================
kwire's Arrow                               Spark (as from_avro / from_protobuf give it)
==========================================  ======================================================
enum: dictionary<int32, string>             string
Avro uuid (string): ``arrow.uuid``           string (canonical lower-case text)
Avro uuid (fixed): ``arrow.uuid``            binary (the 16 bytes)
Avro time-millis: time32[ms]                int (milliseconds)
Avro time-micros: time64[us]                time(6) from Spark 4.2, bigint (microseconds) before
Avro timestamp-millis/micros: ts[ms/us]     timestamp (local-timestamp-*: timestamp_ntz)
Avro timestamp-nanos (and local): ts[ns]     bigint (nanoseconds: Spark has no such type)
Avro duration: month_day_nano_interval      binary (the Avro fixed's 12 bytes)
Avro decimal over 38 digits: decimal256     string (the decimal's text; from_avro refuses it)
Avro union of int and long / float, double  bigint / double (the value in the wider type)
fixed_size_binary                           binary
Protobuf uint32 / uint64                    int / bigint (the same bits, as from_protobuf)
Protobuf wrapper (``Int32Value``...)        struct<value: ...> (kwire unwraps it)
Protobuf message without fields             left out of its parent (as from_protobuf)
Protobuf enum number the enum lacks         null; ``UNKNOWN_ENUM_VALUE_<Enum>`` in a repeated field or a
                                            map's value, never null in Spark (from_protobuf's name
                                            ends with the number, which kwire does not keep)
a Protobuf ``Timestamp``/``Duration``        timestamp / interval day to second, any message of
(seconds, nanos) of another package         that name with those fields (as from_protobuf)
JSON text (``arrow.json``)                  string
==========================================  ======================================================

Nullability is Spark's: an Avro field is nullable when its type is null or
a union with null, an array's elements and a map's values likewise; every
Protobuf field is nullable but ``required`` ones, a repeated field's
elements and a map's values are not.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DayTimeIntervalType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from kwire.spark.compat import FEATURES, release

__all__ = ["Conv", "conversion", "spark_arrow_type", "MAX_DECIMAL_PRECISION", "TIME_TYPE"]

#: Spark's largest decimal precision; a wider decimal is a string in Spark.
MAX_DECIMAL_PRECISION = 38


def _time_type() -> Optional[DataType]:
    """Spark's type of a time of day in microseconds: ``time(6)`` where
    Spark's from_avro gives it (4.2 on), else None (a bigint)."""
    if release(FEATURES.version) < (4, 2):
        return None
    from pyspark.sql.types import TimeType   # type: ignore[attr-defined]   (PySpark 4.1+)
    return TimeType(6)


#: ``time(6)`` on Spark 4.2+, None where times are bigints (3.5 to 4.1).
TIME_TYPE = _time_type()


def spark_arrow_type(dt: DataType) -> "pa.DataType":
    """The Arrow type PySpark uses for ``dt`` (what Spark checks a Python
    data source's batches against), on every supported PySpark."""
    from pyspark.sql.pandas.types import to_arrow_type

    try:
        return to_arrow_type(dt, timezone="UTC")
    except TypeError:            # PySpark 3.5: no timezone argument (timestamps are UTC)
        return to_arrow_type(dt)


Fn = Callable[["pa.Array"], "pa.Array"]


@dataclass(eq=False)
class Conv:
    """One node of a column's conversion: its Spark type and nullability
    (as a field, element or value of its parent), and how an array of it
    becomes Spark's (:meth:`to_spark`) and back (:meth:`to_format`).

    ``shape`` is ``leaf`` (``read``/``write`` convert the array, None: as
    it is), ``struct`` (``kids`` by field name), ``list`` (``kids``:
    the element), ``map`` (``kids``: key, value) or ``wrap`` (a scalar
    kwire decodes bare, Spark as ``struct<value>``: ``kids`` the scalar)."""

    spark: DataType
    nullable: bool = False
    shape: str = "leaf"
    kids: List[Tuple[str, "Conv"]] = field(default_factory=list)
    read: Optional[Fn] = None
    write: Optional[Fn] = None
    _arrow: Optional["pa.DataType"] = None

    @property
    def arrow(self) -> "pa.DataType":
        """The Arrow type of Spark's type (:func:`spark_arrow_type`)."""
        if self._arrow is None:
            self._arrow = spark_arrow_type(self.spark)
        return self._arrow

    def struct_field(self, name: str) -> StructField:
        return StructField(name, self.spark, self.nullable)

    # ------------------------------------------------------------ reading
    def to_spark(self, arr: "pa.Array") -> "pa.Array":
        """``arr`` (the format's decoded column, or a part of it) in Spark's Arrow layout."""
        if arr.type == self.arrow:
            return arr
        if self.shape == "leaf":
            return self.read(arr) if self.read is not None else arr.cast(self.arrow)
        if self.shape == "wrap":
            inner = self.kids[0][1].to_spark(arr)
            return pa.StructArray.from_arrays([inner], fields=list(self.arrow), mask=_mask(arr))
        if self.shape == "struct":
            children = [kid.to_spark(arr.field(name)) for name, kid in self.kids]
            return pa.StructArray.from_arrays(children, fields=list(self.arrow), mask=_mask(arr))
        if self.shape == "list":
            values = self.kids[0][1].to_spark(arr.values)
            return pa.ListArray.from_arrays(arr.offsets, values, type=self.arrow, mask=_mask(arr))
        entries = arr.values
        keys = self.kids[0][1].to_spark(entries.field(0))
        items = self.kids[1][1].to_spark(entries.field(1))
        return pa.MapArray.from_arrays(arr.offsets, keys, items, type=self.arrow, mask=_mask(arr))

    # ------------------------------------------------------------ writing
    def to_format(self, arr: "pa.Array") -> "pa.Array":
        """A DataFrame's array (Spark's Arrow layout, or any other the
        format's encoder takes) with the parts Spark types differently
        turned back into what the encoder takes; fields this schema does
        not know are passed as they are (the encoder names them)."""
        if self.shape == "leaf":
            return self.write(arr) if self.write is not None and arr.type == self.arrow else arr
        if self.shape == "wrap":
            if not pa.types.is_struct(arr.type) or arr.type.num_fields != 1:
                return arr
            inner = self.kids[0][1].to_format(arr.field(0))
            return pc.if_else(arr.is_valid(), inner, pa.nulls(len(arr), inner.type)) if arr.null_count else inner
        if self.shape == "struct" and pa.types.is_struct(arr.type):
            kids = dict(self.kids)
            fields = list(arr.type)
            children = [kids[f.name].to_format(arr.field(i)) if f.name in kids else arr.field(i)
                        for i, f in enumerate(fields)]
            return pa.StructArray.from_arrays(children, names=[f.name for f in fields], mask=_mask(arr))
        if self.shape == "list" and pa.types.is_list(arr.type):
            values = self.kids[0][1].to_format(arr.values)
            return pa.ListArray.from_arrays(arr.offsets, values, mask=_mask(arr))
        if self.shape == "map" and pa.types.is_map(arr.type):
            keys = self.kids[0][1].to_format(arr.values.field(0))
            items = self.kids[1][1].to_format(arr.values.field(1))
            return pa.MapArray.from_arrays(arr.offsets, keys, items, mask=_mask(arr))
        return arr


def _mask(arr: "pa.Array") -> Optional["pa.Array"]:
    """The rows that are null, for a rebuilt array (None: none is)."""
    return arr.is_null() if arr.null_count else None


def conversion(fmt: Any, topic: Optional[str], *, writing: bool = False) -> Conv:
    """The conversion of ``fmt``'s column (a :class:`kwire.formats.base.Format`)
    for ``topic``: its reader schema's (``writing``: the schema its encoder
    writes with)."""
    if fmt.kind == "avro":
        node = fmt.writer(topic)[0] if writing else fmt.reader_schema(topic)
        return _Avro().conv(node)
    if fmt.kind == "protobuf":
        return _protobuf_message(fmt.reader_message(topic))
    if writing:             # JSON writes any Arrow column as it is: nothing to turn back
        return Conv(StringType(), nullable=True)
    return _arrow_conv(fmt.arrow_type(topic), True)


# ---------------------------------------------------------------- leaves
def _normalized(arr: "pa.Array") -> "pa.Array":
    """``arr`` starting at offset 0 (a copy only when it is a slice)."""
    return pa.concat_arrays([arr]) if arr.offset else arr


def _fixed_bytes(arr: "pa.Array", width: int) -> Tuple[Any, int]:
    """The numpy ``(n, width)`` uint8 view of a fixed-width array's values, and n."""
    import numpy as np

    n = len(arr)
    data = arr.buffers()[1]
    return np.frombuffer(data, np.uint8, count=width * n).reshape(n, width), n


def _fixed_binary(arr: "pa.Array", rows: Any, n: int, width: int, type_: "pa.DataType") -> "pa.Array":
    """A binary or string array of ``n`` values of ``width`` bytes each
    (``rows``: numpy ``(n, width)`` uint8), with ``arr``'s validity."""
    import numpy as np

    offsets = np.arange(0, width * (n + 1), width, dtype=np.int32)
    return pa.Array.from_buffers(type_, n, [arr.buffers()[0], pa.py_buffer(offsets), pa.py_buffer(rows.tobytes())],
                                 null_count=arr.null_count)


_UUID_HEX_AT = (0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34)


def _uuid_text(arr: "pa.Array") -> "pa.Array":
    """16-byte UUIDs (``arrow.uuid``) as their canonical lower-case text."""
    import numpy as np

    storage = _normalized(arr.storage if isinstance(arr, pa.ExtensionArray) else arr)
    raw, n = _fixed_bytes(storage, 16)
    hexdigits = np.frombuffer(b"0123456789abcdef", np.uint8)
    text = np.full((n, 36), ord("-"), np.uint8)
    at = np.array(_UUID_HEX_AT)
    text[:, at] = hexdigits[raw >> 4]
    text[:, at + 1] = hexdigits[raw & 15]
    return _fixed_binary(storage, text, n, 36, pa.string())


def _uuid_bytes(arr: "pa.Array") -> "pa.Array":
    storage = arr.storage if isinstance(arr, pa.ExtensionArray) else arr
    return storage.cast(pa.binary())


def _to_uuid(arr: "pa.Array") -> "pa.Array":
    return pa.ExtensionArray.from_storage(pa.uuid(), arr.cast(pa.binary(16)))


def _duration_bytes(arr: "pa.Array") -> "pa.Array":
    """month_day_nano intervals as Avro durations: months, days and
    milliseconds, each a little-endian unsigned 32-bit number."""
    import numpy as np

    arr = _normalized(arr)
    n = len(arr)
    parts = np.frombuffer(arr.buffers()[1], np.dtype([("m", "<i4"), ("d", "<i4"), ("ns", "<i8")]), count=n)
    out = np.empty((n, 3), "<u4")
    out[:, 0] = parts["m"].view("<u4")
    out[:, 1] = parts["d"].view("<u4")
    out[:, 2] = (parts["ns"] // 1_000_000).astype("<u4")
    return _fixed_binary(arr, out.view(np.uint8).reshape(n, 12), n, 12, pa.binary())


def _duration_from_bytes(arr: "pa.Array") -> "pa.Array":
    """Avro durations' 12 bytes back as month_day_nano intervals (a value
    of another length is an error naming its row)."""
    import numpy as np

    lengths = pc.binary_length(arr)
    bad = pc.fill_null(pc.not_equal(lengths, 12), False)
    if pc.any(bad).as_py():
        row = pc.indices_nonzero(bad)[0].as_py()
        raise ValueError(f"row {row}: an Avro duration is 12 bytes, not {lengths[row].as_py()}")
    arr = _normalized(arr)
    n = len(arr)
    raw, _ = _fixed_bytes(pc.fill_null(arr, b"\x00" * 12).cast(pa.binary(12)), 12)
    fields = raw.copy().view("<u4").reshape(n, 3)
    parts = np.zeros(n, np.dtype([("m", "<i4"), ("d", "<i4"), ("ns", "<i8")]))
    parts["m"] = fields[:, 0].view("<i4")
    parts["d"] = fields[:, 1].view("<i4")
    parts["ns"] = fields[:, 2].astype("<i8") * 1_000_000
    return pa.Array.from_buffers(pa.month_day_nano_interval(), n, [arr.buffers()[0], pa.py_buffer(parts.tobytes())],
                                 null_count=arr.null_count)


def _view(type_: "pa.DataType") -> Fn:
    return lambda arr: arr.view(type_)


def _cast(type_: "pa.DataType") -> Fn:
    return lambda arr: arr.cast(type_)


def _decode_dictionary(arr: "pa.Array") -> "pa.Array":
    return arr.dictionary_decode() if isinstance(arr, pa.DictionaryArray) else arr.cast(pa.string())


def _widened(wide: "pa.DataType") -> Fn:
    """A union of two numbers (members' struct) as the wider one: the value
    of whichever member is set (dates and times as their numbers)."""
    def read(arr: "pa.Array") -> "pa.Array":
        members = [_as_number(arr.field(i), wide) for i in range(arr.type.num_fields)]
        return pc.coalesce(*members)
    return read


def _as_number(arr: "pa.Array", wide: "pa.DataType") -> "pa.Array":
    t = arr.type
    if pa.types.is_date32(t) or pa.types.is_time32(t):
        arr = arr.view(pa.int32())
    elif pa.types.is_temporal(t):
        arr = arr.view(pa.int64())
    return arr.cast(wide)


def _member_of(branches: List[Any]) -> Fn:
    """A number back into the members' struct of a two-number union, the
    branch chosen as Avro's writers (fastavro, confluent-kafka) choose it:
    the first that holds the value (an int first takes the values that fit
    in 32 bits), the double for a float and a double."""
    def write(arr: "pa.Array") -> "pa.Array":
        first, second = (b.type for b in branches)
        if first == "int":
            fits = pc.fill_null(pc.and_(pc.greater_equal(arr, -2**31), pc.less_equal(arr, 2**31 - 1)), False)
            narrow = pc.if_else(fits, arr, None).cast(pa.int32())
            children = [narrow, pc.if_else(fits, None, arr)]
        elif first == "long":
            children = [arr, pa.nulls(len(arr), pa.int32())]
        else:
            double = first == "double"
            children = [arr if double else pa.nulls(len(arr), pa.float32()),
                        pa.nulls(len(arr), pa.float32()) if double else arr]
        return pa.StructArray.from_arrays(children, names=["member0", "member1"], mask=_mask(arr))
    return write


# ---------------------------------------------------------------- Avro
_UTC_US = pa.timestamp("us", tz="UTC")
_NAIVE_US = pa.timestamp("us")


class _Avro:
    """An Avro schema's conversion (``SchemaConverters.toSqlType``'s rules)."""

    def conv(self, node: Any) -> Conv:
        if node.type == "union":
            return self._union(node)
        if node.type == "record":
            kids = [(f.name, self.conv(f.type)) for f in node.fields]
            return Conv(StructType([k.struct_field(name) for name, k in kids]), shape="struct", kids=kids)
        if node.type == "array":
            item = self.conv(node.items)
            return Conv(ArrayType(item.spark, item.nullable), shape="list", kids=[("element", item)])
        if node.type == "map":
            value = self.conv(node.values)
            return Conv(MapType(StringType(), value.spark, value.nullable), shape="map",
                        kids=[("key", Conv(StringType())), ("value", value)])
        return self._scalar(node)

    def _union(self, node: Any) -> Conv:
        others = [b for b in node.branches if b.type != "null"]
        has_null = len(others) < len(node.branches)
        if not others:
            return Conv(NullType(), nullable=True)
        if len(others) == 1:
            inner = self.conv(others[0])
            inner.nullable = inner.nullable or has_null
            return inner
        kinds = {b.type for b in others}
        if len(others) == 2 and kinds in ({"int", "long"}, {"float", "double"}):
            wide = pa.int64() if "long" in kinds else pa.float64()
            return Conv(LongType() if "long" in kinds else DoubleType(), nullable=has_null,
                        read=_widened(wide), write=_member_of(others))
        kids = [(f"member{i}", self.conv(b)) for i, b in enumerate(others)]
        for _, k in kids:
            k.nullable = True
        return Conv(StructType([k.struct_field(name) for name, k in kids]), nullable=has_null, shape="struct", kids=kids)

    def _scalar(self, node: Any) -> Conv:
        lt, t = node.logical, node.type
        if lt == "decimal":
            if node.precision <= MAX_DECIMAL_PRECISION:
                return Conv(DecimalType(node.precision, node.scale))
            return Conv(StringType(), read=_cast(pa.string()),
                        write=_cast(pa.decimal256(node.precision, node.scale)))
        if lt == "uuid":
            if t == "string":
                return Conv(StringType(), read=_uuid_text)
            return Conv(BinaryType(), read=_uuid_bytes, write=_to_uuid)
        if lt == "duration":
            return Conv(BinaryType(), read=_duration_bytes, write=_duration_from_bytes)
        if lt == "date":
            return Conv(DateType())
        if lt == "time-millis":
            return Conv(IntegerType(), read=_view(pa.int32()))
        if lt == "time-micros":
            if TIME_TYPE is not None:
                return Conv(TIME_TYPE, read=_cast(pa.time64("ns")))
            return Conv(LongType(), read=_view(pa.int64()))
        if lt in ("timestamp-millis", "timestamp-micros"):
            return Conv(TimestampType(), read=_cast(_UTC_US))
        if lt in ("local-timestamp-millis", "local-timestamp-micros"):
            return Conv(TimestampNTZType(), read=_cast(_NAIVE_US))
        if lt in ("timestamp-nanos", "local-timestamp-nanos"):
            return Conv(LongType(), read=_view(pa.int64()))
        if t == "enum":
            return Conv(StringType(), read=_decode_dictionary)
        if t in ("fixed", "bytes"):
            return Conv(BinaryType())
        return Conv(_PRIMITIVES[t], nullable=t == "null")


_PRIMITIVES: Dict[str, DataType] = {
    "null": NullType(), "boolean": BooleanType(), "int": IntegerType(), "long": LongType(), "float": FloatType(),
    "double": DoubleType(), "string": StringType(),
}


# ---------------------------------------------------------------- Protobuf
_PB_WRAPPERS = {f"google.protobuf.{n}Value" for n in ("Double", "Float", "Int64", "UInt64", "Int32", "UInt32",
                                                      "Bool", "String", "Bytes")}


def _protobuf_message(message: Any) -> Conv:
    """A message's struct: its fields in declaration order (``from_protobuf``
    leaves out a field whose message has no fields left)."""
    kids = []
    for fd in message.fields:
        kid = _protobuf_field(fd)
        if kid is not None:
            kids.append((fd.name, kid))
    return Conv(StructType([k.struct_field(name) for name, k in kids]), nullable=True, shape="struct", kids=kids)


def _protobuf_field(fd: Any) -> Optional[Conv]:
    repeated = fd.is_repeated
    if repeated and fd.message_type is not None and fd.message_type.GetOptions().map_entry:
        key = _protobuf_type(fd.message_type.fields_by_name["key"])
        value = _protobuf_type(fd.message_type.fields_by_name["value"], never_null=True)
        if key is None or value is None:
            return None
        return Conv(MapType(key.spark, value.spark, False), nullable=True, shape="map",
                    kids=[("key", key), ("value", value)])
    inner = _protobuf_type(fd, never_null=repeated)
    if inner is None:
        return None
    if repeated:
        inner.nullable = False
        return Conv(ArrayType(inner.spark, False), nullable=True, shape="list", kids=[("element", inner)])
    inner.nullable = not fd.is_required
    return inner


def _protobuf_type(fd: Any, never_null: bool = False) -> Optional[Conv]:
    """One value of ``fd``'s type (None: a message without fields, left out);
    ``never_null``: an element or map value, which Spark's type says is
    never null."""
    from google.protobuf.descriptor import FieldDescriptor as F

    t = fd.type
    if t in (F.TYPE_MESSAGE, F.TYPE_GROUP):
        return _protobuf_message_type(fd.message_type)
    if t == F.TYPE_ENUM:
        return Conv(StringType(), read=_unknown_enum(fd.enum_type.name) if never_null else _decode_dictionary)
    if t in (F.TYPE_UINT32, F.TYPE_FIXED32):
        return Conv(IntegerType(), read=_view(pa.int32()), write=_view(pa.uint32()))
    if t in (F.TYPE_UINT64, F.TYPE_FIXED64):
        return Conv(LongType(), read=_view(pa.int64()), write=_view(pa.uint64()))
    return Conv(_pb_scalars()[t])


def _unknown_enum(enum: str) -> Fn:
    """Enum names where none may be null: a number the enum does not declare
    (null in kwire's column: its decoder keeps no name for it) becomes
    ``UNKNOWN_ENUM_VALUE_<enum>``, the prefix of the name Protobuf's Java
    runtime (and so from_protobuf) gives it; the number is not known here."""
    def read(arr: "pa.Array") -> "pa.Array":
        names = _decode_dictionary(arr)
        return pc.fill_null(names, f"UNKNOWN_ENUM_VALUE_{enum}") if names.null_count else names
    return read


def _protobuf_message_type(message: Any) -> Optional[Conv]:
    names = [f.name for f in message.fields]
    if message.name in ("Timestamp", "Duration") and names == ["seconds", "nanos"]:
        timestamp = message.name == "Timestamp"
        target = _UTC_US if timestamp else pa.duration("us")
        well_known = message.full_name.startswith("google.protobuf.")        # kwire decodes it as Spark does
        return Conv(TimestampType() if timestamp else DayTimeIntervalType(), read=_seconds_nanos(target),
                    write=None if well_known else _to_seconds_nanos)
    if message.full_name in _PB_WRAPPERS:
        value = _protobuf_type(message.fields_by_name["value"])
        assert value is not None
        value.nullable = True
        return Conv(StructType([value.struct_field("value")]), shape="wrap", kids=[("value", value)])
    conv = _protobuf_message(message)
    return conv if conv.kids else None


def _seconds_nanos(target: "pa.DataType") -> Fn:
    """A (seconds, nanos) message kwire decodes as a struct, as microseconds
    of ``target`` (nanoseconds truncated toward zero, as from_protobuf)."""
    def read(arr: "pa.Array") -> "pa.Array":
        if not pa.types.is_struct(arr.type):
            return arr.cast(target)
        micros = pc.add(pc.multiply(arr.field("seconds").cast(pa.int64()), 1_000_000),
                        pc.divide(arr.field("nanos").cast(pa.int64()), 1000))
        if arr.null_count:
            micros = pc.if_else(arr.is_valid(), micros, pa.scalar(None, pa.int64()))
        return micros.view(target)
    return read


def _to_seconds_nanos(arr: "pa.Array") -> "pa.Array":
    """Microseconds back into (seconds, nanos) (floored seconds: nanos not negative)."""
    import numpy as np

    micros = arr.view(pa.int64()).to_numpy(zero_copy_only=False)
    micros = np.nan_to_num(micros).astype(np.int64) if micros.dtype != np.int64 else micros
    seconds, rest = np.divmod(micros, 1_000_000)
    return pa.StructArray.from_arrays([pa.array(seconds, pa.int64()), pa.array(rest * 1000, pa.int32())],
                                      names=["seconds", "nanos"], mask=_mask(arr))


@functools.lru_cache(maxsize=None)
def _pb_scalars() -> Dict[int, DataType]:
    """Spark's type of each Protobuf scalar type (made on first use: only
    Protobuf formats import protobuf)."""
    from google.protobuf.descriptor import FieldDescriptor as F

    return {F.TYPE_INT32: IntegerType(), F.TYPE_SINT32: IntegerType(), F.TYPE_SFIXED32: IntegerType(),
            F.TYPE_INT64: LongType(), F.TYPE_SINT64: LongType(), F.TYPE_SFIXED64: LongType(),
            F.TYPE_FLOAT: FloatType(), F.TYPE_DOUBLE: DoubleType(), F.TYPE_BOOL: BooleanType(),
            F.TYPE_STRING: StringType(), F.TYPE_BYTES: BinaryType()}


# ---------------------------------------------------------------- any Arrow type (JSON)
_ARROW_SCALARS = (
    (pa.types.is_boolean, BooleanType()), (pa.types.is_int8, ByteType()), (pa.types.is_int16, ShortType()),
    (pa.types.is_int32, IntegerType()), (pa.types.is_int64, LongType()), (pa.types.is_uint8, ShortType()),
    (pa.types.is_uint16, IntegerType()), (pa.types.is_uint32, LongType()), (pa.types.is_uint64, DecimalType(20, 0)),
    (pa.types.is_float16, FloatType()), (pa.types.is_float32, FloatType()), (pa.types.is_float64, DoubleType()),
    (pa.types.is_date, DateType()), (pa.types.is_duration, DayTimeIntervalType()),
    (lambda t: pa.types.is_string(t) or pa.types.is_large_string(t), StringType()),
    (lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t),
     BinaryType()),
    (pa.types.is_null, NullType()),
)


def _arrow_conv(t: "pa.DataType", nullable: bool) -> Conv:
    """The conversion of any Arrow type the formats make (the JSON format's
    types: they come from a JSON Schema, not an Avro or Protobuf one)."""
    if pa.types.is_struct(t):
        kids = [(f.name, _arrow_conv(f.type, f.nullable)) for f in t]
        return Conv(StructType([k.struct_field(name) for name, k in kids]), nullable, "struct", kids)
    if pa.types.is_map(t):
        key, value = _arrow_conv(t.key_type, False), _arrow_conv(t.item_type, t.item_field.nullable)
        return Conv(MapType(key.spark, value.spark, value.nullable), nullable, "map", [("key", key), ("value", value)])
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        item = _arrow_conv(t.value_type, t.value_field.nullable)
        return Conv(ArrayType(item.spark, item.nullable), nullable, "list", [("element", item)])
    if isinstance(t, pa.BaseExtensionType):
        if t.extension_name == "arrow.uuid":
            return Conv(StringType(), nullable, read=_uuid_text)
        return Conv(StringType(), nullable, read=lambda arr: arr.storage.cast(pa.string()))   # arrow.json
    if pa.types.is_dictionary(t):
        return Conv(StringType(), nullable, read=_decode_dictionary)
    if pa.types.is_timestamp(t):
        return Conv(TimestampType() if t.tz else TimestampNTZType(), nullable)
    if pa.types.is_time(t):
        if TIME_TYPE is not None:
            return Conv(TIME_TYPE, nullable)
        return Conv(LongType(), nullable, read=lambda arr: arr.cast(pa.time64("us")).view(pa.int64()))
    if pa.types.is_decimal(t):
        if t.precision <= MAX_DECIMAL_PRECISION:
            return Conv(DecimalType(t.precision, t.scale), nullable)
        return Conv(StringType(), nullable, read=_cast(pa.string()))
    for test, spark in _ARROW_SCALARS:
        if test(t):
            return Conv(spark, nullable)
    raise TypeError(f"kwire has no Spark type for the Arrow type {t}")
