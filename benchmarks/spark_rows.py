"""Rows for the Spark write benchmark's shaped workloads, as one Parquet file
per shape that every sink then writes (``spark.read.parquet(path)``), so
that each sink gets the same rows at the same cost.

Columns as Spark's Kafka sink takes them: ``key`` (binary, nullable),
``value`` (binary) and ``headers`` (``array<struct<key string, value
binary>>``). Shapes (``SHAPES``):

- ``mixed``: a tenth of the keys null, the others 8, 16 or 36 bytes; values
  of 0 to 2,000 bytes (uniform; about 1,000 on average); 0 to 3 headers per
  row (uniform), the second of them with a null value on every seventh row;
- ``large``: the same keys and headers, values of 1,000 to 2,000 bytes.

Values are JSON-like text: slices of a fixed pool of JSON tokens at random
places, so they compress about as JSON events do (lz4: to about 38%). The
rows are made from a seed, vectorised with numpy, ``CHUNK`` rows at a time
(one row group each), so ten million of them take seconds and bounded memory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Tuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

CHUNK = 100_000
HEADER_KEYS = ("trace-id", "source", "content-type")
HEADERS_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
SCHEMA = pa.schema([pa.field("key", pa.binary()), pa.field("value", pa.binary()), pa.field("headers", HEADERS_TYPE)])
_TOKENS = (b'"id"', b'"event"', b'"click"', b'"user"', b"12345", b'"session"', b"true", b"null",
           b'"https://example.com/a/b"', b"3.14159", b'"name"', b'"Alice"', b"[1,2,3]", b"{", b"}", b": ", b", ")


@dataclass(frozen=True)
class Shape:
    """Value sizes (inclusive) of a shape; keys and headers are alike in every shape."""

    name: str
    value_min: int
    value_max: int
    describe: str


SHAPES = {
    "mixed": Shape("mixed", 0, 2000, "10% null keys (else 8/16/36 bytes), values 0-2,000 bytes, 0-3 headers "
                   "(a null header value on every 7th row)"),
    "large": Shape("large", 1000, 2000, "10% null keys (else 8/16/36 bytes), values 1,000-2,000 bytes, "
                   "0-3 headers (a null header value on every 7th row)"),
}


def _pool(rng: np.random.Generator) -> bytes:
    return b"".join(_TOKENS[i] for i in rng.integers(0, len(_TOKENS), 600_000).tolist())


def _binary(parts: list, valid: np.ndarray = None) -> pa.Array:
    """A binary array of ``parts`` (bytes), null where ``valid`` is false."""
    offsets = np.zeros(len(parts) + 1, np.int32)
    np.cumsum(np.fromiter(map(len, parts), np.int64, len(parts)), out=offsets[1:])
    mask = None if valid is None else pa.array(valid).buffers()[1]
    return pa.Array.from_buffers(pa.binary(), len(parts), [mask, pa.py_buffer(offsets), pa.py_buffer(b"".join(parts))],
                                 null_count=-1)


def _values(rng: np.random.Generator, pool: bytes, n: int, shape: Shape) -> pa.Array:
    lengths = rng.integers(shape.value_min, shape.value_max + 1, n).tolist()
    starts = rng.integers(0, len(pool) - shape.value_max - 1, n).tolist()
    return _binary([pool[s:s + n] for s, n in zip(starts, lengths)])


def _keys(rng: np.random.Generator, n: int, first: int) -> pa.Array:
    valid = rng.random(n) >= 0.1
    sizes = (np.array([8, 16, 36])[rng.integers(0, 3, n)] * valid).tolist()
    return _binary([(b"%036d" % i)[36 - k:] for i, k in zip(range(first, first + n), sizes)], valid)


def _headers(rng: np.random.Generator, n: int, first: int) -> pa.Array:
    counts = rng.integers(0, 4, n)
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    m = int(offsets[-1])
    slot = np.arange(m) - np.repeat(offsets[:-1], counts)             # 0, 1, 2 within each row
    row = np.repeat(np.arange(first, first + n), counts)
    keys = pa.array(np.array(HEADER_KEYS, dtype=object)[slot], pa.string())
    valid = ~((slot == 1) & (row % 7 == 0))
    vals = _binary([b"v-%d-%d" % (r, s) for r, s in zip(row.tolist(), slot.tolist())], valid)
    entries = pa.StructArray.from_arrays([keys, vals], fields=list(HEADERS_TYPE.value_type))
    return pa.ListArray.from_arrays(pa.array(offsets), entries, type=HEADERS_TYPE)


def chunk(shape: Shape, first: int, n: int, seed: int, pool: bytes) -> pa.RecordBatch:
    """Rows ``first`` to ``first + n - 1`` of ``shape`` (the same for the same seed)."""
    rng = np.random.default_rng([seed, first])
    return pa.record_batch([_keys(rng, n, first), _values(rng, pool, n, shape), _headers(rng, n, first)],
                           schema=SCHEMA)


def write_parquet(path: str, shape_name: str, rows: int, seed: int = 32) -> Tuple[int, int]:
    """``rows`` rows of shape ``shape_name`` as a Parquet file at ``path``
    (made again only if it is missing); returns (rows, value bytes)."""
    shape = SHAPES[shape_name]
    if not os.path.exists(path):
        pool = _pool(np.random.default_rng(seed))
        tmp = path + ".part"
        with pq.ParquetWriter(tmp, SCHEMA, compression="snappy") as w:
            for first in range(0, rows, CHUNK):
                w.write_batch(chunk(shape, first, min(CHUNK, rows - first), seed, pool))
        os.replace(tmp, path)
    meta = pq.ParquetFile(path).metadata
    col = meta.schema.names.index("value")
    value_bytes = sum(meta.row_group(i).column(col).total_uncompressed_size for i in range(meta.num_row_groups))
    return meta.num_rows, value_bytes
