"""What every ``kwire`` client subcommand shares: its client options
(``--command-config``, ``-b``, ``-X``), its rows (tab-separated, or JSON
lines with ``--json``) and its progress on stderr."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Dict, Iterable, List, Optional, TextIO

__all__ = ["client_config", "given_options", "name_value", "print_rows", "Progress"]


def _dotted(name: str) -> str:
    return name.strip().lower().replace("_", ".").replace("-", ".")


def given_options(args: argparse.Namespace) -> Dict[str, Any]:
    """The options given: ``--command-config``'s, ``-b``, ``-X``'s (dotted names)."""
    from kwire.sasl.jaas import read_properties

    given = read_properties(args.command_config) if getattr(args, "command_config", None) else {}
    cfg: Dict[str, Any] = {_dotted(k): v for k, v in given.items()}
    if args.bootstrap_servers or "bootstrap.servers" not in cfg:
        cfg["bootstrap.servers"] = args.bootstrap_servers or os.environ.get("KWIRE_BOOTSTRAP", "127.0.0.1:9092")
    for item in args.X or []:
        name, value = name_value(item, "kwire: -X")
        cfg[_dotted(name)] = value
    return cfg


def client_config(args: argparse.Namespace, given: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """The client options (``given``, default :func:`given_options`), with
    Kafka's Java login options turned into kwire's."""
    from kwire.sasl.login import translate_login

    return translate_login(given_options(args) if given is None else given)


def name_value(item: str, where: str) -> "tuple[str, str]":
    """``NAME=VALUE`` split at the first ``=``; anything else stops the
    command, saying ``where`` (``kwire configs alter: --set``)."""
    name, sep, value = item.partition("=")
    if not sep or not name.strip():
        raise SystemExit(f"{where} {item!r}: expected NAME=VALUE")
    return name.strip(), value


def print_rows(args: argparse.Namespace, header: List[str], rows: Iterable[Dict[str, Any]]) -> None:
    """Rows as JSON lines (``--json``) or tab-separated under ``header`` (their keys, in order)."""
    if not args.json:
        print("\t".join(header))
    for row in rows:
        if args.json:
            print(json.dumps(row))
        else:
            print("\t".join("-" if row[k] is None else str(row[k]) for k in header))


class Progress:
    """Counts on stderr, at most a few times a second, when stderr is a terminal
    (or always with ``force``)."""

    def __init__(self, what: str, stream: Optional[TextIO] = None, force: bool = False) -> None:
        self.what = what
        self.stream = stream = stream if stream is not None else sys.stderr   # the current one, not import time's
        self.live = force or stream.isatty()
        self.count = 0
        self.start = time.monotonic()
        self._last = 0.0

    def add(self, n: int = 1) -> None:
        self.count += n
        now = time.monotonic()
        if self.live and now - self._last > 0.25:
            self._last = now
            rate = self.count / max(now - self.start, 1e-9)
            self.stream.write(f"\r{self.what}: {self.count:,} ({rate:,.0f}/s)")
            self.stream.flush()

    def done(self) -> None:
        secs = time.monotonic() - self.start
        rate = self.count / secs if secs > 0 else 0.0
        self.stream.write(f"{chr(13) if self.live else ''}{self.what}: {self.count:,} in {secs:.2f} s ({rate:,.0f}/s)\n")
        self.stream.flush()
