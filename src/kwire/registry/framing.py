"""How registry-framed keys and values are laid out: one value at a time,
and a whole Arrow column at once.

**Confluent** (Kafka's serializers, confluent-kafka's, Apicurio's
Confluent-compatible mode): the magic byte 0, the schema id as a 4-byte
big-endian int, then the serialized data. Protobuf puts the **message
indexes** between the two: which message of the ``.proto`` file the data
is, as a path of indexes (``[0]`` the file's first message, ``[1, 0]`` the
first message nested in its second...), written as a zigzag varint count
and each index as a zigzag varint; the common ``[0]`` as the single byte 0.

**Apicurio** (its own serdes): the magic byte 0 and the id as an 8-byte
big-endian long (:data:`APICURIO_ID_SIZE`), or no prefix at all and the id
in a record header, ``apicurio.value.globalId`` / ``apicurio.key.globalId``
(``...contentId`` when the serializer names content ids: :data:`ID_KINDS`),
an 8-byte big-endian long too.

The column functions (:func:`parse_column`, :func:`frame_column`,
:func:`apicurio_header_ids`) work on ``pyarrow`` binary columns with
pyarrow's compute kernels, no Python per row, but for the Protobuf rows
whose message indexes are not ``[0]`` (each parsed in Python; producers
rarely write them). Malformed input raises
:class:`kwire.errors.CorruptRecordError` naming the topic, partition and
the record's offset (of the first bad row) that the caller passes.
"""

from __future__ import annotations

import struct
from typing import Callable, Iterable, List, NamedTuple, Optional, Sequence, Tuple, Union

from kwire.errors import CorruptRecordError

try:
    import pyarrow as pa
    import pyarrow.compute as pc
except ImportError as e:  # pragma: no cover - exercised only without pyarrow
    raise ImportError("kwire's registry framing works on Arrow columns: pip install 'kwire[arrow]'") from e

__all__ = [
    "MAGIC", "ID_SIZE", "APICURIO_ID_SIZE", "MAX_MESSAGE_INDEXES", "GLOBAL_ID", "CONTENT_ID", "ID_KINDS",
    "Frame", "FramedColumn", "encode_frame", "parse_frame", "encode_message_indexes", "parse_message_indexes",
    "parse_column", "frame_column", "payloads", "apicurio_header", "apicurio_id_from_headers",
    "apicurio_header_ids",
]

MAGIC = 0
ID_SIZE = 4                 # Confluent: a 4-byte schema id
APICURIO_ID_SIZE = 8        # Apicurio's own framing and headers: an 8-byte id
#: Message indexes beyond this many are refused (no .proto nests messages so deep).
MAX_MESSAGE_INDEXES = 128
GLOBAL_ID, CONTENT_ID = "globalId", "contentId"
ID_KINDS = (GLOBAL_ID, CONTENT_ID)

Offsets = Union[None, Sequence[int], "pa.Array"]
_Where = Tuple[Optional[str], Optional[int], Offsets]          # topic, partition, the records' offsets


class Frame(NamedTuple):
    """One framed value: its schema id, its message indexes (Protobuf; else
    None) and where its payload starts."""

    schema_id: int
    message_indexes: Optional[List[int]]
    payload_start: int


class FramedColumn(NamedTuple):
    """A framed column's parts, one row per row (null where the value is null).

    ``column`` is the binary array the positions refer to (the one given, or
    its chunks combined); ``payload_starts`` are absolute positions in its
    data buffer (``column.buffers()[2]``): a row's payload runs from there to
    the row's end offset. ``message_indexes`` (``list<int32>``) only when asked for.
    """

    column: "pa.Array"
    schema_ids: "pa.Array"
    payload_starts: "pa.Array"
    message_indexes: Optional["pa.Array"] = None


# ------------------------------------------------------------ one value
def _zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def _varint(n: int) -> bytes:
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def encode_message_indexes(indexes: Sequence[int]) -> bytes:
    """Protobuf message indexes as framed: ``[0]`` (or none) as the byte 0, else
    the zigzag varint count and each index as a zigzag varint."""
    if any(i < 0 for i in indexes):
        raise ValueError("message indexes are never negative")
    if list(indexes) in ([], [0]):
        return b"\x00"
    return _varint(_zigzag(len(indexes))) + b"".join(_varint(_zigzag(i)) for i in indexes)


def _read_varint(buf: bytes, pos: int) -> Tuple[int, int]:
    """A zigzag varint at ``pos``: (value, position after it)."""
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise CorruptRecordError("registry frame: the message indexes end inside a varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (value >> 1) ^ -(value & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptRecordError("registry frame: a message index varint longer than 10 bytes")


def parse_message_indexes(buf: bytes, pos: int = 0) -> Tuple[List[int], int]:
    """The message indexes at ``pos`` of ``buf``: (indexes, position after them)."""
    count, pos = _read_varint(buf, pos)
    if count == 0:
        return [0], pos
    if not 0 < count <= MAX_MESSAGE_INDEXES:
        raise CorruptRecordError(f"registry frame: {count} message indexes (at most {MAX_MESSAGE_INDEXES})")
    indexes = []
    for _ in range(count):
        index, pos = _read_varint(buf, pos)
        if index < 0:
            raise CorruptRecordError("registry frame: a negative message index")
        indexes.append(index)
    return indexes, pos


def encode_frame(schema_id: int, payload: bytes, message_indexes: Optional[Sequence[int]] = None) -> bytes:
    """``payload`` framed with ``schema_id`` (and Protobuf's ``message_indexes``), as Confluent's serializers do."""
    head = struct.pack(">bI", MAGIC, schema_id)
    return head + (encode_message_indexes(message_indexes) if message_indexes is not None else b"") + payload


def _check_head(value: bytes, id_size: int, message_indexes: bool = False) -> None:
    if len(value) < 1 + id_size:
        raise CorruptRecordError(f"registry frame: a value of {len(value)} bytes (a frame has at least "
                                 f"{1 + id_size})")
    if value[0] != MAGIC:
        raise CorruptRecordError(f"registry frame: unknown magic byte {value[0]} (expected {MAGIC})")
    if message_indexes and len(value) == 1 + id_size:
        raise CorruptRecordError(f"registry frame: a value of {len(value)} bytes ends before its message indexes")


def parse_frame(value: bytes, message_indexes: bool = False, id_size: int = ID_SIZE) -> Frame:
    """The frame of one value (``message_indexes``: it is Protobuf's;
    ``id_size`` 8 for Apicurio's framing)."""
    _check_head(value, id_size, message_indexes)
    schema_id = int.from_bytes(value[1:1 + id_size], "big", signed=True)
    if schema_id < 0:
        raise CorruptRecordError(f"registry frame: a negative schema id ({schema_id})")
    if not message_indexes:
        return Frame(schema_id, None, 1 + id_size)
    indexes, start = parse_message_indexes(value, 1 + id_size)
    return Frame(schema_id, indexes, start)


def apicurio_header(is_key: bool = False, id_kind: str = GLOBAL_ID) -> str:
    """The record header holding Apicurio's id: ``apicurio.value.globalId``..."""
    if id_kind not in ID_KINDS:
        raise ValueError(f"an Apicurio id is a {' or a '.join(ID_KINDS)}, not {id_kind!r}")
    return f"apicurio.{'key' if is_key else 'value'}.{id_kind}"


def apicurio_id_from_headers(headers: Iterable[Tuple[str, Optional[bytes]]], is_key: bool = False,
                             id_kind: str = GLOBAL_ID) -> Optional[int]:
    """The id in a record's Apicurio header (the last one, as Kafka's ``lastHeader``), None without one."""
    name = apicurio_header(is_key, id_kind)
    found = None
    for key, value in headers:
        if key == name:
            found = value
    if found is None:
        return None
    if len(found) != APICURIO_ID_SIZE:
        raise CorruptRecordError(f"registry frame: header {name} of {len(found)} bytes (expected {APICURIO_ID_SIZE})")
    return int.from_bytes(found, "big", signed=True)


# ------------------------------------------------------------ a column
def _binary(column: Union["pa.Array", "pa.ChunkedArray"]) -> "pa.Array":
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if not (pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type)):
        raise TypeError(f"a framed column is binary or large_binary, not {column.type}")
    return column


def _value_offsets(column: "pa.Array") -> "pa.Array":
    """The column's n + 1 value offsets (absolute positions in its data buffer)."""
    kind = pa.int64() if pa.types.is_large_binary(column.type) else pa.int32()
    return pa.Array.from_buffers(kind, len(column) + 1, [None, column.buffers()[1]], offset=column.offset)


def _where(offsets: Offsets, row: int) -> Optional[int]:
    if offsets is None:
        return None
    value = offsets[row]
    return value.as_py() if isinstance(value, pa.Scalar) else int(value)


def _refuse_row(column: "pa.Array", row: int, check: Callable[[bytes], object], where: "_Where") -> None:
    """``check`` (which raises for it) on ``column[row]``, the error located at that record."""
    try:
        check(column[row].as_py())
    except CorruptRecordError as e:
        raise e.at(where[0], where[1], _where(where[2], row)) from None
    raise AssertionError("a bad row passed its check")          # pragma: no cover


def _like(array: "pa.Array", n: int) -> "pa.Scalar":
    """``n`` of ``array``'s type: a plain int would make a kernel widen the whole array first (60x slower)."""
    return pa.scalar(n, array.type)


def _u32(n: int) -> "pa.Scalar":
    return pa.scalar(n, pa.uint32())


def _swap32(x: "pa.Array") -> "pa.Array":
    """Big-endian uint32s read as little-endian, put right."""
    and_, shl, shr = pc.bit_wise_and, pc.shift_left, pc.shift_right
    parts = (shl(and_(x, _u32(0xFF)), _u32(24)), shl(and_(x, _u32(0xFF00)), _u32(8)),
             and_(shr(x, _u32(8)), _u32(0xFF00)), shr(x, _u32(24)))
    out = parts[0]
    for part in parts[1:]:
        out = pc.bit_wise_or(out, part)
    return out


def _ids(filled: "pa.Array", id_size: int) -> "pa.Array":
    """Each row's big-endian id after the magic byte (every row long enough), as int32 or int64."""
    def word(start: int) -> "pa.Array":
        data = pc.binary_slice(filled, start, start + 4).buffers()[2]
        return _swap32(pa.Array.from_buffers(pa.uint32(), len(filled), [None, data]))

    if id_size == ID_SIZE:
        return pc.cast(word(1), pa.int32(), safe=False)
    high, low = (pc.cast(word(s), pa.uint64()) for s in (1, 5))
    return pc.cast(pc.bit_wise_or(pc.shift_left(high, pa.scalar(32, pa.uint64())), low), pa.int64(), safe=False)


def _row_lists(counts: "pa.Array", nulls: "pa.Array", slow: Optional["pa.Array"],
               slow_values: List[int]) -> "pa.Array":
    """``list<int32>`` rows of ``counts`` zeros each (null where ``nulls``), the
    rows of the mask ``slow`` holding ``slow_values`` (in row order) instead."""
    ends = pc.cumulative_sum(counts)
    offsets = pa.concat_arrays([pa.array([0], pa.int32()), pc.cast(ends, pa.int32())])
    lists = pa.ListArray.from_arrays(offsets, pa.repeat(pa.scalar(0, pa.int32()), len(ends) and ends[-1].as_py()),
                                     mask=nulls)
    if slow is None:
        return lists
    values_mask = pc.take(slow, pc.list_parent_indices(lists))
    values = pc.replace_with_mask(lists.values, values_mask, pa.array(slow_values, pa.int32()))
    return pa.ListArray.from_arrays(offsets, values, mask=nulls)


def _message_indexes(col: "pa.Array", filled: "pa.Array", head: int, starts: "pa.Array", good: "pa.Array",
                     until: int, where: _Where) -> Tuple["pa.Array", "pa.Array"]:
    """The Protobuf rows' message indexes and payload starts: vectorised for the
    single byte 0 (``[0]``), one row at a time in Python for the others (those
    before row ``until``, the first bad one, if any: its error comes first)."""
    one = pc.cast(good, pa.int32())
    first = pc.binary_slice(filled, head, head + 1)
    slow = pc.and_(good, pc.not_equal(first, pa.scalar(b"\x00", col.type)))
    if not pc.any(slow).as_py():
        return _row_lists(one, pc.invert(good), None, []), pc.add(starts, pc.cast(one, starts.type))
    counts, ends, flat = [], [], []
    for row in pc.indices_nonzero(slow).to_pylist():
        if 0 <= until < row:
            break
        try:
            indexes, end = parse_message_indexes(col[row].as_py(), head)
        except CorruptRecordError as e:
            raise e.at(where[0], where[1], _where(where[2], row)) from None
        counts.append(len(indexes))
        ends.append(end)
        flat.extend(indexes)
    if until >= 0:
        return None, None         # type: ignore[return-value] - the caller raises for row ``until``
    counts_all = pc.replace_with_mask(one, slow, pa.array(counts, pa.int32()))
    offsets = _value_offsets(col).slice(0, len(col))
    skips = pc.replace_with_mask(pc.cast(one, starts.type), slow, pc.subtract(
        pa.array(ends, starts.type), pa.array([head] * len(ends), starts.type)))
    return _row_lists(counts_all, pc.invert(good), slow, flat), pc.add(pc.add(offsets, _like(offsets, head)), skips)


def parse_column(column: Union["pa.Array", "pa.ChunkedArray"], *, message_indexes: bool = False,
                 id_size: int = ID_SIZE, topic: Optional[str] = None, partition: Optional[int] = None,
                 offsets: Offsets = None) -> FramedColumn:
    """Every row's frame (see :class:`FramedColumn`): the schema ids (``int32``;
    ``int64`` for Apicurio's 8-byte ids) and where each payload starts;
    ``message_indexes``: Protobuf's too. A null row stays null. A row too short
    for its frame, of another magic byte, or with a negative id raises
    :class:`CorruptRecordError` at ``offsets[row]`` (the records' offsets) of
    ``topic``/``partition``."""
    if id_size not in (ID_SIZE, APICURIO_ID_SIZE):
        raise ValueError(f"a framed schema id has {ID_SIZE} or {APICURIO_ID_SIZE} bytes")
    col = _binary(column)
    head = 1 + id_size
    least = head + (1 if message_indexes else 0)
    valid = col.is_valid()
    lengths = pc.binary_length(col)
    magic = pc.binary_slice(col, 0, 1)
    bad = pc.fill_null(pc.or_(pc.less(lengths, _like(lengths, least)),
                              pc.not_equal(magic, pa.scalar(bytes([MAGIC]), col.type))), False)
    filled = col
    if col.null_count or pc.any(bad).as_py():                  # every row long enough for the kernels below
        filled = pc.if_else(pc.or_(bad, pc.invert(valid)), pa.scalar(bytes(least), col.type), col)
    ids = _ids(filled, id_size)
    bad = pc.or_(bad, pc.less(ids, _like(ids, 0)))
    first_bad = pc.index(bad, True).as_py()
    where = (topic, partition, offsets)
    firsts = _value_offsets(col).slice(0, len(col))
    starts = pc.add(firsts, _like(firsts, head))
    indexes = None
    if message_indexes:
        indexes, starts = _message_indexes(col, filled, head, starts, pc.and_(valid, pc.invert(bad)), first_bad,
                                           where)
    if first_bad >= 0:
        _refuse_row(col, first_bad, lambda v: parse_frame(v, message_indexes, id_size), where)
    return FramedColumn(col, pc.if_else(valid, ids, pa.scalar(None, ids.type)), starts, indexes)


def payloads(framed: FramedColumn) -> "pa.Array":
    """Each row's payload, without its frame (a copy; a null row stays null)."""
    col = framed.column
    skip = pc.if_else(col.is_valid(), pc.subtract(framed.payload_starts, _value_offsets(col).slice(0, len(col))), None)
    least, most = pc.min(skip).as_py() or 0, pc.max(skip).as_py() or 0
    if least != most:                                     # Protobuf rows with longer message indexes
        return pa.array([None if v is None else v[s:] for v, s in zip(col.to_pylist(), skip.to_pylist())], col.type)
    # binary_slice without a stop miscounts its output (pyarrow 26): the longest value's length is one
    return pc.binary_slice(col, least, max(pc.max(pc.binary_length(col)).as_py() or 0, least))


def frame_column(column: Union["pa.Array", "pa.ChunkedArray"], schema_id: int,
                 message_indexes: Optional[Sequence[int]] = None) -> "pa.Array":
    """Every row of the binary ``column`` framed with ``schema_id`` (and Protobuf's
    ``message_indexes``), as Confluent's serializers frame them; nulls stay null."""
    col = _binary(column)
    head = encode_frame(schema_id, b"", message_indexes)
    return pc.binary_join_element_wise(pa.scalar(head, col.type), col, pa.scalar(b"", col.type))


def apicurio_header_ids(headers: Union["pa.Array", "pa.ChunkedArray"], *, is_key: bool = False,
                        id_kind: str = GLOBAL_ID, values: Optional["pa.Array"] = None,
                        topic: Optional[str] = None, partition: Optional[int] = None,
                        offsets: Offsets = None) -> "pa.Array":
    """The Apicurio id of each row from its headers column (kwire's
    ``list<struct<key, value>>``; the last matching header wins), ``int64``,
    null where none. A header value that is not 8 bytes, or (with
    ``values``, the column the ids are for) a non-null value without the
    header, raises :class:`CorruptRecordError`."""
    name = apicurio_header(is_key, id_kind)
    if isinstance(headers, pa.ChunkedArray):
        headers = headers.combine_chunks()
    n = len(headers)
    flat = pc.list_flatten(headers)
    parents = pc.list_parent_indices(headers)
    match = pc.fill_null(pc.equal(flat.field("key"), name), False)
    found_rows, found = pc.filter(parents, match), pc.filter(flat.field("value"), match)
    if len(found_rows):            # the last of each row's matches
        last = pc.not_equal(found_rows.slice(0, len(found_rows) - 1), found_rows.slice(1))
        last = pa.concat_arrays([last, pa.array([True])])
        found_rows, found = pc.filter(found_rows, last), pc.filter(found, last)
    rows = pc.subtract(pc.cumulative_sum(pa.repeat(pa.scalar(1, pa.int64()), n)), pa.scalar(1, pa.int64()))
    has = pc.is_in(rows, value_set=pc.cast(found_rows, pa.int64()))
    lengths = pc.binary_length(found)
    wrong = pc.fill_null(pc.not_equal(lengths, _like(lengths, APICURIO_ID_SIZE)), True)
    if pc.any(wrong).as_py():
        k = pc.index(wrong, True).as_py()
        size = lengths[k].as_py()
        raise CorruptRecordError(f"registry frame: header {name} of {'no value' if size is None else f'{size} bytes'}"
                                 f" (expected {APICURIO_ID_SIZE} bytes)", topic, partition,
                                 _where(offsets, found_rows[k].as_py()))
    if values is not None:
        missing = pc.and_(pc.is_valid(_binary(values)), pc.invert(has))
        if pc.any(missing).as_py():
            row = pc.index(missing, True).as_py()
            raise CorruptRecordError(f"registry frame: no {name} header", topic, partition, _where(offsets, row))
    ids = _ids(pc.binary_join_element_wise(pa.scalar(b"\x00", found.type), found, pa.scalar(b"", found.type)),
               APICURIO_ID_SIZE)
    return pc.replace_with_mask(pa.nulls(n, pa.int64()), has, ids)
