"""W3C trace context in Kafka record headers: OpenTelemetry's getter and
setter over kwire's headers (a sequence of ``(str, bytes)`` pairs), as
OpenTelemetry's instrumentation of Java's client reads and writes them
(each field a header of that name, its value the field's text as UTF-8)."""

from __future__ import annotations

from typing import Any, Iterable, List, Optional, Sequence, Tuple

try:
    from opentelemetry.propagators.textmap import Getter, Setter
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("kwire's tracing needs opentelemetry-api: pip install 'kwire[otel]'") from e

__all__ = ["GETTER", "SETTER", "without_trace_context", "TRACE_HEADERS"]

TRACE_HEADERS = ("traceparent", "tracestate", "baggage")


class _HeaderGetter(Getter):
    def get(self, carrier: Sequence[Tuple[str, Optional[bytes]]], key: str) -> Optional[List[str]]:
        # the last one wins, as Java's instrumentation reads lastHeader()
        for k, v in reversed(list(carrier)):
            if k == key and v is not None:
                try:
                    return [v.decode("utf-8") if isinstance(v, (bytes, bytearray, memoryview)) else str(v)]
                except UnicodeDecodeError:
                    return None
        return None

    def keys(self, carrier: Sequence[Tuple[str, Optional[bytes]]]) -> List[str]:
        return [k for k, _ in carrier]


class _HeaderSetter(Setter):
    def set(self, carrier: List[Tuple[str, bytes]], key: str, value: str) -> None:
        carrier.append((key, value.encode("utf-8")))


GETTER = _HeaderGetter()
SETTER = _HeaderSetter()


def without_trace_context(headers: Optional[Iterable[Any]]) -> List[Any]:
    """``headers`` as a new list, less any trace context fields (a new one replaces them)."""
    return [h for h in (headers or ()) if h[0] not in TRACE_HEADERS]
