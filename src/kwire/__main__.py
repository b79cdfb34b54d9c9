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
    from kwire import cli, demo as _demo

    demo = sub.add_parser("demo", help="produce records to a local Tansu broker and read them with Spark "
                                       "through format(\"kwire\") (needs kwire[spark,broker])")
    demo.add_argument("--records", type=int, default=_demo.DEFAULT_RECORDS)
    demo.add_argument("--partitions", type=int, default=_demo.DEFAULT_PARTITIONS)

    cli.add_commands(sub)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if args.command == "demo":
        return 0 if _demo.run(args.records, args.partitions) else 1
    return cli.run(args)


if __name__ == "__main__":
    sys.exit(main())
