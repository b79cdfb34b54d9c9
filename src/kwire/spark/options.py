"""The options of the ``kwire`` data source: the names and meanings of
Spark's Kafka source and sink (``spark-sql-kafka-0-10``), parsed and checked
in one place, on the driver, before any task runs.

Option names are case-insensitive, as in Spark. ``kafka.*`` options go to
kwire's consumer (reads) or producer (writes) with the prefix removed; the
keys Spark refuses are refused here with Spark's reasons.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Tuple

from kwire.config import CONSUMER, PRODUCER, ConfigError, resolve
from kwire.spark.errors import SparkOptionError

__all__ = [
    "OffsetSpec",
    "Subscription",
    "SourceOptions",
    "SinkOptions",
    "parse_source_options",
    "parse_sink_options",
    "EARLIEST",
    "LATEST",
]

log = logging.getLogger(__name__)

#: Spark's markers in per-partition offset JSON.
EARLIEST = -2
LATEST = -1

TP = Tuple[str, int]

#: What the executors' consumers use unless a ``kafka.*`` option says
#: otherwise: a short broker wait (executors read ranges that exist, so a
#: wait only happens on the prefetch past a range's end) and fetches large
#: enough that each Arrow batch handed to Spark carries many rows.
EXECUTOR_DEFAULTS: Dict[str, Any] = {
    "fetch.max.wait.ms": 10,
    "max.partition.fetch.bytes": 8 * 1024 * 1024,
}

# Spark's reasons for the kafka.* keys its source refuses.
_REFUSED_SOURCE_KEYS = {
    "auto.offset.reset": (
        "Kafka option 'auto.offset.reset' is not supported. Instead set the source option "
        "'startingOffsets' to 'earliest' or 'latest' to specify where to start. Structured Streaming "
        "manages which offsets are consumed internally, rather than relying on the consumer to do it."),
    "key.deserializer": (
        "Kafka option 'key.deserializer' is not supported as keys are deserialized as byte arrays. "
        "Use DataFrame operations to explicitly deserialize the keys."),
    "value.deserializer": (
        "Kafka option 'value.deserializer' is not supported as values are deserialized as byte arrays. "
        "Use DataFrame operations to explicitly deserialize the values."),
    "enable.auto.commit": "Kafka option 'enable.auto.commit' is not supported",
    "interceptor.classes": "Kafka option 'interceptor.classes' is not supported",
}
_REFUSED_SINK_KEYS = {
    "key.serializer": "Kafka option 'key.serializer' is not supported as keys are serialized as byte arrays.",
    "value.serializer": "Kafka option 'value.serializer' is not supported as values are serialized as byte arrays.",
}
_STRATEGIES = ("assign", "subscribe", "subscribepattern")
_STRATEGY_NAMES = "subscribe, subscribePattern, assign"
_OFFSETS_EXAMPLE = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
_PARTITIONS_EXAMPLE = '{"topicA":[0,1],"topicB":[0,1]}'
_STREAM_ONLY = ("maxoffsetspertrigger",)


@dataclass(frozen=True)
class OffsetSpec:
    """Where a read starts or ends, before resolution against the broker.

    ``kind`` is ``earliest``, ``latest``, ``offsets`` (``offsets`` maps each
    partition to an offset, -2 earliest, -1 latest), ``timestamp`` (one
    timestamp for every partition) or ``timestamps`` (``offsets`` maps each
    partition to a timestamp). ``no_match`` is what a starting timestamp with
    no record at or after it resolves to: ``error`` or ``latest``.
    """

    kind: str
    offsets: Optional[Dict[TP, int]] = None
    timestamp: Optional[int] = None
    no_match: str = "error"


@dataclass(frozen=True)
class Subscription:
    """Which partitions to read: ``assign`` (``partitions``), ``subscribe``
    (``topics``) or ``subscribePattern`` (``pattern``, matched against the
    whole topic name as Java's ``Pattern.matches`` does)."""

    kind: str
    topics: Tuple[str, ...] = ()
    pattern: Optional[str] = None
    partitions: Tuple[TP, ...] = ()

    def matches(self, topic: str) -> bool:
        if self.kind == "subscribe":
            return topic in self.topics
        if self.kind == "subscribePattern":
            return re.fullmatch(self.pattern or "", topic) is not None
        return any(t == topic for t, _ in self.partitions)


@dataclass(frozen=True)
class SourceOptions:
    subscription: Subscription
    starting: OffsetSpec
    ending: Optional[OffsetSpec]           # None for streaming queries
    fail_on_data_loss: bool = True
    min_partitions: Optional[int] = None
    max_records_per_partition: Optional[int] = None
    include_headers: bool = False
    max_offsets_per_trigger: Optional[int] = None
    poll_timeout_ms: int = 120_000
    kafka: Dict[str, Any] = field(default_factory=dict)

    def consumer_config(self, role: str) -> Dict[str, Any]:
        """kwire consumer options for the ``driver`` or an ``executor``:
        the ``kafka.*`` options over kwire's defaults for that role; never a
        consumer group, never an automatic reset (the planner says where);
        no topic auto-creation unless ``kafka.allow.auto.create.topics``
        asks for it (a reader must find a deleted topic gone, not made
        anew and empty)."""
        cfg: Dict[str, Any] = dict(EXECUTOR_DEFAULTS) if role == "executor" else {"max.partition.fetch.bytes": 1}
        cfg.update(self.kafka)
        cfg["auto.offset.reset"] = "none"
        cfg["enable.auto.commit"] = False
        cfg.setdefault("client.id", f"kwire-spark-{role}")
        cfg.setdefault("allow.auto.create.topics", False)
        return cfg


@dataclass(frozen=True)
class SinkOptions:
    topic: Optional[str]
    kafka: Dict[str, Any] = field(default_factory=dict)

    def producer_config(self) -> Dict[str, Any]:
        cfg: Dict[str, Any] = dict(self.kafka)
        cfg.setdefault("client.id", "kwire-spark-writer")
        return cfg


# ---------------------------------------------------------------- parsing
def _lower(options: Mapping[str, Any]) -> Dict[str, str]:
    return {str(k).lower(): ("" if v is None else str(v)) for k, v in options.items()}


def _bool(opts: Dict[str, str], name: str, default: bool, shown: str) -> bool:
    raw = opts.get(name)
    if raw is None:
        return default
    s = raw.strip().lower()
    if s not in ("true", "false"):
        raise SparkOptionError(f"option '{shown}' must be true or false, got {raw!r}")
    return s == "true"


def _positive(opts: Dict[str, str], name: str, shown: str) -> Optional[int]:
    raw = opts.get(name)
    if raw is None:
        return None
    try:
        n = int(raw.strip())
    except ValueError:
        raise SparkOptionError(f"option '{shown}' must be an integer, got {raw!r}") from None
    if n <= 0:
        raise SparkOptionError(f"{shown} must be positive")
    return n


def _json_object(raw: str, example: str) -> Dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise SparkOptionError(f"Expected e.g. {example}, got {raw}")
    return value


def parse_partitions(raw: str) -> Tuple[TP, ...]:
    """``{"topicA":[0,1],"topicB":[2,4]}`` -> ((topicA, 0), ...)."""
    obj = _json_object(raw, _PARTITIONS_EXAMPLE)
    out = []
    for topic, parts in obj.items():
        if not isinstance(parts, list) or not all(isinstance(p, int) and not isinstance(p, bool) for p in parts):
            raise SparkOptionError(f"Expected e.g. {_PARTITIONS_EXAMPLE}, got {raw}")
        out.extend((topic, p) for p in parts)
    return tuple(out)


def parse_partition_numbers(raw: str) -> Dict[TP, int]:
    """``{"topicA":{"0":23,"1":-1}}`` -> {(topicA, 0): 23, (topicA, 1): -1}
    (offsets, or timestamps for the ``*ByTimestamp`` options)."""
    obj = _json_object(raw, _OFFSETS_EXAMPLE)
    out: Dict[TP, int] = {}
    for topic, parts in obj.items():
        if not isinstance(parts, dict):
            raise SparkOptionError(f"Expected e.g. {_OFFSETS_EXAMPLE}, got {raw}")
        for p, n in parts.items():
            try:
                part = int(p)
            except ValueError:
                raise SparkOptionError(f"Expected e.g. {_OFFSETS_EXAMPLE}, got {raw}") from None
            if not isinstance(n, int) or isinstance(n, bool):
                raise SparkOptionError(f"Expected e.g. {_OFFSETS_EXAMPLE}, got {raw}")
            out[(topic, part)] = n
    return out


def _subscription(opts: Dict[str, str]) -> Subscription:
    given = [k for k in _STRATEGIES if k in opts]
    if not given:
        raise SparkOptionError(f"One of the following options must be specified for Kafka source: {_STRATEGY_NAMES}. "
                               "See the docs for more details.")
    if len(given) > 1:
        raise SparkOptionError(f"Only one of the following options can be specified for Kafka source: "
                               f"{_STRATEGY_NAMES}. See the docs for more details.")
    kind, value = given[0], opts[given[0]]
    if kind == "assign":
        if not value.strip().startswith("{"):
            raise SparkOptionError(f"No topicpartitions to assign as specified value for option 'assign' is '{value}'")
        return Subscription("assign", partitions=parse_partitions(value))
    if kind == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise SparkOptionError(f"No topics to subscribe to as specified value for option 'subscribe' is '{value}'")
        return Subscription("subscribe", topics=topics)
    pattern = value.strip()
    if not pattern:
        raise SparkOptionError(f"Pattern to subscribe is empty as specified value for option 'subscribePattern' is '{value}'")
    try:
        re.compile(pattern)
    except re.error as e:
        raise SparkOptionError(f"option 'subscribePattern' is not a valid pattern: {e}") from None
    return Subscription("subscribePattern", pattern=pattern)


def _offset_spec(opts: Dict[str, str], prefix: str, default: str) -> OffsetSpec:
    """``startingTimestamp`` over ``startingOffsetsByTimestamp`` over
    ``startingOffsets`` (likewise for ``ending``), as Spark prefers them."""
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise SparkOptionError(f"option 'startingOffsetsByTimestampStrategy' must be error or latest, got {strategy!r}")
    if f"{prefix}timestamp" in opts:
        raw = opts[f"{prefix}timestamp"].strip()
        try:
            return OffsetSpec("timestamp", timestamp=int(raw), no_match=strategy)
        except ValueError:
            raise SparkOptionError(f"Expected a single long value, got {raw}") from None
    if f"{prefix}offsetsbytimestamp" in opts:
        return OffsetSpec("timestamps", offsets=parse_partition_numbers(opts[f"{prefix}offsetsbytimestamp"]),
                          no_match=strategy)
    raw = opts.get(f"{prefix}offsets")
    if raw is None:
        return OffsetSpec(default)
    s = raw.strip()
    if s.lower() in ("earliest", "latest"):
        return OffsetSpec(s.lower())
    return OffsetSpec("offsets", offsets=parse_partition_numbers(s))


def _kafka_params(opts: Dict[str, str], refused: Mapping[str, str], table: Mapping[str, Any], what: str) -> Dict[str, Any]:
    params = {k[len("kafka."):]: v for k, v in opts.items() if k.startswith("kafka.")}
    for key, reason in refused.items():
        if key in params:
            raise SparkOptionError(reason)
    if "bootstrap.servers" not in params:
        raise SparkOptionError(f"Option 'kafka.bootstrap.servers' must be specified for configuring Kafka {what}")
    try:
        resolve(table, params, what=f"kafka.* {what}")
    except ConfigError as e:
        raise SparkOptionError(f"{e} (from a 'kafka.' option)") from None
    return params


def parse_source_options(options: Mapping[str, Any], streaming: bool) -> SourceOptions:
    """Check and parse the options of a batch (``streaming=False``) or
    streaming read; raises :class:`SparkOptionError` as Spark would."""
    opts = _lower(options)
    if streaming:
        if "endingoffsets" in opts or "endingtimestamp" in opts:
            raise SparkOptionError("ending offset not valid in streaming queries")
        if "endingoffsetsbytimestamp" in opts:
            raise SparkOptionError("ending timestamp not valid in streaming queries")
    subscription = _subscription(opts)
    starting = _offset_spec(opts, "starting", "latest" if streaming else "earliest")
    ending = None if streaming else _offset_spec(opts, "ending", "latest")
    if not streaming:
        _check_batch_bounds(starting, ending)
    kafka = _kafka_params(opts, _REFUSED_SOURCE_KEYS, CONSUMER, "consumer")
    if "group.id" in kafka:
        log.warning("Kafka option 'kafka.group.id' is set: kwire's Spark reads join no consumer group and commit "
                    "no offsets (offsets live in Spark's checkpoint), so it is only sent as a label")
    if not streaming:
        for name in _STREAM_ONLY:
            if name in opts:
                log.warning("%s option ignored in batch queries", "maxOffsetsPerTrigger")
    poll = _positive(opts, "kafkaconsumer.polltimeoutms", "kafkaConsumer.pollTimeoutMs")
    return SourceOptions(
        subscription=subscription,
        starting=starting,
        ending=ending,
        fail_on_data_loss=_bool(opts, "failondataloss", True, "failOnDataLoss"),
        min_partitions=_positive(opts, "minpartitions", "minPartitions"),
        max_records_per_partition=_positive(opts, "maxrecordsperpartition", "maxRecordsPerPartition"),
        include_headers=_bool(opts, "includeheaders", False, "includeHeaders"),
        max_offsets_per_trigger=_positive(opts, "maxoffsetspertrigger", "maxOffsetsPerTrigger"),
        poll_timeout_ms=poll if poll is not None else 120_000,
        kafka=kafka,
    )


def _check_batch_bounds(starting: OffsetSpec, ending: Optional[OffsetSpec]) -> None:
    if starting.kind == "latest":
        raise SparkOptionError("starting offset can't be latest for batch queries on Kafka")
    if starting.kind == "offsets":
        for (t, p), off in (starting.offsets or {}).items():
            if off == LATEST:
                raise SparkOptionError(f"startingOffsets for {t}-{p} can't be latest for batch queries on Kafka")
    assert ending is not None
    if ending.kind == "earliest":
        raise SparkOptionError("ending offset can't be earliest for batch queries on Kafka")
    if ending.kind == "offsets":
        for (t, p), off in (ending.offsets or {}).items():
            if off == EARLIEST:
                raise SparkOptionError(f"ending offset for {t}-{p} can't be earliest for batch queries on Kafka")
    if starting.kind == ending.kind and starting.kind in ("offsets", "timestamps"):
        start, end = starting.offsets or {}, ending.offsets or {}
        if set(start) != set(end):
            raise SparkOptionError(f"startingOffsets and endingOffsets name different partitions: "
                                   f"{sorted(start)} and {sorted(end)}")
        for tp, s in start.items():
            if s >= 0 and end[tp] >= 0 and s > end[tp]:
                what = "offset" if starting.kind == "offsets" else "timestamp"
                raise SparkOptionError(f"The start {what} {s} for {tp[0]}-{tp[1]} is greater than the end {what} {end[tp]}")


def parse_sink_options(options: Mapping[str, Any]) -> SinkOptions:
    """Check and parse the options of a write."""
    opts = _lower(options)
    kafka = _kafka_params(opts, _REFUSED_SINK_KEYS, PRODUCER, "producer")
    topic = opts.get("topic")
    return SinkOptions(topic=topic.strip() if topic is not None else None, kafka=kafka)
