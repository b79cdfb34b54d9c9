"""Helpers for the client side of the scenarios (they run in the child
interpreter, so they import kwire lazily: the copy under test)."""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any, Callable, Dict, Iterator, List, Optional


class LogCount(logging.Handler):
    """Counts the records of the ``kwire`` loggers (INFO and above) while installed."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.count = 0
        self.messages: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1
        if len(self.messages) < 10:
            self.messages.append(f"{record.levelname} {record.name}: {record.getMessage()}"[:300])


@contextlib.contextmanager
def counting_logs() -> Iterator[LogCount]:
    h = LogCount()
    logger = logging.getLogger("kwire")
    logger.addHandler(h)
    try:
        yield h
    finally:
        logger.removeHandler(h)


def error_info(e: BaseException) -> Dict[str, Any]:
    """An exception as JSON: its type names (with bases), location fields and text."""
    return {
        "type": type(e).__name__,
        "types": [c.__name__ for c in type(e).__mro__],
        "topic": getattr(e, "topic", None),
        "partition": getattr(e, "partition", None),
        "offset": getattr(e, "offset", None),
        "message": str(e)[:300],
    }


def poll_for(consumer: Any, seconds: float, *, timeout_ms: int = 100, columnar: bool = False,
             max_records: Optional[int] = None, until: Optional[Callable[[Dict[int, int]], bool]] = None,
             max_errors: int = 1000) -> Dict[str, Any]:
    """Poll ``consumer`` for ``seconds`` (or until ``until(counts)``, counts
    of records per partition), catching kwire errors. Returns the offsets
    returned per partition as runs (see :func:`offsets`), the errors raised,
    the slowest poll, the number of polls, the most records one poll
    returned, and the kwire log records emitted meanwhile (INFO and above).
    The offsets are kept as runs so that the bookkeeping of millions of
    records does not weigh in the peak RSS of the scenario."""
    with counting_logs() as logs:
        out = _poll_for(consumer, seconds, timeout_ms, columnar, max_records, until, max_errors)
    out["logs"] = logs.count
    out["log_messages"] = logs.messages
    return out


def offsets(result: Dict[str, Any], partition: int) -> List[int]:
    """The offsets :func:`poll_for` saw returned for ``partition``, in order."""
    return [o for first, last in result["runs"].get(str(partition), []) for o in range(first, last + 1)]


def _poll_for(consumer: Any, seconds: float, timeout_ms: int, columnar: bool, max_records: Optional[int],
              until: Optional[Callable[[Dict[int, int]], bool]], max_errors: int) -> Dict[str, Any]:
    from kwire.errors import KwireError

    runs: Dict[int, List[List[int]]] = {}      # per partition: [first, last] of consecutive offsets
    counts: Dict[int, int] = {}
    errors: List[Dict[str, Any]] = []
    slowest = 0.0
    polls = 0
    biggest = 0
    first_record_at = None
    t0 = time.monotonic()
    end = t0 + seconds
    while time.monotonic() < end:
        start = time.monotonic()
        try:
            if columnar:
                got = consumer.poll_columnar(timeout_ms)
                batch = {tp.partition: rb.column("offset").to_pylist() for tp, rb in got.items()}
            elif max_records is not None:
                batch = {tp.partition: [r.offset for r in rs]
                         for tp, rs in consumer.poll(timeout_ms, max_records=max_records).items()}
            else:
                batch = {tp.partition: [r.offset for r in rs] for tp, rs in consumer.poll(timeout_ms).items()}
        except KwireError as e:
            batch = {}
            if len(errors) < max_errors:
                errors.append(error_info(e))
            del e
        took = time.monotonic() - start
        slowest = max(slowest, took)
        polls += 1
        n = sum(len(v) for v in batch.values())
        biggest = max(biggest, n)
        if n and first_record_at is None:
            first_record_at = time.monotonic() - t0
        for p, got_offsets in batch.items():
            counts[p] = counts.get(p, 0) + len(got_offsets)
            r = runs.setdefault(p, [])
            for o in got_offsets:
                if r and r[-1][1] + 1 == o:
                    r[-1][1] = o
                else:
                    r.append([o, o])
        del batch
        if until is not None and until(counts):
            break
    return {"runs": {str(p): v for p, v in runs.items()}, "counts": {str(p): n for p, n in counts.items()},
            "errors": errors, "slowest_poll": slowest, "polls": polls, "biggest_poll": biggest,
            "first_record_at": first_record_at, "elapsed": time.monotonic() - t0}


def timed(fn: Callable[[], Any]) -> Dict[str, Any]:
    """``fn()``'s duration and outcome (its value's repr, or the error)."""
    t0 = time.monotonic()
    try:
        value = fn()
        out: Dict[str, Any] = {"ok": True, "value": repr(value)[:200]}
    except BaseException as e:  # noqa: BLE001 - reported
        out = {"ok": False, "error": error_info(e)}
    out["seconds"] = time.monotonic() - t0
    return out
