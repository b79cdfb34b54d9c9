"""``kwire produce``: records from stdin, from a file, or whole files, as
kcat takes them (:mod:`kwire.cli.records`): pieces split at ``-D`` (a
newline by default), a key split off at ``-K``, headers from ``-H``, empty
keys and values as null with ``-Z``; or JSON lines with ``--json``."""

from __future__ import annotations

import argparse
import base64
import json
import sys
from typing import Any, BinaryIO, Iterator, List, Optional, Tuple

from kwire.cli.options import Progress, client_config
from kwire.cli.records import RecordReader, parse_headers, split_stream, unescape

__all__ = ["cmd_produce", "add_produce"]


def add_produce(p: argparse.ArgumentParser) -> None:
    """The produce subcommand's own arguments."""
    p.add_argument("topic")
    p.add_argument("files", nargs="*", metavar="FILE",
                   help="send each file whole as one record (with -l: split at the delimiter)")
    p.add_argument("-f", "--file", help="read records from this file instead of stdin (split at the delimiter)")
    p.add_argument("-l", "--split-files", action="store_true", help="split each FILE into records at the delimiter")
    p.add_argument("-p", "--partition", type=int)
    p.add_argument("-D", "--delimiter", default="\\n", help="what ends a record (escapes \\n \\t \\xNN; default \\n)")
    p.add_argument("-K", "--key-separator", help="split each record into key and value at the first separator")
    p.add_argument("-H", "--header", action="append", metavar="NAME=VALUE", help="a header on every record "
                                                                               "(repeatable)")
    p.add_argument("-Z", "--null-empty", action="store_true", help="send an empty key or value as null "
                                                                   "(a tombstone)")
    p.add_argument("--json", action="store_true", help="JSON lines with key, value, headers, partition")
    p.add_argument("-z", "--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    p.add_argument("--acks", default="all", choices=["0", "1", "all"])
    p.add_argument("--progress", action="store_true", help="show progress even when stderr is not a terminal")
    p.set_defaults(func=cmd_produce)


def _pieces(args: argparse.Namespace, delimiter: bytes) -> Iterator[Tuple[str, bytes]]:
    """(where, bytes) of each record's input: whole files, split files, a
    file or stdin split at ``delimiter``."""
    if args.files:
        for name in args.files:
            with open(name, "rb") as f:
                if args.split_files:
                    for n, piece in enumerate(split_stream(f, delimiter), 1):
                        yield f"{name}: record {n}", piece
                else:
                    yield name, f.read()
        return
    source: BinaryIO = open(args.file, "rb") if args.file else sys.stdin.buffer
    try:
        for n, piece in enumerate(split_stream(source, delimiter), 1):
            yield f"record {n}", piece
    finally:
        if args.file:
            source.close()


def cmd_produce(args: argparse.Namespace) -> int:
    """Each piece of the input becomes a record (see the module's doc)."""
    from kwire.errors import KwireError
    from kwire.producer import Producer

    try:
        delimiter = unescape(args.delimiter)
        reader = RecordReader(unescape(args.key_separator) if args.key_separator else None,
                              parse_headers(args.header), args.null_empty)
    except ValueError as e:
        sys.stderr.write(f"kwire: {e}\n")
        return 2
    if not delimiter:
        sys.stderr.write("kwire: -D: the delimiter is empty\n")
        return 2
    progress = Progress(f"produced to {args.topic}", force=args.progress)
    failures: List[BaseException] = []
    with Producer(client_config(args), compression_type=args.compression, acks=args.acks) as p:
        for where, piece in _pieces(args, delimiter):
            if args.json:
                try:
                    key, value, headers, partition = _json_record(piece)
                except (ValueError, TypeError, AttributeError) as e:   # binascii.Error is a ValueError
                    sys.stderr.write(f"kwire: {where}: not a JSON record: {e}\n")
                    return 2
            else:
                if not piece and not args.null_empty:
                    continue
                (key, value), headers, partition = reader.record(piece), reader.headers, None
            try:
                fut = p.send(args.topic, value, key=key, headers=headers,
                             partition=args.partition if partition is None else partition)
            except (KwireError, TypeError, ValueError) as e:    # a partition it lacks, a record too large...
                sys.stderr.write(f"kwire: {where}: {e}\n")
                return 1                                        # what went before is flushed on the way out
            fut.add_callback(lambda meta, err: failures.append(err) if err else None)
            progress.add()
        p.flush()
    progress.done()
    if failures:
        sys.stderr.write(f"kwire: {len(failures)} record(s) failed: {failures[0]}\n")
        return 1
    return 0


def _json_record(line: bytes) -> Tuple[Optional[bytes], Optional[bytes], Any, Optional[int]]:
    """(key, value, headers, partition) of a JSON line; strings are UTF-8,
    or base64 when the record says ``"encoding": "base64"``."""
    rec = json.loads(line)
    b64 = rec.get("encoding", "utf-8") == "base64"

    def conv(x: Any) -> Optional[bytes]:
        if x is None:
            return None
        return base64.b64decode(x, validate=True) if b64 else str(x).encode("utf-8")

    headers = [(k, conv(v)) for k, v in (rec.get("headers") or {}).items()] or None
    return conv(rec.get("key")), conv(rec.get("value")), headers, rec.get("partition")
