"""``kwire consume``: records of one or more topics to stdout (or Parquet),
as kcat prints them.

Partitions: every partition of the topics (``-p`` one of them), or, with
``-G GROUP``, those the group assigns this member (it commits only what it
printed: the next run of the group starts right after it). Where each
partition starts and stops: ``-o`` (:func:`kwire.cli.records.parse_offsets`:
beginning, end, stored, N, -N, s@MS, and e@MS to stop before a timestamp),
``-e`` (stop at the end each partition had when it was taken),
``-c N`` (exactly N records in all), ``--timeout`` (seconds without a
record). Output: JSON lines (``-J``), values, key and value, a kcat format
string (``-f``), typed keys and values (``--key-format`` /
``--value-format``), or Parquet (``--output``).
"""

from __future__ import annotations

import argparse
import base64
import json
import signal
import sys
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from kwire.cli.options import Progress, client_config, given_options
from kwire.cli.records import OffsetSpec, compile_format, parse_offsets

__all__ = ["cmd_consume", "add_consume"]

POLL_MS = 500


def add_consume(p: argparse.ArgumentParser) -> None:
    """The consume subcommand's own arguments."""
    p.add_argument("topics", nargs="+", metavar="TOPIC")
    p.add_argument("-p", "--partition", type=int, help="only this partition (of one topic; not with -G)")
    p.add_argument("-G", "--group", metavar="GROUP", help="consume as a member of this group (subscribe; commit "
                                                          "what was printed)")
    p.add_argument("-o", "--offset", dest="offsets", action="append", metavar="SPEC",
                   help="where to start: beginning, end, stored (-G's committed offsets; its default), N, -N (N "
                        "before the end), s@MS (a timestamp); and e@MS to stop each partition before a timestamp")
    p.add_argument("--from", dest="start", help=argparse.SUPPRESS)       # the older name of -o's start
    p.add_argument("-c", "--count", "--max-messages", dest="count", type=int, help="stop after exactly this many "
                                                                                     "records")
    p.add_argument("-e", "--exit-at-end", action="store_true", help="stop at the end of every partition")
    p.add_argument("--timeout", type=float, metavar="SECONDS", help="stop after this long without a record")
    p.add_argument("--format", default="json", choices=["json", "value", "kv"],
                   help="json lines (offset, timestamp, key, value, headers), values, or key<TAB>value "
                        "(typed ones as JSON)")
    p.add_argument("-J", dest="format", action="store_const", const="json", help="JSON lines (as --format json)")
    p.add_argument("-f", "--format-string", metavar="FMT", help="kcat's format string: %%s value, %%k key, %%t "
                   "topic, %%p partition, %%o offset, %%T timestamp, %%h headers, %%S/%%K lengths, %%R binary "
                   "length; \\n \\t \\xNN")
    p.add_argument("-D", "--delimiter", help="with --format value or kv: what ends a record (default \\n)")
    p.add_argument("-K", "--key-delimiter", help="print the key, this, then the value (as --format kv)")
    p.add_argument("-Z", "--null", action="store_true", help="print a null key or value as NULL")
    for side in ("key", "value"):
        p.add_argument(f"--{side}-format", default="raw", choices=["raw", "avro", "protobuf", "json"],
                       help=f"decode {side}s (default raw: the bytes)")
        p.add_argument(f"--{side}-schema", metavar="FILE", help=f"the {side}s' schema, without a registry")
    p.add_argument("--schema-registry", metavar="URL", help="the schema registry (schema.registry.url)")
    p.add_argument("--output", metavar="FILE.parquet", help="write Parquet (typed columns) instead of printing")
    p.add_argument("--progress", action="store_true")
    p.set_defaults(func=cmd_consume)


def _text(b: Optional[bytes]) -> Any:
    """Raw bytes in JSON output: UTF-8 text, else ``{"base64": ...}``."""
    if b is None:
        return None
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(b).decode("ascii")}


def _json_line(topic: str, partition: int, r: Any) -> bytes:
    return (json.dumps({"topic": topic, "partition": partition, "offset": r.offset, "timestamp": r.timestamp,
                        "key": _text(r.key), "value": _text(r.value),
                        "headers": [[k, _text(v)] for k, v in r.headers]}, ensure_ascii=False) + "\n").encode("utf-8")


def _renderer(args: argparse.Namespace) -> Callable[[str, int, Any], bytes]:
    """What one raw record prints as: ``-f``'s format, ``-K``/``--format
    kv``, ``--format value`` (ended by ``-D``), or a JSON line."""
    null = b"NULL" if args.null else b""
    end = "\\n" if args.delimiter is None else args.delimiter
    if args.format_string is not None:
        return compile_format(args.format_string, null)
    if args.key_delimiter is not None or args.format == "kv":
        sep = "\\t" if args.key_delimiter is None else args.key_delimiter
        return compile_format("%k" + sep.replace("%", "%%") + "%s" + end.replace("%", "%%"), null)
    if args.format == "value":
        return compile_format("%s" + end.replace("%", "%%"), null)
    return _json_line


class _Run:
    """A consume run's partitions: where each starts (``-o``), the end it
    stops at with ``-e``, the timestamp it stops before (``e@``), and what
    was printed of it (committed with ``-G``)."""

    def __init__(self, c: Any, spec: OffsetSpec, exit_at_end: bool, group: bool) -> None:
        self.c, self.spec, self.exit_at_end, self.group = c, spec, exit_at_end, group
        self.ends: Dict[Any, int] = {}
        self.stopped: Set[Any] = set()       # reached e@MS
        self.printed: Dict[Any, int] = {}    # the offset after the last record printed
        self.pending: List[Any] = []         # assigned, to be positioned after the poll (paused meanwhile)
        self.placed: Set[Any] = set()        # positioned by -o once in this run

    # -- starting
    def place(self, tps: Sequence[Any]) -> None:
        """Position ``tps`` as ``-o`` says (once per partition and run),
        note their ends for ``-e``."""
        new = [tp for tp in tps if tp not in self.placed]
        self.placed.update(new)
        c, kind, value = self.c, self.spec.kind, self.spec.value
        if new and kind == "beginning":
            c.seek_to_beginning(*new)
        elif new and kind == "end":
            c.seek_to_end(*new)
        elif new and kind == "offset":
            for tp in new:
                c.seek(tp, value)
        elif new and kind == "relative":
            starts, ends = c.beginning_offsets(new), c.end_offsets(new)
            for tp in new:
                c.seek(tp, max(starts[tp], ends[tp] - value))
        elif new and kind == "timestamp":
            for tp, found in c.offsets_for_times({tp: value for tp in new}).items():
                if found is None:
                    c.seek_to_end(tp)
                else:
                    c.seek(tp, found.offset)
        if self.exit_at_end and tps:
            self.ends.update(c.end_offsets(list(tps)))

    def after_poll(self) -> None:
        """Position what the group assigned during the last poll, and let it go."""
        if self.pending:
            pending, self.pending = self.pending, []
            self.place(pending)
            self.c.resume(*pending)

    # -- what was printed
    def cut(self, tp: Any, records: Sequence[Any], left: Optional[int]) -> Sequence[Any]:
        """The records of ``tp`` to print: before ``e@MS`` (the partition
        stops at the first at or after it) and at most ``left``."""
        stop = self.spec.stop_ms
        if stop is not None:
            for i, r in enumerate(records):
                if r.timestamp >= stop:
                    self.stop(tp)
                    records = records[:i]
                    break
        return records if left is None else records[:left]

    def stop(self, tp: Any) -> None:
        self.stopped.add(tp)
        self.c.pause(tp)

    def note(self, tp: Any, next_offset: int) -> None:
        self.printed[tp] = next_offset

    def commit(self, tps: Iterable[Any], wait: bool = False) -> None:
        """With ``-G``: commit what was printed of ``tps``."""
        offsets = {tp: self.printed[tp] for tp in tps if tp in self.printed}
        if not self.group or not offsets:
            return
        if wait:
            self.c.commit(offsets)
        else:
            self.c.commit_async(offsets)

    # -- the end
    def finished(self) -> bool:
        """Every assigned partition stopped at e@MS, or (``-e``) at its end."""
        assigned = self.c.assignment()
        if not assigned or self.pending:
            return False
        return all(tp in self.stopped or (self.exit_at_end and tp in self.ends
                                          and self.c.position(tp) >= self.ends[tp])
                   for tp in assigned)


def _listener(run: _Run) -> Any:
    """-G's rebalance listener: new partitions are paused until the run
    positions them after the poll; revoked ones commit what was printed."""
    from kwire.group import RebalanceListener

    class Listener(RebalanceListener):
        def on_partitions_assigned(self, assigned: List[Any]) -> None:
            if run.spec.kind != "stored" or run.exit_at_end:
                run.c.pause(*assigned)
                run.pending.extend(assigned)

        def on_partitions_revoked(self, revoked: List[Any]) -> None:
            from kwire.errors import KwireError

            try:
                run.commit(revoked, wait=True)
            except KwireError as e:       # the next member reads them again from the last commit
                sys.stderr.write(f"kwire: committing revoked partitions failed: {e}\n")
            run.pending = [tp for tp in run.pending if tp not in revoked]

        def on_partitions_lost(self, lost: List[Any]) -> None:
            run.pending = [tp for tp in run.pending if tp not in lost]

    return Listener()


def cmd_consume(args: argparse.Namespace) -> int:
    """The run the module's doc describes."""
    from kwire.consumer import Consumer
    from kwire.formats import split_options

    try:
        spec, writer = _setup(args)
    except (ValueError, ImportError, OSError) as e:     # a spec, a schema, the registry's options, an extra, a file
        sys.stderr.write(f"kwire: {e}\n")
        return 1
    _, client_options = split_options(given_options(args))
    cfg = {"auto.offset.reset": "earliest", **client_options, "enable.auto.commit": False}
    if args.group:
        cfg["group.id"] = args.group
    progress = Progress(f"consumed from {', '.join(args.topics)}", force=args.progress)
    with writer, Consumer(client_config(args, cfg)) as c:
        run = _Run(c, spec, args.exit_at_end, bool(args.group))
        if args.group:
            c.subscribe(args.topics, listener=_listener(run))
        else:
            tps = _partitions(c, args)
            if not tps:
                return 1
            c.assign(tps)
            run.place(tps)
        try:
            _consume_loop(args, c, writer, run, progress)
        finally:
            run.commit(list(run.printed), wait=True)
    progress.done()
    return 0


def _setup(args: argparse.Namespace) -> Tuple[OffsetSpec, Any]:
    """The run's offsets and its writer; ValueError for what cannot go together."""
    from kwire.formats import split_options

    if args.start is not None and args.offsets:
        raise ValueError("give -o or --from, not both")
    spec = parse_offsets(args.offsets or ([args.start] if args.start else []),
                         default="stored" if args.group else "beginning")
    if spec.kind == "stored" and not args.group:
        raise ValueError("-o stored needs a group (-G GROUP)")
    if args.group and args.partition is not None:
        raise ValueError("-p and -G do not go together: the group assigns the partitions")
    typed = args.output or args.key_format != "raw" or args.value_format != "raw"
    if not typed:
        return spec, _RecordWriter(_renderer(args))
    if args.format_string is not None or args.key_delimiter is not None or len(args.topics) > 1:
        raise ValueError("typed keys and values (--key-format, --value-format, --output) print as --format "
                         "says, one topic at a time")
    format_options, _ = split_options(given_options(args))
    return spec, _TypedWriter(args, format_options)


def _partitions(c: Any, args: argparse.Namespace) -> List[Any]:
    """The partitions a run without a group reads (an error said when a topic has none)."""
    from kwire.consumer import TopicPartition

    if args.partition is not None:
        if len(args.topics) > 1:
            sys.stderr.write("kwire: -p names a partition of one topic\n")
            return []
        return [TopicPartition(args.topics[0], args.partition)]
    meta = c._client.refresh_metadata(args.topics)
    tps = []
    for topic in args.topics:
        parts = meta.partitions_for(topic)
        if not parts:
            sys.stderr.write(f"kwire: topic {topic!r} has no partitions (does it exist?)\n")
            return []
        tps += [TopicPartition(topic, p) for p in parts]
    return tps


def _consume_loop(args: argparse.Namespace, c: Any, writer: Any, run: _Run, progress: Progress) -> None:
    """Poll and write until the count, the end (``-e``, ``e@``),
    ``--timeout`` without a record, or Ctrl-C."""
    done = 0
    stop = [False]
    signal.signal(signal.SIGINT, lambda *_: stop.__setitem__(0, True))
    last = time.monotonic()
    while not stop[0]:
        left = args.count - done if args.count else None
        n, got = writer.write(c, left, run)
        run.after_poll()
        done += n
        progress.add(n)
        now = time.monotonic()
        if n:
            last = now
            run.commit(list(run.printed))
        if (args.count and done >= args.count) or (args.timeout is not None and now - last >= args.timeout):
            break
        if not got and run.finished():
            break


class _Writer:
    """What a consume run writes its polls with (closed after the run)."""

    def __enter__(self) -> "_Writer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        pass


class _RecordWriter(_Writer):
    """The records of each poll, each as ``render`` makes it."""

    def __init__(self, render: Callable[[str, int, Any], bytes]) -> None:
        self.render = render
        self.out = sys.stdout.buffer

    def write(self, c: Any, left: Optional[int], run: _Run) -> Tuple[int, bool]:
        batch = c.poll(POLL_MS)
        n = 0
        for tp, records in batch.items():
            records = run.cut(tp, records, None if left is None else left - n)
            if not records:
                continue
            self.out.write(b"".join(self.render(tp.topic, tp.partition, r) for r in records))
            run.note(tp, records[-1].offset + 1)
            n += len(records)
        self.out.flush()
        return n, bool(batch)


class _TypedWriter(_Writer):
    """Each poll's Arrow batches, keys and values typed by their formats:
    JSON lines (``--format``), or Parquet (``--output``)."""

    def __init__(self, args: argparse.Namespace, format_options: Dict[str, Any]) -> None:
        from kwire.formats import FormatCache
        from kwire.scanning.reader import scan_schema

        topic = args.topics[0]
        if args.schema_registry:
            format_options["schema.registry.url"] = args.schema_registry
        if str(format_options.get("basic.auth.credentials.source", "")).upper() == "SASL_INHERIT":
            format_options.update({k: v for k, v in given_options(args).items() if k.startswith("sasl.")})
        formats = FormatCache(format_options)
        self.key_format = formats.get(_spec(args.key_format, args.key_schema), topic=topic, is_key=True)
        self.value_format = formats.get(_spec(args.value_format, args.value_schema), topic=topic, is_key=False)
        self.schema = scan_schema("ms", topic, self.key_format, self.value_format)
        self.fmt, self.out = args.format, sys.stdout.buffer
        self.parquet: Any = None
        if args.output:
            import pyarrow.parquet as pq

            self.parquet = pq.ParquetWriter(args.output, self.schema)

    def write(self, c: Any, left: Optional[int], run: _Run) -> Tuple[int, bool]:
        from kwire.scanning.reader import with_location

        got = c.poll_columnar(POLL_MS, max_records=left, key_format=self.key_format, value_format=self.value_format)
        n = 0
        for tp, batch in got.items():
            batch = _before_stop(batch, tp, run)
            if not batch.num_rows:
                continue
            run.note(tp, batch.column("offset")[-1].as_py() + 1)
            batch = with_location(batch, tp, self.schema)
            if self.parquet is not None:
                self.parquet.write_batch(batch)
            else:
                self.out.write(b"".join(_typed_lines(self.fmt, batch, self.key_format, self.value_format)))
            n += batch.num_rows
        self.out.flush()
        return n, bool(got)

    def close(self) -> None:
        if self.parquet is not None:
            self.parquet.close()


def _before_stop(batch: Any, tp: Any, run: _Run) -> Any:
    """The rows of ``batch`` before ``e@MS`` (the partition stops at the first at or after it)."""
    stop = run.spec.stop_ms
    if stop is None:
        return batch
    import pyarrow.compute as pc

    late = pc.greater_equal(batch.column("timestamp").cast("int64"), stop)
    first = pc.index(late, True).as_py()
    if first < 0:
        return batch
    run.stop(tp)
    return batch.slice(0, first)


def _spec(kind: str, schema_file: Optional[str]) -> Any:
    """A format spec from ``--*-format`` and ``--*-schema``."""
    if kind == "raw" or not schema_file:
        return kind
    with open(schema_file, encoding="utf-8") as f:
        return (kind, {"schema": f.read()})


def _typed_lines(fmt: str, batch: Any, key_format: Any, value_format: Any) -> Iterable[bytes]:
    """The JSON lines of a typed batch (``--format``): a typed key or value
    as its JSON value, a raw one as text (UTF-8, else ``{"base64": ...}``)."""
    from kwire.formats.jsonvalues import dumps, json_values

    def column(name: str, typed: bool) -> List[Any]:
        col = batch.column(name)
        return json_values(col, display=True) if typed else [_text(v) for v in col.to_pylist()]

    keys, values = column("key", key_format is not None), column("value", value_format is not None)
    if fmt == "value":
        return (dumps(v).encode("utf-8") + b"\n" for v in values)
    if fmt == "kv":
        return (dumps(k).encode("utf-8") + b"\t" + dumps(v).encode("utf-8") + b"\n" for k, v in zip(keys, values))
    stamps = batch.column("timestamp").cast("int64").to_pylist()
    rows = zip(batch.column("topic").to_pylist(), batch.column("partition").to_pylist(),
               batch.column("offset").to_pylist(), stamps, keys, values, batch.column("headers").to_pylist())
    return ((dumps({"topic": t, "partition": p, "offset": o, "timestamp": ts, "key": k, "value": v,
                    "headers": [[h["key"], _text(h["value"])] for h in hs or ()]}) + "\n").encode("utf-8")
            for t, p, o, ts, k, v, hs in rows)
