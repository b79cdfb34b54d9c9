"""The options of the ``kwire`` data source: the names and meanings of
Spark's Kafka source and sink (``spark-sql-kafka-0-10``), parsed and checked
in one place, on the driver, before any task runs.

Option names are case-insensitive, as in Spark. ``kafka.*`` options go to
kwire's consumer (reads) or producer (writes) with the prefix removed; the
keys Spark refuses are refused here with Spark's reasons; an unknown
``kafka.*`` key is refused by kwire's option table (with a "did you mean");
``kafka.sasl.jaas.config`` and the ``kafka.ssl.*store.*`` options are turned
into kwire's by :mod:`kwire.spark.security`.

Every other option is one of Spark's Kafka source or sink options, acted on
(see :data:`SOURCE_OPTIONS` and :data:`SINK_OPTIONS`); a source option given
to the sink, or a streaming option to a batch read, is warned about as
Spark does; a name neither knows is warned about with the closest known name
(Spark passes it on unread; a misspelt option must not go unnoticed).

Typed keys and values (kwire's own options, :data:`TYPED_OPTIONS`; Spark's
connector has none): ``valueFormat`` / ``keyFormat`` (``avro``, ``protobuf``,
``json``; default ``binary``, the bytes as they are), each side's schema
(``valueSchema``: the schema's text), registry subject (``valueSubject``),
schema id (``valueSchemaId``) and Protobuf message (``valueMessageName``),
the registry's options as ABRiS, Databricks and Confluent's serializers
name them, and from_avro's ``mode`` (``FAILFAST``, ``PERMISSIVE``) become a
:class:`FormatSpec` per side: Confluent's option names for
:func:`kwire.formats.make_format` and the registry client's options apart
(:func:`registry_options`, the one place they are mapped).

Consumer groups: as in Spark's connector, the executors' consumers carry the
group id ``<groupIdPrefix>-<uuid>-executor`` (``groupIdPrefix`` defaults to
``spark-kafka-source`` for streams, ``spark-kafka-relation`` for batch
reads), or exactly ``kafka.group.id`` when given (with Spark's warning). The
connector's streaming id ends with the hash of the checkpoint path, which a
Python data source does not get: kwire's ends with the uuid. Neither the
connector nor kwire ever sends that id to a broker: offsets are resolved
with an admin client (no group), and the executors ``assign()`` partitions
and ``seek()`` them, which makes no group request (no FindCoordinator,
JoinGroup or OffsetFetch; Fetch and ListOffsets carry no group id), so
broker ACLs on groups and group quotas never apply to either. Since the id
has no effect, a Python worker's cached consumer serves later queries with
other ids too (:mod:`kwire.spark.ranges`): it keeps the id of the first.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Tuple

from kwire.config import CONSUMER, PRODUCER, ConfigError, canonical_name, resolve
from kwire.spark.errors import SparkOptionError
from kwire.spark.security import translate_security

__all__ = [
    "OffsetSpec",
    "Subscription",
    "SourceOptions",
    "SinkOptions",
    "parse_source_options",
    "parse_sink_options",
    "EARLIEST",
    "LATEST",
    "SOURCE_OPTIONS",
    "SINK_OPTIONS",
    "parse_duration_ms",
    "FormatSpec",
    "FORMAT_KINDS",
    "TYPED_OPTIONS",
    "registry_options",
    "parse_format_options",
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

#: The driver's consumer only probes high watermarks (a Fetch of a
#: partition's last record): the least data, and no long broker wait, which
#: a read-ahead Fetch at the log's end would otherwise hold the next probe
#: behind (each ``latest`` lookup took ``fetch.max.wait.ms`` more).
DRIVER_DEFAULTS: Dict[str, Any] = {
    "fetch.max.wait.ms": 10,
    "max.partition.fetch.bytes": 1,
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
# Spark's sink takes interceptor.classes; kwire's sends Arrow rows (send_arrow), which interceptors never see.
_REFUSED_SINK_KEYS = {
    "key.serializer": "Kafka option 'key.serializer' is not supported as keys are serialized as byte arrays.",
    "value.serializer": "Kafka option 'value.serializer' is not supported as values are serialized as byte arrays.",
    "interceptor.classes": "Kafka option 'interceptor.classes' is not supported by kwire's sink: it encodes the "
                           "rows' Arrow columns straight into batches, with no record for an interceptor to see "
                           "(kwire.interceptors).",
}
_STRATEGIES = ("assign", "subscribe", "subscribepattern")
_STRATEGY_NAMES = "subscribe, subscribePattern, assign"
_OFFSETS_EXAMPLE = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
_PARTITIONS_EXAMPLE = '{"topicA":[0,1],"topicB":[0,1]}'
#: Spark's names of the options only streaming reads act on (warned about in batch reads, as Spark does).
_STREAM_ONLY = {"maxoffsetspertrigger": "maxOffsetsPerTrigger", "minoffsetspertrigger": "minOffsetsPerTrigger",
                "maxtriggerdelay": "maxTriggerDelay", "commitoffsetstogroup": "commitOffsetsToGroup"}
#: Spark's Kafka source options (KafkaSourceProvider), lower case, every one acted on.
SOURCE_OPTIONS = frozenset({
    "assign", "subscribe", "subscribepattern", "startingoffsets", "endingoffsets", "startingtimestamp",
    "endingtimestamp", "startingoffsetsbytimestamp", "endingoffsetsbytimestamp",
    "startingoffsetsbytimestampstrategy", "failondataloss", "minpartitions", "maxrecordsperpartition",
    "maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay", "fetchoffset.numretries",
    "fetchoffset.retryintervalms", "kafkaconsumer.polltimeoutms", "groupidprefix", "includeheaders",
    "commitoffsetstogroup",          # kwire's own: the query's lag for lag tools (kwire.spark.lag)
})
#: Spark's Kafka sink options: ``topic`` (``includeHeaders`` is the source's; the sink writes a
#: ``headers`` column whenever the DataFrame has one).
SINK_OPTIONS = frozenset({"topic", "deliveryguarantee", "transactionalidprefix"})
#: ``deliveryGuarantee``'s values (Flink's Kafka sink's names): kwire's own, beyond Spark's connector.
AT_LEAST_ONCE, EXACTLY_ONCE = "at-least-once", "exactly-once"
#: The exactly-once sink's ``transaction.timeout.ms`` unless ``kafka.transaction.timeout.ms`` says
#: otherwise: Kafka's default ``transaction.max.timeout.ms`` (15 minutes), the longest a broker allows
#: unless raised; a transaction is open from a task's first row to the driver's commit of its batch.
EXACTLY_ONCE_TRANSACTION_TIMEOUT_MS = 900_000
#: KIP-939's producer option (two-phase commit: transactions that never time out), kwire's name.
TWO_PHASE_OPTION = "transaction_two_phase_commit_enable"
#: What the exactly-once sink sets itself, refused as ``kafka.*`` options.
_EXACTLY_ONCE_REFUSED = {
    "transactional.id": "Kafka option 'transactional.id' is not supported with deliveryGuarantee=exactly-once: "
                        "kwire derives one per Spark partition from transactionalIdPrefix (default kwire-<query id>)",
    "enable.idempotence": "Kafka option 'enable.idempotence' is not supported with deliveryGuarantee=exactly-once: "
                          "transactions need the idempotent producer",
    "acks": "Kafka option 'acks' is not supported with deliveryGuarantee=exactly-once: transactions need acks=all",
}
#: Options Spark itself sets on every data source (not the connector's).
_SPARK_OPTIONS = frozenset({"path", "paths", "checkpointlocation", "queryname"})
DEFAULT_MAX_TRIGGER_DELAY = "15m"

#: The typed formats of ``valueFormat`` / ``keyFormat`` (``binary``, the default, is the bytes as they are).
FORMAT_KINDS = ("avro", "protobuf", "json")
#: Each side's options (``value<Name>``, ``key<Name>``, lower case) and the format option each becomes.
_SIDE_OPTIONS = {"format": None, "schema": "schema", "subject": "subject", "schemaid": "use.schema.id",
                 "messagename": "message.name"}
#: Confluent serializers' options passed to both sides' formats as they are.
_SERDE_OPTIONS = frozenset({"auto.register.schemas", "use.latest.version", "normalize.schemas",
                            "subject.name.strategy", "key.subject.name.strategy", "value.subject.name.strategy"})
#: The registry's options as Spark users write them: Confluent's and ABRiS's ``schema.registry.*`` and
#: ``basic.auth.*`` / ``bearer.auth.*``, Databricks' ``confluent.schema.registry.*``.
_REGISTRY_PREFIXES = ("schema.registry.", "confluent.schema.registry.", "basic.auth.", "bearer.auth.")
#: Databricks' from_avro argument, as an option: the registry's URL.
_REGISTRY_ADDRESS = "schemaregistryaddress"
#: from_avro's ``mode``: what an undecodable key or value does.
MODES = ("FAILFAST", "PERMISSIVE")
#: kwire's typed-records options, lower case, every one acted on (see the module's docstring).
TYPED_OPTIONS = frozenset({f"{side}{name}" for side in ("value", "key") for name in _SIDE_OPTIONS}
                          | _SERDE_OPTIONS | {_REGISTRY_ADDRESS, "mode"})
#: Consumer options (kwire's names) only a consumer group acts on: warned about in a read, whose
#: consumers assign partitions (in the connector as in kwire).
_GROUP_ONLY = frozenset({"session_timeout_ms", "heartbeat_interval_ms", "auto_commit_interval_ms",
                         "partition_assignment_strategy", "group_instance_id", "group_protocol",
                         "group_remote_assignor", "max_poll_interval_ms"})


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
class FormatSpec:
    """A typed key or value column: its format's ``kind`` ("avro",
    "protobuf", "json"), its options (Confluent's names, as
    :func:`kwire.formats.make_format` takes them: ``schema``, ``subject``,
    ``use.schema.id``, ``message.name``, ``auto.register.schemas``...) and the
    schema registry client's (``schema.registry.url``..., empty without a
    registry). Its repr names options, never their values."""

    kind: str
    options: Dict[str, str] = field(default_factory=dict)
    registry: Dict[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:
        names = ", ".join(sorted(self.options) + sorted(self.registry))
        return f"FormatSpec({self.kind}: {names})"

    def with_options(self, **more: str) -> "FormatSpec":
        """The same spec with ``more`` options (dotted names as ``a_b`` -> ``a.b``)."""
        return FormatSpec(self.kind, {**self.options, **{k.replace("_", "."): v for k, v in more.items()}},
                          self.registry)


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
    #: ``minOffsetsPerTrigger``: a micro-batch waits until this many offsets are available...
    min_offsets_per_trigger: Optional[int] = None
    #: ... or ``maxTriggerDelay`` (ms) passed since the last batch.
    max_trigger_delay_ms: int = 15 * 60 * 1000
    poll_timeout_ms: int = 120_000
    #: ``fetchOffset.numRetries``: attempts of each driver offset lookup (Spark's name; 3 attempts in all).
    fetch_offset_num_retries: int = 3
    #: ``fetchOffset.retryIntervalMs``: the wait after a failed attempt.
    fetch_offset_retry_interval_ms: int = 1000
    #: The query's group id: ``<groupIdPrefix>-<uuid>``, or ``kafka.group.id`` exactly.
    group_id: str = ""
    kafka: Dict[str, Any] = field(default_factory=dict)
    #: ``keyFormat`` / ``valueFormat``: None is the bytes as they are.
    key_format: Optional[FormatSpec] = None
    value_format: Optional[FormatSpec] = None
    #: ``mode``: an undecodable key or value fails the task (FAILFAST) or is null (PERMISSIVE).
    mode: str = "FAILFAST"
    #: ``commitOffsetsToGroup`` (streaming): the group each micro-batch's end offsets are committed
    #: to, for lag tools (kwire.spark.lag); None: no commits, as Spark's connector.
    lag_group: Optional[str] = None

    def consumer_config(self, role: str) -> Dict[str, Any]:
        """kwire consumer options for the ``driver`` or an ``executor``:
        the ``kafka.*`` options over kwire's defaults for that role (the
        security options translated by :mod:`kwire.spark.security` in this
        process); never an automatic reset (the planner says where), no
        commits; the executor's group id is the connector's (see the
        module's docstring: it never reaches a broker), the driver's
        offset lookups use no group; no topic auto-creation unless
        ``kafka.allow.auto.create.topics`` asks for it (a reader must find a
        deleted topic gone, not made anew and empty)."""
        cfg: Dict[str, Any] = dict(EXECUTOR_DEFAULTS) if role == "executor" else dict(DRIVER_DEFAULTS)
        cfg.update(translate_security(self.kafka))
        cfg["auto.offset.reset"] = "none"
        cfg["enable.auto.commit"] = False
        if role == "executor":
            cfg["group.id"] = self.group_id if "group.id" in self.kafka else f"{self.group_id}-executor"
        else:
            cfg.pop("group.id", None)
        cfg.setdefault("client.id", f"kwire-spark-{role}")
        cfg.setdefault("allow.auto.create.topics", False)
        return cfg


#: The sink's producers' ``batch.size`` unless ``kafka.batch.size`` is given (256 KiB).
SINK_BATCH_SIZE = 262_144


@dataclass(frozen=True)
class SinkOptions:
    topic: Optional[str]
    kafka: Dict[str, Any] = field(default_factory=dict)
    #: ``keyFormat`` / ``valueFormat``: the column is encoded by it (None: written as it is).
    key_format: Optional[FormatSpec] = None
    value_format: Optional[FormatSpec] = None
    #: ``deliveryGuarantee``: :data:`AT_LEAST_ONCE` (Spark's connector's) or :data:`EXACTLY_ONCE`.
    delivery_guarantee: str = AT_LEAST_ONCE
    #: ``transactionalIdPrefix`` (exactly once): None is ``kwire-<query id>`` (see kwire.spark.exactly_once).
    transactional_id_prefix: Optional[str] = None

    @property
    def exactly_once(self) -> bool:
        return self.delivery_guarantee == EXACTLY_ONCE

    @property
    def two_phase(self) -> bool:
        """``kafka.transaction.two.phase.commit.enable`` (KIP-939): the tasks'
        transactions never time out (see kwire.spark.exactly_once)."""
        return _given(self.kafka, TWO_PHASE_OPTION, "").strip().lower() == "true"

    def producer_config(self) -> Dict[str, Any]:
        """kwire producer options: the ``kafka.*`` options, the security
        ones translated by :mod:`kwire.spark.security` in this process.
        ``batch.size`` defaults to :data:`SINK_BATCH_SIZE`: a task hands its
        producer whole Arrow batches at once, so a batch fills at once and
        Java's 16 KiB (sized for producers sending a record at a time) only
        multiplies batches and requests, the producer's and the broker's
        work per record."""
        cfg: Dict[str, Any] = translate_security(self.kafka)
        cfg.setdefault("client.id", "kwire-spark-writer")
        if "batch.size" not in cfg and "batch_size" not in cfg:
            cfg["batch.size"] = SINK_BATCH_SIZE
        if self.exactly_once and not self.two_phase and not _given(cfg, "transaction_timeout_ms"):
            cfg["transaction.timeout.ms"] = EXACTLY_ONCE_TRANSACTION_TIMEOUT_MS
        return cfg


def _given(kafka: Mapping[str, Any], name: str, default: Any = None) -> Any:
    """The value of kwire option ``name`` among ``kafka``'s, whichever of its names (dotted, snake) it has."""
    return next((v for k, v in kafka.items() if canonical_name(k) == name), default)


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
        resolve(table, translate_security(params), what=f"kafka.* {what}")
    except ConfigError as e:
        raise SparkOptionError(f"{e} (from a 'kafka.' option)") from None
    return params


_DURATION_UNITS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(raw: str, shown: str) -> int:
    """Spark's time strings (``Utils.timeStringAsMs``): an integer with an
    optional unit ``us ms s m min h d``; no unit means milliseconds."""
    m = re.fullmatch(r"(-?[0-9]+)\s*([a-z]+)?", raw.strip().lower())
    if m is None or (m.group(2) is not None and m.group(2) not in _DURATION_UNITS):
        raise SparkOptionError(f"option '{shown}': invalid time string {raw!r} (e.g. 15m, 30s, 500ms; units "
                               f"{', '.join(_DURATION_UNITS)})")
    return int(int(m.group(1)) * _DURATION_UNITS[m.group(2) or "ms"])


def _non_negative(opts: Dict[str, str], name: str, shown: str, default: int) -> int:
    raw = opts.get(name)
    if raw is None:
        return default
    try:
        n = int(raw.strip())
    except ValueError:
        raise SparkOptionError(f"option '{shown}' must be an integer, got {raw!r}") from None
    if n < 0:
        raise SparkOptionError(f"option '{shown}' must not be negative, got {n}")
    return n


def _warn_unknown(opts: Dict[str, str], known: frozenset, what: str) -> None:
    """Warn about each option neither Spark's Kafka connector nor Spark
    itself knows (Spark passes them on unread): a misspelt name must not
    go unnoticed."""
    import difflib

    known = known | TYPED_OPTIONS
    names = sorted(known | _SPARK_OPTIONS)
    for name in sorted(opts):
        if name.startswith(("kafka.",) + _REGISTRY_PREFIXES) or name in known or name in _SPARK_OPTIONS:
            continue
        close = difflib.get_close_matches(name, names, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        log.warning("option %r is not an option of the Kafka %s; it is ignored%s", name, what, hint)


def _group_id(opts: Dict[str, str], kafka: Dict[str, Any], streaming: bool) -> str:
    """The connector's group id: ``kafka.group.id`` as given (with Spark's
    warning), else ``<groupIdPrefix>-<uuid>``."""
    if "group.id" in kafka:
        log.warning("Kafka option 'kafka.group.id' has been set on this query, it is not recommended to set this "
                    "option. This option is unsafe to use since multiple concurrent queries or sources using the "
                    "same group id will interfere with each other as they are part of the same consumer group "
                    "(with kwire, as with Spark's connector, the id is set on the executors' consumers, which "
                    "assign partitions and send no group request)")
        if "groupidprefix" in opts:
            log.warning("Option groupIdPrefix will be ignored as option kafka.group.id has been set.")
        return str(kafka["group.id"])
    prefix = opts.get("groupidprefix", "spark-kafka-source" if streaming else "spark-kafka-relation")
    return f"{prefix}-{uuid.uuid4()}"


def registry_options(opts: Mapping[str, str], kafka: Mapping[str, Any]) -> Dict[str, str]:
    """The schema registry client's options (Confluent's names, each with
    the ``schema.registry.`` prefix or none, as the client takes them) from
    a query's lower-cased options: ``schema.registry.*``, ``basic.auth.*``
    and ``bearer.auth.*`` as they are (ABRiS, Confluent), Databricks'
    ``confluent.schema.registry.*`` without ``confluent.``, and its
    ``schemaRegistryAddress`` as ``schema.registry.url``. With
    ``basic.auth.credentials.source=SASL_INHERIT`` the Kafka client's SASL
    options (``kafka.sasl.*``) go along."""
    out: Dict[str, str] = {}
    for name, value in opts.items():
        if name == _REGISTRY_ADDRESS:
            key = "schema.registry.url"
        elif name.startswith("confluent.schema.registry."):
            key = name[len("confluent."):]
        elif name.startswith(_REGISTRY_PREFIXES):
            key = name
        else:
            continue
        if key in out:
            raise SparkOptionError(f"the schema registry option {key!r} is given twice")
        out[key] = value
    source = out.get("schema.registry.basic.auth.credentials.source") or out.get("basic.auth.credentials.source")
    if str(source or "").strip().upper() == "SASL_INHERIT":
        out.update({k: str(v) for k, v in kafka.items()
                    if k in ("sasl.mechanism", "sasl.jaas.config", "sasl.username", "sasl.password")})
    return out


def _format_spec(opts: Dict[str, str], side: str, kafka: Mapping[str, Any]) -> Optional[FormatSpec]:
    """``side``'s (``value``, ``key``) typed format, or None for the bytes as they are."""
    shown = f"{side}Format"
    kind = opts.get(f"{side}format", "binary").strip().lower()
    if kind in ("binary", ""):
        for name in _SIDE_OPTIONS:
            if name != "format" and f"{side}{name}" in opts:
                log.warning("option '%s%s' has no effect without '%s' (avro, protobuf or json)", side,
                            name[0].upper() + name[1:], shown)
        return None
    if kind not in FORMAT_KINDS:
        raise SparkOptionError(f"option '{shown}' must be one of {', '.join(FORMAT_KINDS)} or binary, got {kind!r}")
    options = {target: opts[f"{side}{name}"].strip() if name != "schema" else opts[f"{side}{name}"]
               for name, target in _SIDE_OPTIONS.items() if target and f"{side}{name}" in opts}
    if "use.schema.id" in options:
        _schema_id(options["use.schema.id"], f"{side}SchemaId")
    options.update({name: opts[name] for name in _SERDE_OPTIONS if name in opts})
    registry = registry_options(opts, kafka)
    if kind != "json" and "schema" not in options and not (registry.get("schema.registry.url") or "").strip():
        raise SparkOptionError(f"option '{shown}'={kind} needs the schema: '{side}Schema' (its text) or a schema "
                               f"registry ('schema.registry.url')")
    return FormatSpec(kind, options, registry)


def _schema_id(raw: str, shown: str) -> int:
    try:
        n = int(raw)
    except ValueError:
        raise SparkOptionError(f"option '{shown}' must be a schema id (an integer), got {raw!r}") from None
    if n < 0:
        raise SparkOptionError(f"option '{shown}' must not be negative, got {n}")
    return n


def _mode(opts: Dict[str, str]) -> str:
    mode = opts.get("mode", "FAILFAST").strip().upper()
    if mode not in MODES:
        raise SparkOptionError(f"option 'mode' must be FAILFAST or PERMISSIVE (as from_avro's), got {mode!r}")
    return mode


def parse_format_options(options: Mapping[str, Any]) -> Tuple[Subscription, Optional[FormatSpec],
                                                              Optional[FormatSpec], str]:
    """A read's subscription, key and value formats and ``mode`` alone (what
    a data source's schema needs, before batch or streaming is known)."""
    opts = _lower(options)
    kafka = {k[len("kafka."):]: v for k, v in opts.items() if k.startswith("kafka.")}
    return (_subscription(opts), _format_spec(opts, "key", kafka), _format_spec(opts, "value", kafka), _mode(opts))


def parse_source_options(options: Mapping[str, Any], streaming: bool) -> SourceOptions:
    """Check and parse the options of a batch (``streaming=False``) or
    streaming read; raises :class:`SparkOptionError` as Spark would."""
    opts = _lower(options)
    if streaming:
        if "endingoffsets" in opts or "endingtimestamp" in opts:
            raise SparkOptionError("ending offset not valid in streaming queries")
        if "endingoffsetsbytimestamp" in opts:
            raise SparkOptionError("ending timestamp not valid in streaming queries")
    _warn_unknown(opts, SOURCE_OPTIONS, "source")
    subscription = _subscription(opts)
    starting = _offset_spec(opts, "starting", "latest" if streaming else "earliest")
    ending = None if streaming else _offset_spec(opts, "ending", "latest")
    if not streaming:
        _check_batch_bounds(starting, ending)
    kafka = _kafka_params(opts, _REFUSED_SOURCE_KEYS, CONSUMER, "consumer")
    for key in sorted(kafka):
        if re.sub(r"[.\-]", "_", key) in _GROUP_ONLY:
            log.warning("Kafka option 'kafka.%s' has no effect: the source's consumers assign their partitions "
                        "and join no consumer group", key)
    if not streaming:
        for name, shown in _STREAM_ONLY.items():
            if name in opts:
                log.warning("%s option ignored in batch queries", shown)
    max_per_trigger = _positive(opts, "maxoffsetspertrigger", "maxOffsetsPerTrigger")
    min_per_trigger = _positive(opts, "minoffsetspertrigger", "minOffsetsPerTrigger")
    if streaming and max_per_trigger is not None and min_per_trigger is not None and min_per_trigger > max_per_trigger:
        raise SparkOptionError(f"The value of minOffsetPerTrigger({min_per_trigger}) is higher than the "
                               f"maxOffsetsPerTrigger({max_per_trigger}).")
    poll = _positive(opts, "kafkaconsumer.polltimeoutms", "kafkaConsumer.pollTimeoutMs")
    retries = _positive(opts, "fetchoffset.numretries", "fetchOffset.numRetries")
    return SourceOptions(
        subscription=subscription,
        starting=starting,
        ending=ending,
        fail_on_data_loss=_bool(opts, "failondataloss", True, "failOnDataLoss"),
        min_partitions=_positive(opts, "minpartitions", "minPartitions"),
        max_records_per_partition=_positive(opts, "maxrecordsperpartition", "maxRecordsPerPartition"),
        include_headers=_bool(opts, "includeheaders", False, "includeHeaders"),
        max_offsets_per_trigger=max_per_trigger,
        min_offsets_per_trigger=min_per_trigger,
        max_trigger_delay_ms=parse_duration_ms(opts.get("maxtriggerdelay", DEFAULT_MAX_TRIGGER_DELAY),
                                               "maxTriggerDelay"),
        poll_timeout_ms=poll if poll is not None else 120_000,
        fetch_offset_num_retries=retries if retries is not None else 3,
        fetch_offset_retry_interval_ms=_non_negative(opts, "fetchoffset.retryintervalms",
                                                     "fetchOffset.retryIntervalMs", 1000),
        group_id=_group_id(opts, kafka, streaming),
        kafka=kafka,
        key_format=_format_spec(opts, "key", kafka),
        value_format=_format_spec(opts, "value", kafka),
        mode=_mode(opts),
        lag_group=_lag_group(opts, kafka) if streaming else None,
    )


def _lag_group(opts: Dict[str, str], kafka: Dict[str, Any]) -> Optional[str]:
    """``commitOffsetsToGroup``'s group: ``kafka.group.id``, else one derived
    from the cluster and the subscription (the same across restarts)."""
    from kwire.spark.lag import derived_group

    if not _bool(opts, "commitoffsetstogroup", False, "commitOffsetsToGroup"):
        return None
    if "group.id" in kafka:
        return str(kafka["group.id"])
    subscription = next(f"{k}={opts[k]}" for k in ("subscribe", "subscribepattern", "assign") if k in opts)
    return derived_group(opts.get("groupidprefix"), str(kafka.get("bootstrap.servers", "")), subscription)


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
    """Check and parse the options of a write. Source options given to
    the sink are warned about (Spark ignores them there)."""
    opts = _lower(options)
    kafka = _kafka_params(opts, _REFUSED_SINK_KEYS, PRODUCER, "producer")
    for name in sorted(opts):
        if name in SOURCE_OPTIONS:
            log.warning("option %r is a Kafka source option: the sink ignores it", name)
    _warn_unknown({k: v for k, v in opts.items() if k not in SOURCE_OPTIONS}, SINK_OPTIONS, "sink")
    topic = opts.get("topic")
    if "mode" in opts:
        log.warning("option 'mode' is a source option (how undecodable values are read): the sink ignores it")
    guarantee = opts.get("deliveryguarantee", AT_LEAST_ONCE).strip().lower()
    if guarantee not in (AT_LEAST_ONCE, EXACTLY_ONCE):
        raise SparkOptionError(f"option 'deliveryGuarantee' must be {AT_LEAST_ONCE} or {EXACTLY_ONCE}, "
                               f"got {opts['deliveryguarantee']!r}")
    prefix = opts.get("transactionalidprefix")
    if guarantee == EXACTLY_ONCE:
        for key, reason in _EXACTLY_ONCE_REFUSED.items():
            if key in kafka and not (key == "acks" and kafka[key].strip().lower() in ("all", "-1")) \
                    and not (key == "enable.idempotence" and kafka[key].strip().lower() == "true"):
                raise SparkOptionError(reason)
        if _given(kafka, TWO_PHASE_OPTION, "").strip().lower() == "true" and _given(kafka, "transaction_timeout_ms"):
            raise SparkOptionError("kafka.transaction.timeout.ms cannot be set with "
                                   "kafka.transaction.two.phase.commit.enable: its transactions do not time out")
    elif prefix is not None:
        raise SparkOptionError("option 'transactionalIdPrefix' needs deliveryGuarantee=exactly-once")
    elif _given(kafka, TWO_PHASE_OPTION) is not None:
        raise SparkOptionError("kafka.transaction.two.phase.commit.enable needs deliveryGuarantee=exactly-once")
    if prefix is not None and not re.fullmatch(r"[A-Za-z0-9._-]{1,200}", prefix.strip()):
        raise SparkOptionError(f"option 'transactionalIdPrefix' must be 1 to 200 of A-Z a-z 0-9 . _ -, got {prefix!r}")
    return SinkOptions(topic=topic.strip() if topic is not None else None, kafka=kafka,
                       key_format=_format_spec(opts, "key", kafka), value_format=_format_spec(opts, "value", kafka),
                       delivery_guarantee=guarantee, transactional_id_prefix=prefix.strip() if prefix else None)
