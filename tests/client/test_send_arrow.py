"""``Producer.send_arrow``: Arrow rows encoded straight from their buffers
into record batches, against both live brokers (Tansu and Apache Kafka, the
``broker`` fixture), read back with kwire's Consumer field by field.

Covered: a RecordBatch and a multi-chunk Table (columns chunked
differently) of every column type the method takes (binary, string,
large_binary, large_string, list and large_list headers, int32/int64
partitions, timestamp[us, tz] and int64 ms timestamps), sliced arrays
(offset != 0, headers lists and their entries too), null keys, values,
headers, header values, partitions and timestamps; every codec; where rows
land (the explicit partition, murmur2 of the key, the sticky partition a
batch at a time); call order kept when ``send()`` and ``send_arrow()`` take
turns on a partition; idempotent and transactional producers; every error
that refuses the call queuing nothing; ``rows_queued`` on an error while
waiting for room (a private Tansu behind a proxy that black-holes); the
returned Future (the row count, or the first batch's error).

Hostile Arrow buffers (offsets outside their buffers) are
tests/hostile/test_arrow_columns.py's."""

from __future__ import annotations

import threading
from array import array
import time
import uuid
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import pytest

pa = pytest.importorskip("pyarrow")

from kwire._codec import partition_for_key  # noqa: E402
from kwire.admin import Admin, NewTopic  # noqa: E402
from kwire.consumer import Consumer  # noqa: E402
from kwire.errors import InvalidPartitionError, ProducerClosedError, RecordTooLargeError  # noqa: E402
from kwire.future import KafkaTimeoutError  # noqa: E402
from kwire.producer import BufferFullError, Producer  # noqa: E402
from kwire.transactions import TransactionStateError  # noqa: E402
from support.proxies import FaultProxy  # noqa: E402
from support.tansu import free_port, start_tansu  # noqa: E402

BASE_TS = 1_700_000_000_000          # ms; in the past: Kafka 4 refuses timestamps an hour ahead
HEADER_STRUCT = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
HEADERS = pa.list_(HEADER_STRUCT)
Header = Tuple[str, Optional[bytes]]


@dataclass(frozen=True)
class Row:
    """One row as sent, in Python: what the consumer must give back."""

    key: Optional[bytes]
    value: Optional[bytes]
    headers: Optional[List[Header]]
    partition: Optional[int]
    ts: Optional[int]                 # ms; None: the producer's clock


def _topic(bootstrap: str, partitions: int) -> str:
    name = f"arrow-{uuid.uuid4().hex[:10]}"
    with Admin(bootstrap_servers=bootstrap) as a:
        a.create_topics([NewTopic(name, partitions)])
    return name


def _consume(bootstrap: str, topic: str, partitions: int, n: int, seconds: float = 30.0,
             **cfg) -> Dict[int, list]:
    """Every record of ``topic`` (``n`` expected) by partition, in offset order."""
    got: Dict[int, list] = {p: [] for p in range(partitions)}
    seen = 0
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", **cfg) as c:
        c.assign([(topic, p) for p in range(partitions)])
        deadline = time.monotonic() + seconds
        while seen < n and time.monotonic() < deadline:
            for tp, recs in c.poll(300).items():
                got[tp.partition].extend(recs)
                seen += len(recs)
    return got


def _rows(start: int, n: int, partitions: int) -> List[Row]:
    """``n`` rows of every shape: null/empty values, null keys, headers
    none/empty/with null values, partitions explicit or not, timestamps
    given or not. A row that will be placed by the sticky partitioner (no
    key, no partition) has a unique value, so the check can find it."""
    out = []
    for i in range(start, start + n):
        key = None if i % 5 == 0 else b"k-%d" % (i % 37)
        partition = i % partitions if i % 3 == 0 else None
        value: Optional[bytes]
        if key is None and partition is None:
            value = b"sticky-%d" % i
        elif i % 7 == 0:
            value = None
        elif i % 7 == 1:
            value = b""
        elif i % 7 == 2:
            value = ("\u00e9t\u00e9-%d" % i).encode()         # not ASCII: the string column's UTF-8
        else:
            value = b"v-%d-" % i + b"x" * (i % 50)
        headers: Optional[List[Header]] = [
            None, [], [("a", b"1")], [("h", None), ("dup", b"x"), ("dup", b"")], [("i", b"%d" % i)], None,
        ][i % 6]
        ts = None if i % 4 == 0 else BASE_TS + i * 1000
        out.append(Row(key, value, headers, partition, ts))
    return out


PAD = 3       # junk rows before and after: every array is a slice (offset != 0)


def _padded(values: list, typ: "pa.DataType", junk) -> "pa.Array":
    """``values`` as an array of ``typ`` with an offset: built with junk
    rows around them, then sliced."""
    return pa.array([junk] * PAD + values + [junk] * PAD, typ).slice(PAD, len(values))


def _headers_array(rows: Sequence[Row], list_type: "pa.DataType") -> "pa.Array":
    """The headers column, sliced, over entries that are themselves a slice
    of a larger struct array (so the list, the struct and its children all
    have offsets)."""
    junk_entries = [{"key": "junk", "value": b"junk"}] * 2
    entries: list = list(junk_entries)             # skipped by the entries' slice
    offsets = [0] * (PAD + 1)                      # the leading junk rows: empty lists
    mask = [False] * PAD
    for r in rows:
        for k, v in r.headers or ():
            entries.append({"key": k, "value": v})
        offsets.append(len(entries) - len(junk_entries))
        mask.append(r.headers is None)
    entries += junk_entries                        # past the last row's entries
    offsets += [offsets[-1]] * PAD
    mask += [False] * PAD
    struct = pa.array(entries, HEADER_STRUCT).slice(len(junk_entries))
    offset_type = pa.int64() if pa.types.is_large_list(list_type) else pa.int32()
    lists = type(pa.array([], list_type)).from_arrays(pa.array(offsets, offset_type), struct, type=list_type,
                                                       mask=pa.array(mask))
    assert lists.offset == 0 and lists.values.offset == len(junk_entries)
    return lists.slice(PAD, len(rows))


def _record_batch(rows: Sequence[Row]) -> "pa.RecordBatch":
    """Default column names; key binary, value string, headers list,
    partition int32, timestamp[us, UTC] (a sub-ms part the producer drops)."""
    return pa.RecordBatch.from_arrays([
        _padded([r.key for r in rows], pa.binary(), b"junk"),
        _padded([None if r.value is None else r.value.decode() for r in rows], pa.string(), "junk"),
        _headers_array(rows, HEADERS),
        _padded([r.partition for r in rows], pa.int32(), 999),
        _padded([None if r.ts is None else r.ts * 1000 + 999 for r in rows], pa.timestamp("us", tz="UTC"), 0),
    ], names=["key", "value", "headers", "partition", "timestamp"])


def _chunked(values: list, typ: "pa.DataType", junk, cuts: Sequence[int]) -> "pa.ChunkedArray":
    bounds = [0, *cuts, len(values)]
    return pa.chunked_array([_padded(values[a:b], typ, junk) for a, b in zip(bounds, bounds[1:])], typ)


def _table(rows: Sequence[Row]) -> "pa.Table":
    """Other names, other types (large_string key, large_binary value,
    large_list headers, int64 partitions, int64 ms timestamps), an extra
    column, each column chunked at other rows."""
    n = len(rows)
    third = n // 3
    hbounds = [0, third, n]
    return pa.Table.from_arrays([
        _chunked([None if r.key is None else r.key.decode() for r in rows], pa.large_string(), "junk", [third]),
        _chunked([r.value for r in rows], pa.large_binary(), b"junk", [third + 7, 2 * third]),
        pa.chunked_array([_headers_array(rows[a:b], pa.large_list(HEADER_STRUCT))
                          for a, b in zip(hbounds, hbounds[1:])]),
        _chunked([r.partition for r in rows], pa.int64(), 999, [2 * third - 1]),
        _chunked([r.ts for r in rows], pa.int64(), 0, [5]),
        pa.chunked_array([pa.array(range(n), pa.int16())]),
    ], names=["k", "v", "h", "p", "ts", "unrelated"])


def _check(got: Dict[int, list], rows: Sequence[Row], partitions: int, now: Tuple[int, int]) -> None:
    """Every record as its row says, in row order within each partition:
    at the row's partition, or murmur2 of its key; a sticky row (found by
    its unique value) anywhere. Rows without timestamp carry one within
    ``now`` (ms)."""
    cursor = {p: 0 for p in range(partitions)}
    for i, row in enumerate(rows):
        if row.partition is not None:
            p = row.partition
        elif row.key is not None:
            p = partition_for_key(row.key, partitions)
        else:
            at = [q for q in cursor if cursor[q] < len(got[q]) and got[q][cursor[q]].value == row.value]
            assert len(at) == 1, f"row {i} (sticky, value {row.value!r}) is next in partitions {at}"
            p = at[0]
        assert cursor[p] < len(got[p]), f"row {i}: partition {p} has no record left"
        r = got[p][cursor[p]]
        cursor[p] += 1
        assert (r.key, r.value, r.headers) == (row.key, row.value, tuple(row.headers or ())), f"row {i}"
        if row.ts is None:
            assert now[0] <= r.timestamp <= now[1], f"row {i}: timestamp {r.timestamp} not within {now}"
        else:
            assert r.timestamp == row.ts, f"row {i}"
    assert cursor == {p: len(recs) for p, recs in got.items()}, "records no row accounts for"


def _nothing_queued(p: Producer) -> None:
    assert p._acc.buffered == 0 and not p._acc.open and not p._sealed_batches


# ------------------------------------------------------------ round trips
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_round_trip_record_batch_and_multi_chunk_table(broker, codec):
    partitions = 3
    topic = _topic(broker.bootstrap, partitions)
    first, second = _rows(0, 400, partitions), _rows(400, 500, partitions)
    t0 = int(time.time() * 1000)
    with Producer(bootstrap_servers=broker.bootstrap, compression_type=codec, linger_ms=5) as p:
        f1 = p.send_arrow(topic, _record_batch(first))
        f2 = p.send_arrow(topic, _table(second), key="k", value="v", headers="h", partition="p", timestamp="ts")
        assert (f1.result(30), f2.result(30)) == (len(first), len(second))
    t1 = int(time.time() * 1000)
    rows = first + second
    got = _consume(broker.bootstrap, topic, partitions, len(rows))
    _check(got, rows, partitions, (t0, t1))
    codec_id = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}[codec]
    assert {r.batch.compression for recs in got.values() for r in recs} == {codec_id}


def test_keyless_rows_take_the_sticky_partition_a_batch_at_a_time(broker):
    """No key, no partition: rows go to one partition, a full record batch
    at a time, until ``batch_size`` bytes went to it and its batch is full
    (KIP-794, as Java's producer): then to the next sticky partition."""
    partitions, n, batch_size = 4, 1500, 16384
    topic = _topic(broker.bootstrap, partitions)
    values = [b"%06d" % i + b"v" * 94 for i in range(n)]
    with Producer(bootstrap_servers=broker.bootstrap, batch_size=batch_size, linger_ms=50) as p:
        assert p.send_arrow(topic, pa.record_batch({"value": pa.array(values, pa.binary())})).result(30) == n
    got = _consume(broker.bootstrap, topic, partitions, n)
    where = {r.value: (p, r.batch.base_offset) for p, recs in got.items() for r in recs}
    assert sorted(where) == values
    runs: List[Tuple[Tuple[int, int], int]] = []            # (partition, batch), rows in a row
    for v in values:
        if runs and runs[-1][0] == where[v]:
            runs[-1] = (where[v], runs[-1][1] + 1)
        else:
            runs.append((where[v], 1))
    assert len({b for b, _ in runs}) == len(runs), "a batch's rows are not consecutive"
    stints: List[List[int]] = []                           # rows per batch, while the partition stays
    for i, ((part, _), count) in enumerate(runs):
        if i and part == runs[i - 1][0][0]:
            stints[-1].append(count)
        else:
            stints.append([count])
    assert len(stints) >= 2, "the sticky partition did not move"
    assert all(sum(s) * 108 >= batch_size for s in stints[:-1]), stints   # batch_size bytes before a switch
    full = [count for _, count in runs[:-1]]
    # a 100-byte value without key is ~108 bytes encoded: ~150 fill a 16 KiB batch
    assert len(runs) >= 5 and min(full) == max(full) and 16384 * 0.9 < full[0] * 108 <= 16384, runs


def test_send_and_send_arrow_keep_call_order_on_a_partition(broker):
    topic = _topic(broker.bootstrap, 1)
    order: List[bytes] = []
    kinds: List[str] = []
    with Producer(bootstrap_servers=broker.bootstrap, linger_ms=200) as p:
        futures = []
        for step in range(12):
            if step % 3 == 1:
                vals = [b"arrow-%d-%d" % (step, j) for j in range(step + 1)]
                futures.append(p.send_arrow(topic, pa.record_batch({"value": pa.array(vals, pa.binary()),
                                                                   "partition": pa.array([0] * len(vals))})))
                order += vals
                kinds += ["arrow"] * len(vals)
            else:
                futures.append(p.send(topic, b"send-%d" % step, partition=0))
                order.append(b"send-%d" % step)
                kinds.append("send")
        p.flush(30)
        for f in futures:
            f.result(0)
    got = _consume(broker.bootstrap, topic, 1, len(order))[0]
    assert [r.value for r in got] == order
    for a, b, ka, kb in zip(got, got[1:], kinds, kinds[1:]):
        if ka != kb:     # an encoded batch refuses send()'s records, and send()'s batch is sealed for rows
            assert a.batch.base_offset != b.batch.base_offset, (a.value, b.value)


def test_idempotent_batches_carry_contiguous_sequences(broker):
    partitions = 3
    topic = _topic(broker.bootstrap, partitions)
    rows = _rows(0, 900, partitions)
    with Producer(bootstrap_servers=broker.bootstrap, batch_size=2048, linger_ms=5) as p:
        assert p.cfg["enable_idempotence"]
        futures = [p.send_arrow(topic, _record_batch(rows[i:i + 300])) for i in range(0, len(rows), 300)]
        assert [f.result(30) for f in futures] == [300, 300, 300]
    got = _consume(broker.bootstrap, topic, partitions, len(rows))
    _check(got, rows, partitions, (0, 1 << 62))
    for recs in got.values():
        batches = list({r.batch.base_offset: r.batch for r in recs}.values())
        assert len(batches) > 1
        assert len({(b.producer_id, b.producer_epoch) for b in batches}) == 1 and batches[0].producer_id >= 0
        expect = 0
        for b in batches:
            assert b.base_sequence == expect
            expect += b.record_count


def test_transactional_commit_and_abort(broker):
    topic = _topic(broker.bootstrap, 2)
    rb = lambda tag, n: pa.record_batch({"key": pa.array([b"%s-%d" % (tag, i) for i in range(n)]),  # noqa: E731
                                         "value": pa.array([b"%s-%d" % (tag, i) for i in range(n)])})
    with Producer(bootstrap_servers=broker.bootstrap, transactional_id=f"arrow-{uuid.uuid4().hex[:8]}") as p:
        p.init_transactions(20)
        with pytest.raises(TransactionStateError, match="begin_transaction"):     # outside a transaction
            p.send_arrow(topic, rb(b"none", 3))
        _nothing_queued(p)
        p.begin_transaction()
        assert p.send_arrow(topic, rb(b"kept", 50)).result(20) == 50
        p.commit_transaction(20)
        p.begin_transaction()
        p.send_arrow(topic, rb(b"dropped", 40))
        p.flush(20)
        p.abort_transaction(20)
        p.begin_transaction()
        p.send_arrow(topic, rb(b"later", 30))
        p.commit_transaction(20)
    everything = _consume(broker.bootstrap, topic, 2, 120)
    values = sorted(r.value for recs in everything.values() for r in recs)
    assert len(values) == 120
    assert all(r.batch.is_transactional for recs in everything.values() for r in recs)
    want = sorted([b"kept-%d" % i for i in range(50)] + [b"later-%d" % i for i in range(30)])
    if broker.is_tansu:
        # Tansu 0.6.0 sends no aborted-transactions list in Fetch responses, so a
        # read_committed reader of it returns the aborted rows too: only the log is checked
        assert [v for v in values if not v.startswith(b"dropped")] == want
        return
    committed = _consume(broker.bootstrap, topic, 2, 80, seconds=5, isolation_level="read_committed")
    assert sorted(r.value for recs in committed.values() for r in recs) == want


# ------------------------------------------------------------------ errors
def _values(n: int, size: int = 10) -> "pa.Array":
    return pa.array([b"%d" % i + b"x" * size for i in range(n)], pa.binary())


def _header_rows(bad_entry) -> "pa.Array":
    typ = pa.list_(pa.struct([pa.field("key", pa.string(), nullable=True), pa.field("value", pa.binary())]))
    return pa.array([[{"key": "ok", "value": b"1"}]] * 10 + [[{"key": "ok", "value": b"1"}, bad_entry]], typ)


ERRORS = {
    # case: (columns, send_arrow keyword arguments, error, message)
    "too-large": (lambda: {"value": pa.array([b"x"] * 10 + [b"x" * 20000], pa.binary())}, {},
                  RecordTooLargeError, "max_request_size"),
    "partition-out-of-range": (lambda: {"value": _values(11), "partition": pa.array([0] * 10 + [7], pa.int32())},
                               {}, InvalidPartitionError, "partition 7 does not exist"),
    "negative-partition": (lambda: {"value": _values(11), "partition": pa.array([0] * 10 + [-1])}, {},
                           InvalidPartitionError, "partition -1"),
    "int-key": (lambda: {"value": _values(11), "key": pa.array(range(11))}, {}, TypeError, "column key"),
    "float-partition": (lambda: {"value": _values(11), "partition": pa.array([0.0] * 11)}, {}, TypeError,
                        "column partition"),
    "string-timestamp": (lambda: {"value": _values(11), "timestamp": pa.array(["x"] * 11)}, {}, TypeError,
                         "column timestamp"),
    "int-value": (lambda: {"value": pa.array(range(11))}, {}, TypeError, "column value"),
    "list-of-strings-headers": (lambda: {"value": _values(11), "headers": pa.array([["a"]] * 11)}, {}, TypeError,
                                "column headers"),
    "no-value-column": (lambda: {"payload": _values(11)}, {}, ValueError, "no value column 'value'"),
    "null-header": (lambda: {"value": _values(11), "headers": _header_rows(None)}, {}, ValueError,
                    "row 10 has a null header"),
    "null-header-key": (lambda: {"value": _values(11), "headers": _header_rows({"key": None, "value": b"v"})}, {},
                        ValueError, "row 10 has a header with a null key"),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_a_bad_row_refuses_the_call_and_queues_nothing(broker, case):
    """Ten good rows, then the bad one: the call raises, nothing is queued,
    and a record sent next is the topic's first (offset 0)."""
    topic = _topic(broker.bootstrap, 1)
    columns, kwargs, error, message = ERRORS[case]
    with Producer(bootstrap_servers=broker.bootstrap, max_request_size=10000, max_block_ms=5000) as p:
        p.partitions_for(topic)
        with pytest.raises(error, match=message):
            p.send_arrow(topic, pa.record_batch(columns()), **kwargs)
        _nothing_queued(p)
        assert p.send(topic, b"next", partition=0).get(20).offset == 0


def test_send_arrow_after_close(broker):
    p = Producer(bootstrap_servers=broker.bootstrap)
    p.close()
    with pytest.raises(ProducerClosedError):
        p.send_arrow("never-made", pa.record_batch({"value": _values(3)}))
    _nothing_queued(p)


def test_no_rows_is_a_done_future(broker):
    topic = _topic(broker.bootstrap, 1)
    with Producer(bootstrap_servers=broker.bootstrap) as p:
        f = p.send_arrow(topic, pa.record_batch({"value": _values(0)}))
        assert f.result(10) == 0
        _nothing_queued(p)


def test_empty_arrays_may_have_empty_offsets_buffers(broker):
    """Arrow lets an array of no values have an empty (or absent) offsets
    buffer: Spark 4.0's Arrow writer sends the key and value entries of a
    headers column in which no row has a header that way. Such rows go out
    without headers, and an empty value column the same way."""
    topic = _topic(broker.bootstrap, 1)
    empty = pa.Array.from_buffers(pa.string(), 0, [None, pa.py_buffer(b""), pa.py_buffer(b"")])
    empty_values = pa.Array.from_buffers(pa.binary(), 0, [None, None, pa.py_buffer(b"")])
    entries = pa.StructArray.from_arrays([empty, empty_values], names=["key", "value"])
    headers = pa.Array.from_buffers(pa.list_(entries.type), 3, [None, pa.py_buffer(array("i", [0, 0, 0, 0]).tobytes())],
                                    children=[entries])
    with Producer(bootstrap_servers=broker.bootstrap) as p:
        assert p.send_arrow(topic, pa.record_batch({"value": _values(3), "headers": headers})).result(30) == 3
        assert p.send_arrow(topic, pa.record_batch({"value": empty_values})).result(10) == 0
    got = _consume(broker.bootstrap, topic, 1, 3)[0]
    assert [tuple(r.headers) for r in got] == [(), (), ()]


# --------------------------------------- an unreachable broker (black hole)
@pytest.fixture(scope="module")
def holed() -> Iterator[Tuple[FaultProxy, str]]:
    """(proxy, bootstrap): a private Tansu that advertises a FaultProxy, so
    every connection goes through it and black-holing it cuts the producer
    off. Tansu only: a private Apache Kafka would cost ~10 s to start, and
    the queuing logic under test is the client's, not the broker's."""
    port = free_port()
    proxy = FaultProxy(("127.0.0.1", port))
    try:
        broker = start_tansu(port=port, advertised=proxy.address)
        try:
            yield proxy, proxy.address
        finally:
            broker.stop()
    finally:
        proxy.stop()


def _warm(bootstrap: str, topic: str, **cfg) -> Producer:
    """A producer that has its metadata, connection and producer id."""
    p = Producer(bootstrap_servers=bootstrap, **cfg)
    p.send(topic, b"warm", partition=0).get(20)
    return p


def test_buffer_full_midway_reports_rows_queued_and_they_are_delivered(holed):
    proxy, bootstrap = holed
    topic = _topic(bootstrap, 1)
    n = 2000
    values = [b"%06d" % i + b"v" * 94 for i in range(n)]     # ~108 bytes a row: ~216 KB, 32 KiB of room
    p = _warm(bootstrap, topic, buffer_memory=32768, batch_size=4096, linger_ms=0, max_block_ms=500,
              request_timeout_ms=30000)
    try:
        proxy.black_hole()
        t0 = time.monotonic()
        with pytest.raises(BufferFullError) as e:
            p.send_arrow(topic, pa.record_batch({"value": pa.array(values, pa.binary())}))
        assert time.monotonic() - t0 < 5
        queued = e.value.rows_queued
        assert 0 < queued < n and queued * 108 < 2 * 32768, queued
        proxy.heal()
        p.flush(30)
    finally:
        proxy.heal()
        p.close()
    got = _consume(bootstrap, topic, 1, queued + 1)[0]
    assert [r.value for r in got] == [b"warm"] + values[:queued]


def test_close_while_waiting_for_room_reports_rows_queued(holed):
    proxy, bootstrap = holed
    topic = _topic(bootstrap, 1)
    n = 2000
    p = _warm(bootstrap, topic, buffer_memory=32768, batch_size=4096, linger_ms=0, max_block_ms=20000,
              request_timeout_ms=30000)
    closer = threading.Timer(0.5, p.close, kwargs={"timeout": 0})
    try:
        proxy.black_hole()
        closer.start()
        t0 = time.monotonic()
        with pytest.raises(ProducerClosedError) as e:
            p.send_arrow(topic, pa.record_batch({"value": _values(n, 100)}))
        assert time.monotonic() - t0 < 5
        assert 0 < e.value.rows_queued < n
    finally:
        closer.join()
        proxy.heal()
        p.close()


def test_the_future_fails_with_the_batches_error(holed):
    proxy, bootstrap = holed
    topic = _topic(bootstrap, 2)
    p = _warm(bootstrap, topic, linger_ms=0, delivery_timeout_ms=1500, request_timeout_ms=1000,
              retry_backoff_ms=50)
    try:
        proxy.black_hole()
        f = p.send_arrow(topic, pa.record_batch({"value": _values(300), "partition": pa.array([0, 1] * 150)}))
        with pytest.raises(KafkaTimeoutError):
            f.result(10)
        assert isinstance(f.exception(), KafkaTimeoutError)
    finally:
        proxy.heal()
        p.close(5)


def test_lz4_batches_fill_batch_size_once_compressed(broker):
    """With compression, batch_size counts estimated compressed bytes, as in
    Java's producer: values that compress about 10x fill batches holding
    far more than batch_size of records once the estimate has come down
    (0.005 a batch), and no batch on the wire is much past batch_size."""
    topic = _topic(broker.bootstrap, 1)
    n, size, batch_size = 6000, 1000, 16384
    text = b"".join(b'{"user": %d, "event": "click", "page": "/a/b/c"} ' % (i % 97) for i in range(40))[:size]
    values = pa.array([text] * n, pa.binary())
    with Producer(bootstrap_servers=broker.bootstrap, batch_size=batch_size, compression_type="lz4") as p:
        for i in range(0, n, 500):
            p.send_arrow(topic, pa.record_batch([values.slice(i, 500)], names=["value"]))
            p.flush(30)                      # built, so the next rows' batches have the estimate of these
    got = _consume(broker.bootstrap, topic, 1, n)[0]
    assert len(got) == n and all(r.value == text for r in got)
    counts = [b.record_count for b in {r.batch.base_offset: r.batch for r in got}.values()]
    assert counts[0] <= batch_size // size                      # the estimate starts at 1.0
    assert max(counts) > 2 * (batch_size // size)               # ... and comes down as batches compress
