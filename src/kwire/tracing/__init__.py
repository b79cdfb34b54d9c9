"""Tracing, built in: OpenTelemetry spans for send (until the broker's
acknowledgement), poll and process, and the rebalance listener's phases,
with the trace context carried in record headers as W3C ``traceparent``
(and ``tracestate``), as OpenTelemetry's instrumentation of Java's client
carries it. ``pip install 'kwire[otel]'``.

Switched on per client with ``tracer_provider``: ``True`` for
OpenTelemetry's global provider, or a ``TracerProvider``. Without it
nothing here runs: the producer's ``send`` stays the compiled one and a
poll takes no extra step, so tracing off costs nothing.

- **send** (``send {topic}``, kind PRODUCER): started by ``send()``, its
  context injected into the record's headers (replacing a
  ``traceparent`` already there), ended when the broker acknowledges the
  record (``messaging.destination.partition.id``, ``messaging.kafka.offset``)
  or it fails (``error.type``, the exception recorded).
- **poll** (``poll {topic}``, kind CLIENT, operation ``receive``): one per
  poll that returned records, with ``messaging.batch.message_count`` and a
  link to each record's producer context (at most :data:`MAX_LINKS`).
- **process** (``process {topic}``, kind CONSUMER): :func:`process_span`
  around the application's handling of one record, a child of the
  record's producer context, so that the trace goes on from the producer
  to the consumer's work, whichever client produced the record (kwire's,
  Java's with OpenTelemetry's instrumentation, any writer of
  ``traceparent``).
- **rebalance** (``rebalance assign|revoke|lose``, kind INTERNAL): around
  each call of the rebalance listener, with the group and the partitions' count.

Attributes follow OpenTelemetry's messaging semantic conventions for
Kafka (``messaging.system`` ``kafka``, ``messaging.destination.name``,
``messaging.operation.type`` and ``.name``, ``messaging.client.id``,
``messaging.consumer.group.name``).
"""

from __future__ import annotations

from kwire.tracing.spans import MAX_LINKS, ConsumerTracing, ProducerTracing, process_span, tracing_for

__all__ = ["process_span", "ProducerTracing", "ConsumerTracing", "tracing_for", "MAX_LINKS"]
