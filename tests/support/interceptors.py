"""Interceptors for the interceptor tests (kwire.interceptors), importable
by name (``support.interceptors:Stamping``) as ``interceptor_classes``
takes them."""

from __future__ import annotations

import threading
from typing import Any, Dict, List, Optional, Tuple

#: Every instance made from a class or name, in order (the tests find theirs here).
MADE: List[Any] = []


class Recorder:
    """Records every call; ``configure`` keeps the client's options."""

    def __init__(self) -> None:
        self.calls: List[Tuple[str, Any]] = []
        self.options: Optional[Dict[str, Any]] = None
        self.closed = False
        self._lock = threading.Lock()
        MADE.append(self)

    def _note(self, name: str, what: Any) -> None:
        with self._lock:
            self.calls.append((name, what))

    def named(self, name: str) -> List[Any]:
        with self._lock:
            return [what for n, what in self.calls if n == name]

    def configure(self, options: Dict[str, Any]) -> None:
        self.options = options

    def close(self) -> None:
        self.closed = True


class Stamping(Recorder):
    """A producer interceptor: a header on every record, the value upper-cased."""

    def on_send(self, record: Any) -> Any:
        self._note("on_send", record)
        headers = list(record.headers or ()) + [("stamped", b"1")]
        return record._replace(value=record.value.upper(), headers=headers)

    def on_acknowledgement(self, metadata: Any, exception: Optional[BaseException]) -> None:
        self._note("on_acknowledgement", (metadata, exception))


class Filtering(Recorder):
    """A consumer interceptor: drops the records with odd offsets; on
    columnar polls, keeps the first row of each batch."""

    def on_consume(self, records: Dict[Any, List[Any]]) -> Dict[Any, List[Any]]:
        self._note("on_consume", sum(len(v) for v in records.values()))
        return {tp: [r for r in rs if r.offset % 2 == 0] for tp, rs in records.items()}

    def on_consume_columnar(self, batches: Dict[Any, Any]) -> Dict[Any, Any]:
        self._note("on_consume_columnar", sum(b.num_rows for b in batches.values()))
        return {tp: b.slice(0, 1) for tp, b in batches.items()}

    def on_commit(self, offsets: Dict[Any, Any]) -> None:
        self._note("on_commit", dict(offsets))


class Raising:
    """Raises in every method (the client logs it and goes on)."""

    def __init__(self) -> None:
        self.raised = 0

    def _raise(self, *args: Any) -> Any:
        self.raised += 1
        raise RuntimeError("interceptor failure")

    on_send = on_acknowledgement = on_consume = on_consume_columnar = on_commit = close = _raise
