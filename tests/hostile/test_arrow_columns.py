"""Hostile Arrow columns given to ``Producer.send_arrow``: offsets that
point outside their buffers or run backwards, buffers too short for the
array's offset and length. The compiled core (arrowcols.pxd) must refuse
each with a ValueError naming the column and row, queue nothing, and never
read outside a buffer.

Two ways in:

- public: arrays made with ``pa.Array.from_buffers``. pyarrow checks the
  buffers' sizes and the first and last offsets there, not the offsets in
  between, so these are middle offsets past the data, decreasing or
  negative offsets (of values, headers lists, header keys and values);
- raw: the column tuples ``Accumulator.send_arrow`` takes (what
  ``kwire._arrow.send_columns`` makes of the arrays) built by hand, for
  what pyarrow will not build: short validity, offsets and data buffers,
  negative and overflowing array offsets, objects that are not buffers.

Every check happens before the producer looks for metadata, so no broker
is needed: the producer's bootstrap is a closed port, and ``max_block_ms``
is short so a check that is missing fails as a timeout, not a hang. The
cases run in a child interpreter (tests/hostile/_child.py), so an
out-of-bounds read that crashes is a failed test, not a dead run."""

from __future__ import annotations

from array import array
from typing import Any, Callable, Dict, List, Tuple

import pytest

from ._scenario import error_info

pa = pytest.importorskip("pyarrow")

TOPIC = "arrow-hostile"


# ------------------------------------------------------------------ arrays
def _i32(*values: int) -> bytes:
    return array("i", values).tobytes()


def _i64(*values: int) -> bytes:
    return array("q", values).tobytes()


def _binary(offsets: List[int], data: bytes, typ: Any = None, length: int = -1, offset: int = 0) -> Any:
    """A binary (or ``typ``) array over these offsets and data, as is."""
    n = len(offsets) - 1 - offset if length < 0 else length
    return pa.Array.from_buffers(typ or pa.binary(), n, [None, pa.py_buffer(_i32(*offsets)), pa.py_buffer(data)],
                                 offset=offset)


def _headers(list_offsets: List[int], keys: Any, values: Any) -> Any:
    """A ``list<struct<key, value>>`` array over these list offsets and entries."""
    entries = pa.StructArray.from_arrays([keys, values], names=["key", "value"])
    return pa.Array.from_buffers(pa.list_(entries.type), len(list_offsets) - 1,
                                 [None, pa.py_buffer(_i32(*list_offsets))], children=[entries])


def _good(n: int) -> Any:
    return pa.array([b"v%d" % i for i in range(n)], pa.binary())


# Public cases: name -> (columns of a RecordBatch, the message the error must carry)
PUBLIC: Dict[str, Tuple[Callable[[], Dict[str, Any]], str]] = {
    "value offsets past the data (a middle one)": (
        lambda: {"value": _binary([0, 100, 1, 3], b"abc")}, "column value: row 0's offsets point outside"),
    "value offsets decreasing": (
        lambda: {"value": _binary([0, 5, 2, 6], b"abcdef")}, "column value: row 1's offsets point outside"),
    "value offset negative": (
        lambda: {"value": _binary([0, -4, 2], b"ab")}, "column value: row 0's offsets point outside"),
    "string value offsets decreasing": (
        lambda: {"value": _binary([0, 3, 1, 4], b"abcd", pa.string())},
        "column value: row 1's offsets point outside"),
    "key offsets past the data": (
        lambda: {"key": _binary([0, 1, 50, 2], b"ab"), "value": _good(3)},
        "column key: row 1's offsets point outside"),
    "sliced value, bad offset inside the window": (
        lambda: {"value": _binary([0, 1, 9, 2, 3], b"abc", length=3, offset=1)},
        "column value: row 0's offsets point outside"),
    "headers list offsets past the entries": (
        lambda: {"value": _good(2), "headers": _headers([0, 5, 2], _binary([0, 1, 2], b"ab", None),
                                                        _good(2))},
        "column headers: row 0's offsets point outside its entries"),
    "headers list offsets decreasing": (
        lambda: {"value": _good(3), "headers": _headers([0, 2, 1, 2], _binary([0, 1, 2], b"ab"), _good(2))},
        "column headers: row 1's offsets point outside its entries"),
    "header key offsets past the data": (
        lambda: {"value": _good(1), "headers": _headers([0, 2], _binary([0, 9, 1], b"a",
                                                                        pa.string()),
                                                        _good(2))},
        "column headers: row 0's offsets point outside its data"),
    "header value offsets decreasing": (
        lambda: {"value": _good(2), "headers": _headers([0, 1, 3], _binary([0, 1, 2, 3], b"abc",
                                                                           pa.string()),
                                                        _binary([0, 3, 1, 3], b"abc"))},
        "column headers: row 1's offsets point outside its data"),
}

ROWS = 10
_VALUE = (None, _i32(*range(ROWS + 1)), b"x" * ROWS, 0)          # a good raw value column of ROWS rows
_KEYS = (None, _i32(*range(21)), b"k" * 20, 0)                   # good raw header keys / values: 20 entries
_NO_HEADERS = _i32(*([0] * (ROWS + 1)))

# Raw cases: name -> ((n, key, value, headers, partition, timestamp), error type, message)
RAW: Dict[str, Tuple[tuple, str, str]] = {
    "value validity too short": (
        (100, None, (b"\xff", _i32(*range(101)), b"x" * 100, 0), None, None, None), "ValueError",
        "column value: a buffer of 1 bytes, 13 needed"),
    "value offsets too short": (
        (ROWS, None, (None, _i32(0, 1, 2), b"x" * ROWS, 0), None, None, None), "ValueError",
        "column value: a buffer of 12 bytes, 44 needed"),
    "value offsets too short for the array's offset": (
        (1, None, (None, _i32(0, 1, 2), b"xx", 5), None, None, None), "ValueError",
        "column value: a buffer of 12 bytes, 28 needed"),
    "value array offset negative": (
        (ROWS, None, (None, _VALUE[1], _VALUE[2], -1), None, None, None), "ValueError",
        "negative offset or length"),
    "negative row count": ((-1, None, _VALUE, None, None, None), "ValueError", "negative row count"),
    "key offsets past a short data buffer": (
        (ROWS, (None, _i32(*range(ROWS + 1)), b"k" * 3, 0), _VALUE, None, None, None), "ValueError",
        "column key: row 3's offsets point outside its data"),
    "int64 partitions too short": (
        (ROWS, None, _VALUE, None, (None, _i64(0, 0), 0, True), None), "ValueError",
        "column partition: a buffer of 16 bytes, 80 needed"),
    "int32 partitions too short": (
        (ROWS, None, _VALUE, None, (None, _i32(0, 0), 0, False), None), "ValueError",
        "column partition: a buffer of 8 bytes, 40 needed"),
    "partition validity too short": (
        (ROWS, None, _VALUE, None, (b"", _i64(*[0] * ROWS), 0, True), None), "ValueError",
        "column partition: a buffer of 0 bytes, 2 needed"),
    "timestamps too short": (
        (ROWS, None, _VALUE, None, None, (None, _i64(1), 0)), "ValueError",
        "column timestamp: a buffer of 8 bytes, 80 needed"),
    "headers list offsets too short": (
        (ROWS, None, _VALUE, (None, _i32(0, 0), 0, 20, None, 0, _KEYS, _KEYS), None, None), "ValueError",
        "column headers: a buffer of 8 bytes, 44 needed"),
    "headers struct validity too short": (
        (ROWS, None, _VALUE, (None, _NO_HEADERS, 0, 20, b"\xff", 0, _KEYS, _KEYS), None, None), "ValueError",
        "headers: its validity buffer is too short"),
    "header keys shorter than the entries": (
        (ROWS, None, _VALUE, (None, _NO_HEADERS, 0, 20, None, 0, (None, _i32(0, 1), b"k", 0), _KEYS), None,
         None), "ValueError", "column headers.key: a buffer of 8 bytes, 84 needed"),
    "offsets not a buffer": (
        (ROWS, None, (None, 12345, b"", 0), None, None, None), "TypeError", ""),
}

# Array offsets so large that (offset + length + 1) * width overflows: the size check must not wrap
# around. (Where it wraps to a small positive size, the reads wrap the same way and land just before
# the buffer: an out-of-bounds read of a few bytes that does not crash, so not a case here.)
OVERFLOW: Dict[str, tuple] = {
    "value offset 2**61 (offsets need wraps negative)": (1, None, (None, _i32(0, 1), b"x", 1 << 61), None, None,
                                                         None),
    "int64 partition offset 2**60 (data need wraps negative)": (1, None, _VALUE[:3] + (0,), None,
                                                                (None, _i64(0), 1 << 60, True), None),
}


# ------------------------------------------------------ the child's side
def _producer() -> Any:
    from kwire.devbroker import free_port
    from kwire.producer import Producer

    return Producer(bootstrap_servers=f"127.0.0.1:{free_port()}", max_block_ms=300)


def _outcome(p: Any, call: Callable[[], Any]) -> Dict[str, Any]:
    """What ``call`` did: its error (or its result), and whether anything
    was left queued."""
    try:
        out: Dict[str, Any] = {"returned": repr(call())}
    except Exception as e:  # noqa: BLE001 - the error is the outcome
        out = error_info(e)
    out["queued"] = p._acc.buffered != 0 or bool(p._acc.open)
    return out


def hostile_columns(params: Dict[str, Any]) -> Dict[str, Any]:
    """Every public and raw case against one producer; their outcomes."""
    p = _producer()
    results: Dict[str, Any] = {}
    try:
        for name, (columns, _) in PUBLIC.items():
            try:
                rb = pa.record_batch(columns())
            except Exception as e:  # noqa: BLE001 - pyarrow refused to build it: the case is moot
                results[name] = {"pyarrow refused": error_info(e)}
                continue
            results[name] = _outcome(p, lambda: p.send_arrow(TOPIC, rb))
        for name, (args, _, _) in RAW.items():
            results[name] = _outcome(p, lambda: p._acc.send_arrow(TOPIC, *args, []))
    finally:
        p.close(0)
    return results


def overflowing_offset(params: Dict[str, Any]) -> Dict[str, Any]:
    """One OVERFLOW case (``params["case"]``)."""
    p = _producer()
    try:
        return _outcome(p, lambda: p._acc.send_arrow(TOPIC, *OVERFLOW[params["case"]], []))
    finally:
        p.close(0)


# ------------------------------------------------------------------ tests
def test_hostile_columns_are_refused_with_a_value_error(run_scenario):
    run = run_scenario(hostile_columns, timeout=60).check()
    results = run.result
    wrong = []
    for name, (_, message) in PUBLIC.items():
        got = results[name]
        if "pyarrow refused" in got:
            wrong.append(f"{name}: pyarrow refused to build it ({got['pyarrow refused']['message']})")
        elif got.get("type") != "ValueError" or message not in got.get("message", "") or got["queued"]:
            wrong.append(f"{name}: {got}")
    for name, (_, error, message) in RAW.items():
        got = results[name]
        if got.get("type") != error or message not in got.get("message", "") or got["queued"]:
            wrong.append(f"{name}: {got}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("case", sorted(OVERFLOW))
def test_an_overflowing_array_offset_is_refused(run_scenario, case):
    run = run_scenario(overflowing_offset, {"case": case}, timeout=30).check()
    got = run.result
    assert got.get("type") == "ValueError" and not got["queued"], got
