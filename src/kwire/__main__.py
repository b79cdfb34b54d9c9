"""The ``kwire`` command."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import List, Optional


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="kwire", description="kwire: a Kafka wire-protocol client")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="encode, decode and re-encode a large set of record batches; print throughput")
    demo.add_argument("--batches", type=int, default=2000)
    demo.add_argument("--records-per-batch", type=int, default=500)
    demo.add_argument("--codecs", default="none,lz4,zstd", help="comma-separated: none,gzip,snappy,lz4,zstd")
    from kwire import cli

    cli.add_commands(sub)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else (logging.INFO if args.command == "demo" else logging.WARNING), format="%(levelname)s %(name)s: %(message)s")
    if args.command == "demo":
        from kwire import demo as _demo

        ok = _demo.run(args.batches, args.records_per_batch, [c.strip() for c in args.codecs.split(",") if c.strip()])
        return 0 if ok else 1
    return cli.run(args)


if __name__ == "__main__":
    sys.exit(main())
