"""``kwire share consume``: a share group member (KIP-932) printing the
records the group hands it, as JSON lines with their delivery count (or the
values, ``--format value``), acknowledging each as it is printed: ACCEPT,
or RELEASE for a record delivered fewer than ``--release-below`` times
(a record given back to the group, for trying a consumer's retries);
``-c N`` stops after N records, ``--timeout`` after that many seconds
without one. Ctrl-C closes the member cleanly: what was printed is
accepted, the rest released.

``kwire share dead-letters TOPIC -G GROUP``: the group's dead letters
(KIP-1191, share.version 2) go to ``TOPIC``, created (``--partitions``)
or given the config a dead-letter topic needs; ``--no-copy`` writes only
their context headers (:mod:`kwire.share.dead_letters`)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from kwire.cli.consume import _text
from kwire.cli.options import Progress, client_config

__all__ = ["add_share", "cmd_share"]


def add_share(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["consume", "dead-letters"])
    p.add_argument("topics", nargs="+", metavar="TOPIC")
    p.add_argument("-G", "--group", required=True, metavar="GROUP", help="the share group")
    p.add_argument("-c", "--count", type=int, help="stop after this many records")
    p.add_argument("--timeout", type=float, help="stop after this many seconds without a record")
    p.add_argument("--format", choices=["json", "value"], default="json")
    p.add_argument("--release-below", type=int, default=0, metavar="N",
                   help="release (instead of accept) a record delivered fewer than N times")
    p.add_argument("--no-copy", action="store_true",
                   help="dead-letters: write only the context headers, not the record")
    p.add_argument("--partitions", type=int, default=1, help="dead-letters: the topic's partitions, if created")


def _line(r: Any, fmt: str) -> bytes:
    if fmt == "value":
        return (r.value or b"") + b"\n"
    return (json.dumps({"topic": r.topic, "partition": r.partition, "offset": r.offset,
                        "delivery_count": r.delivery_count, "timestamp": r.timestamp, "key": _text(r.key),
                        "value": _text(r.value), "headers": [[k, _text(v)] for k, v in r.headers]},
                       ensure_ascii=False) + "\n").encode("utf-8")


def cmd_share(args: argparse.Namespace) -> int:
    if args.action == "dead-letters":
        return _dead_letters(args)
    from kwire.share import AcknowledgeType, ShareConsumer

    cfg = {**client_config(args), "group_id": args.group, "share_acknowledgement_mode": "explicit"}
    out = sys.stdout.buffer
    progress = Progress("records")
    printed = 0
    last = time.monotonic()
    with ShareConsumer(cfg) as c:
        c.subscribe(args.topics)
        try:
            while args.count is None or printed < args.count:
                if args.timeout is not None and time.monotonic() - last > args.timeout:
                    break
                records = [r for rs in c.poll(500).values() for r in rs]
                shown = printed
                for r in records:
                    if args.count is not None and printed >= args.count:
                        c.acknowledge(r, AcknowledgeType.RELEASE)      # not printed: back to the group
                        continue
                    out.write(_line(r, args.format))
                    printed += 1
                    c.acknowledge(r, AcknowledgeType.RELEASE if r.delivery_count < args.release_below
                                  else AcknowledgeType.ACCEPT)
                if records:
                    out.flush()
                    last = time.monotonic()
                    progress.add(printed - shown)
            c.commit_sync()
        except KeyboardInterrupt:
            pass          # close sends the acknowledgements made; what was not printed is released
    progress.done()
    return 0


def _dead_letters(args: argparse.Namespace) -> int:
    from kwire.admin import Admin
    from kwire.share.dead_letters import set_dead_letter_topic

    if len(args.topics) != 1:
        raise SystemExit("kwire share dead-letters: name one topic, the group's dead-letter topic")
    topic = args.topics[0]
    with Admin(client_config(args)) as a:
        created = set_dead_letter_topic(a, args.group, topic, copy_records=not args.no_copy,
                                        partitions=args.partitions)
    print(f"share group {args.group}: dead letters go to {topic} ({'created' if created else 'existing'} topic; "
          f"{'context headers only' if args.no_copy else 'records copied'})", file=sys.stderr)
    return 0
