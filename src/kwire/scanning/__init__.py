"""``kwire.scan``: a bounded read of a topic as a ``pyarrow.RecordBatchReader``.

One consumer (no group) reads an offset or time range of the topic's
partitions (:mod:`kwire.scanning.plan`), streaming typed Arrow batches
(:mod:`kwire.scanning.reader`), so DuckDB (``duckdb.from_arrow``), Polars
(``pl.from_arrow``) and pandas (``reader.read_pandas()``) can query a topic
without holding it whole::

    import duckdb, kwire
    reader = kwire.scan("orders", bootstrap_servers="localhost:9092", value_format="json",
                        schema_registry_url="http://localhost:8081")
    duckdb.sql("SELECT value.customer, sum(value.total) FROM reader GROUP BY ALL")
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from kwire.formats.base import pa  # first: without pyarrow, its ImportError names kwire[arrow]

from kwire.consumer import Consumer
from kwire.formats import FormatCache, check_spec, split_options
from kwire.scanning.plan import check_bound, plan
from kwire.scanning.reader import Batches, scan_schema

__all__ = ["scan", "FETCH_MAX_WAIT_MS"]

#: The scan's consumer's ``fetch_max_wait_ms`` unless the caller gives one.
FETCH_MAX_WAIT_MS = 50


def scan(topic: str, *, bootstrap_servers: str, start: Any = "earliest", end: Any = "latest",
         partitions: Optional[Sequence[int]] = None, key_format: Any = None, value_format: Any = None,
         timestamp_unit: str = "ms", timeout: float = 30.0, **config: Any) -> "pa.RecordBatchReader":
    """The records of ``topic`` from ``start`` to ``end`` (exclusive) as a
    ``pyarrow.RecordBatchReader``.

    * ``start``, ``end``: ``"earliest"``, ``"latest"``, an offset, a
      ``datetime`` with a time zone (looked up by timestamp), or
      ``{partition: any of those}``; clamped to the log as it is now (a
      range past its end returns what is there).
    * ``partitions``: those to read (default: a mapping's, else all).
    * ``key_format``, ``value_format``: a :class:`kwire.formats.base.Format`,
      a kind ("avro", "protobuf", "json") or ``(kind, options)``; a kind
      takes the format options among ``config`` (``schema.registry.url``,
      ``basic.auth.user.info``, ``schema``...: dotted or snake case).
    * ``config``: the consumer's other options (``security_protocol``, ...;
      no ``group_id``: a scan commits nothing).
    * ``timeout``: seconds each metadata and offset look-up may take, and
      the longest wait for records while a partition is short of its end.

    The schema is fixed now: ``topic``, ``partition``, then
    :class:`kwire.ColumnarDecoder`'s columns (``offset``, ``timestamp`` in
    ``timestamp_unit``, ``timestamp_type``, ``key``, ``value``, ``headers``),
    key and value of their formats' types. The consumer is closed when
    the reader is exhausted or fails, or once it is released (``del reader``,
    or leaving its scope: pyarrow's ``reader.close()`` does not reach
    Python code)."""
    for bound, what in ((start, "start"), (end, "end")):
        check_bound(bound, what)
    check_spec(key_format)
    check_spec(value_format)
    if timestamp_unit not in ("ms", "us"):
        raise ValueError("timestamp_unit must be 'ms' or 'us'")
    format_options, client_options = split_options(config)
    if any(name.replace(".", "_") == "group_id" for name in client_options):
        raise ValueError("kwire.scan reads without a consumer group: leave group_id out")
    formats = FormatCache(format_options)
    keys = formats.get(key_format, topic=topic, is_key=True)
    values = formats.get(value_format, topic=topic, is_key=False)
    schema = scan_schema(timestamp_unit, topic, keys, values)
    # a bounded read never waits for records to come: a fetch at a log's end (read-ahead, a probe) need not
    # hold the leader's fetches back for long
    consumer = Consumer({"fetch_max_wait_ms": FETCH_MAX_WAIT_MS, **client_options}, bootstrap_servers=bootstrap_servers,
                        auto_offset_reset="earliest", allow_auto_create_topics=False)
    try:
        ranges = plan(consumer, topic, start, end, partitions, timeout)
        batches = Batches(consumer, ranges, schema, timestamp_unit=timestamp_unit, key_format=keys,
                          value_format=values, timeout=timeout)
    except BaseException:
        consumer.close()
        raise
    # Not wrapped in a C stream (RecordBatchReader.from_stream), whose close() would release the batches at
    # once: through a C stream an exception loses its type (a CorruptRecordError would come out ArrowInvalid)
    return pa.RecordBatchReader.from_batches(schema, batches)
