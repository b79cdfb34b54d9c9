"""The spans of :mod:`kwire.tracing` (see its docstring)."""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

try:
    from opentelemetry import trace
    from opentelemetry.propagate import extract, inject
    from opentelemetry.trace import Link, SpanKind, Status, StatusCode
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("kwire's tracing (tracer_provider) needs opentelemetry-api: pip install 'kwire[otel]'") from e

from kwire.tracing.headers import GETTER, SETTER, without_trace_context

__all__ = ["ProducerTracing", "ConsumerTracing", "process_span", "tracing_for", "MAX_LINKS"]

MAX_LINKS = 128          # a poll span's links to its records' producer contexts, at most
_SCOPE = "kwire"


def _tracer(provider: Any) -> Any:
    from kwire import __version__

    if provider is True:
        return trace.get_tracer(_SCOPE, __version__)
    return provider.get_tracer(_SCOPE, __version__)


def tracing_for(cfg: Mapping[str, Any], kind: str) -> Any:
    """The tracing of a ``kind`` ("producer" or "consumer") client made with ``cfg``; None when off."""
    provider = cfg.get("tracer_provider")
    if provider is None or provider is False:
        return None
    return (ProducerTracing if kind == "producer" else ConsumerTracing)(_tracer(provider), cfg)


def _base(cfg: Mapping[str, Any], topic: Optional[str], op_type: str, op_name: str) -> Dict[str, Any]:
    attrs: Dict[str, Any] = {"messaging.system": "kafka", "messaging.operation.type": op_type,
                             "messaging.operation.name": op_name, "messaging.client.id": cfg.get("client_id", "kwire")}
    if topic is not None:
        attrs["messaging.destination.name"] = topic
    return attrs


class ProducerTracing:
    """A producer's send spans."""

    def __init__(self, tracer: Any, cfg: Mapping[str, Any]) -> None:
        self.tracer = tracer
        self.cfg = cfg

    def send(self, record: Any, do_send: Callable[[Any], Any]) -> Any:
        """Send ``record`` (a ProducerRecord) through ``do_send`` inside a send span ended at its
        acknowledgement; its headers carry the span's context."""
        span, record = self.begin(record)
        try:
            fut = do_send(record)
        except BaseException as e:
            self.failed(span, e)
            raise
        self.queued(span, fut)
        return fut

    def begin(self, record: Any) -> Tuple[Any, Any]:
        """The send span of ``record`` (started), and the record with its context in the headers."""
        attrs = _base(self.cfg, record.topic, "send", "send")
        if record.partition is not None:
            attrs["messaging.destination.partition.id"] = str(record.partition)
        span = self.tracer.start_span(f"send {record.topic}", kind=SpanKind.PRODUCER, attributes=attrs)
        headers = without_trace_context(record.headers)
        inject(headers, context=trace.set_span_in_context(span), setter=SETTER)
        return span, record._replace(headers=headers)

    @staticmethod
    def queued(span: Any, fut: Any) -> None:
        """The record of ``span`` was queued as ``fut``: the span ends with its acknowledgement."""
        fut.add_callback(lambda metadata, error: _acknowledged(span, metadata, error))

    @staticmethod
    def failed(span: Any, error: BaseException) -> None:
        """The record of ``span`` was not queued."""
        _failed(span, error)
        span.end()


def _failed(span: Any, error: BaseException) -> None:
    span.set_attribute("error.type", type(error).__name__)
    span.record_exception(error)
    span.set_status(Status(StatusCode.ERROR, str(error)))


def _acknowledged(span: Any, metadata: Any, error: Optional[BaseException]) -> None:
    if error is not None:
        _failed(span, error)
    else:
        span.set_attribute("messaging.destination.partition.id", str(metadata.partition))
        span.set_attribute("messaging.kafka.offset", metadata.offset)
    span.end()


class ConsumerTracing:
    """A consumer's poll and rebalance spans."""

    def __init__(self, tracer: Any, cfg: Mapping[str, Any]) -> None:
        self.tracer = tracer
        self.cfg = cfg
        self.group = cfg.get("group_id")

    def polled(self, records: Mapping[Any, Sequence[Any]], began_ns: int) -> None:
        """A poll (begun at ``began_ns``, ``time.time_ns()``) returned ``records`` ({tp: [Record]})."""
        count = sum(len(r) for r in records.values())
        if not count:
            return
        topics = {tp[0] for tp in records}
        topic = next(iter(topics)) if len(topics) == 1 else None
        attrs = _base(self.cfg, topic, "receive", "poll")
        attrs["messaging.batch.message_count"] = count
        if self.group:
            attrs["messaging.consumer.group.name"] = self.group
        links: List[Any] = []
        for recs in records.values():
            for r in recs:
                if len(links) >= MAX_LINKS:
                    break
                ctx = trace.get_current_span(extract(r.headers or (), getter=GETTER)).get_span_context()
                if ctx.is_valid:
                    links.append(Link(ctx))
        span = self.tracer.start_span(f"poll {topic}" if topic else "poll", kind=SpanKind.CLIENT, attributes=attrs,
                                      links=links, start_time=began_ns)
        span.end()

    @contextlib.contextmanager
    def rebalance(self, phase: str, partitions: int) -> Iterator[None]:
        """A ``rebalance {phase}`` span around the listener's call for ``partitions`` partitions."""
        attrs = {"messaging.system": "kafka", "messaging.consumer.group.name": self.group or "",
                 "messaging.client.id": self.cfg.get("client_id", "kwire"), "kwire.rebalance.partitions": partitions}
        span = self.tracer.start_span(f"rebalance {phase}", kind=SpanKind.INTERNAL, attributes=attrs)
        try:
            yield
        except Exception as e:          # (a cancelled or closed rebalance step only ends the span)
            _failed(span, e)
            raise
        finally:
            span.end()


@contextlib.contextmanager
def process_span(record: Any, tracer_provider: Any = True, *, topic: Optional[str] = None,
                 partition: Optional[int] = None, group_id: Optional[str] = None,
                 client_id: str = "kwire") -> Iterator[Any]:
    """A ``process {topic}`` span (kind CONSUMER) around the handling of
    ``record``, the child of the context its headers carry, made current
    inside the block (spans the handler starts are its children).
    ``record``: a ConsumerRecord (kwire.aio's, which names its topic and
    partition), or a Record of ``poll()``'s ``{tp: [Record]}`` with
    ``topic`` and ``partition`` given. ``tracer_provider``: True for
    OpenTelemetry's global provider, or a provider. An exception is
    recorded on it and goes on."""
    topic = topic if topic is not None else getattr(record, "topic", None)
    partition = partition if partition is not None else getattr(record, "partition", None)
    if topic is None or partition is None:
        raise TypeError("process_span: this record does not name its topic and partition: pass topic= and "
                        "partition= (poll()'s key of its list)")
    attrs = _base({"client_id": client_id}, topic, "process", "process")
    attrs["messaging.destination.partition.id"] = str(partition)
    attrs["messaging.kafka.offset"] = record.offset
    if group_id:
        attrs["messaging.consumer.group.name"] = group_id
    parent = extract(record.headers or (), getter=GETTER)
    tracer = _tracer(tracer_provider)
    with tracer.start_as_current_span(f"process {topic}", context=parent, kind=SpanKind.CONSUMER,
                                      attributes=attrs, record_exception=True, set_status_on_exception=True) as span:
        yield span
