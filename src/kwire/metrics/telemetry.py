"""KIP-714 client telemetry: pushing a client's metrics to the brokers
that ask for them, as Java's client and librdkafka do.

``enable_metrics_push`` (Java's ``enable.metrics.push``, on by default):
once a connection is up, the client asks the least loaded broker that
speaks KIP-714 for its subscriptions (GetTelemetrySubscriptions; the
broker assigns the client instance id). When the cluster's client metrics
subscriptions (``kafka-client-metrics.sh``, or ``client_metrics`` configs
through the Admin) request metrics of this client, it pushes them every
``push_interval_ms`` (the first push at a random point between half and
one and a half intervals), as OTLP (:mod:`kwire.metrics.otlp`), compressed
with the first codec the broker accepts; at close, a last, terminating
push. A broker without KIP-714 (an older Kafka, Tansu) switches it off
quietly. With no subscription for it, the client asks again every
interval and pushes nothing.

Errors, as KIP-714 says: UNKNOWN_SUBSCRIPTION_ID and
UNSUPPORTED_COMPRESSION_TYPE ask for the subscriptions again at once;
INVALID_RECORD and TELEMETRY_TOO_LARGE are logged (once) and the next
push goes on; INVALID_REQUEST and UNSUPPORTED_VERSION switch telemetry
off (logged); other failures ask for the subscriptions again after the
interval. Nothing here raises into the client: it runs on the client's
I/O turns (``Client.tick``).
"""

from __future__ import annotations

import logging
import math
import random
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from kwire import protocol
from kwire.compression import NONE as CODEC_NONE, compress
from kwire.future import Future
from kwire.metrics.names import Metric
from kwire.metrics.otlp import CUMULATIVE, DELTA, Point, attributes_of, encode_metrics, split
from kwire.protocol._wire import ZERO_UUID
from kwire.protocol.api_keys import ApiKey, ErrorCode

__all__ = ["TelemetryReporter", "DEFAULT_PUSH_INTERVAL_MS"]

log = logging.getLogger(__name__)

DEFAULT_PUSH_INTERVAL_MS = 300_000     # KIP-714's, when a broker names none
SUBSCRIBE, PUSH, TERMINATED, DISABLED = "subscribe", "push", "terminated", "disabled"
_RESUBSCRIBE_AT_ONCE = {ErrorCode.UNKNOWN_SUBSCRIPTION_ID, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE}
_NEXT_PUSH = {ErrorCode.INVALID_RECORD, ErrorCode.TELEMETRY_TOO_LARGE, ErrorCode.THROTTLING_QUOTA_EXCEEDED}
_GIVE_UP = {ErrorCode.INVALID_REQUEST, ErrorCode.UNSUPPORTED_VERSION}
_CODECS = (4, 3, 1, 2)                 # zstd, lz4, gzip, snappy: any the broker lists


class TelemetryReporter:
    """One client's KIP-714 state (see the module docstring). ``collect(now)``
    gives the client's metrics; ``resource()`` its OTLP resource attributes
    (a group member's ``group_id`` and ``group_member_id``, as Java's)."""

    def __init__(self, client: Any, collect: Callable[[float], List[Metric]],
                 resource: Callable[[], Mapping[str, str]]) -> None:
        self.client = client
        self.collect = collect
        self.resource = resource
        self.state = SUBSCRIBE if client.cfg.get("enable_metrics_push", True) else DISABLED
        self.due = 0.0
        self.instance_id: Optional[Any] = None      # uuid.UUID, assigned by the broker
        self.subscription_id = 0
        self.requested: List[str] = []
        self.interval = DEFAULT_PUSH_INTERVAL_MS / 1000.0
        self.max_bytes = 0
        self.delta = True
        self.codecs: List[int] = []
        self.in_flight: Optional[Future] = None
        self.pushes = 0                              # answered without error
        self._first_push = True
        self._started_ns = time.time_ns()
        self._last_push_ns = self._started_ns
        self._last: Dict[Tuple[str, Tuple[Tuple[str, str], ...]], float] = {}
        self._said: set = set()

    # ------------------------------------------------------------ timing
    def wait_time(self, now: float) -> float:
        if self.state not in (SUBSCRIBE, PUSH) or self.in_flight is not None:
            return math.inf
        return max(0.0, self.due - now)

    def tick(self, now: float) -> None:
        if self.state not in (SUBSCRIBE, PUSH) or self.in_flight is not None or now < self.due:
            return
        node = self._node()
        if node is None:
            self.due = now + 0.1          # no connection up yet, or none speaks KIP-714 yet
            return
        try:
            if self.state == SUBSCRIBE:
                self._send(node, protocol.message("GetTelemetrySubscriptionsRequest")(
                    client_instance_id=self._instance_or_zero()), self._on_subscriptions)
            else:
                self._push(node, terminating=False)
        except Exception as e:  # noqa: BLE001 - telemetry never breaks the client
            self._say("failed", logging.WARNING, "client telemetry failed: %r; switched off", e)
            self.state = DISABLED

    def _node(self) -> Optional[int]:
        """Of the connected brokers that speak KIP-714, the one with the fewest requests in
        flight (Java asks its least loaded node); None while none is connected. When brokers
        are connected and none speaks it, telemetry is switched off."""
        client = self.client
        ready = [(n, node) for node, (_, state, n) in client.connection_states().items() if state == "ready"]
        able = [r for r in ready if ApiKey.GET_TELEMETRY_SUBSCRIPTIONS in client.versions(r[1])]
        if ready and not able:
            self._say("unsupported", logging.DEBUG, "no connected broker speaks KIP-714: client telemetry is off")
            self.state = DISABLED
        return min(able)[1] if able else None

    def _instance_or_zero(self) -> Any:
        return self.instance_id if self.instance_id is not None else ZERO_UUID

    def _send(self, node: int, request: Any, then: Callable[[Future], None]) -> Future:
        fut = self.client.send(node, request)
        self.in_flight = fut
        fut.add_done_callback(then)
        return fut

    def _say(self, key: str, level: int, msg: str, *args: Any) -> None:
        if key not in self._said:
            self._said.add(key)
            log.log(level, msg, *args)

    # ------------------------------------------------------ subscriptions
    def _on_subscriptions(self, fut: Future) -> None:
        self.in_flight = None
        now = time.monotonic()
        if fut.failed():
            self.due = now + self.client.cfg.get("retry_backoff_ms", 100) / 1000.0
            return
        resp = fut.value
        code = resp.error_code
        if code:
            if code in _GIVE_UP:
                self._say("refused", logging.WARNING, "GetTelemetrySubscriptions refused (%s): client telemetry is off",
                          type(protocol.error_for(code, api="GetTelemetrySubscriptions")).__name__)
                self.state = DISABLED
            else:
                self.due = now + self.client.cfg.get("retry_backoff_ms", 100) / 1000.0
            return
        if self.instance_id is None and resp.client_instance_id.int:
            self.instance_id = resp.client_instance_id
        self.subscription_id = resp.subscription_id
        self.codecs = list(resp.accepted_compression_types or ())
        self.interval = (resp.push_interval_ms if resp.push_interval_ms > 0 else DEFAULT_PUSH_INTERVAL_MS) / 1000.0
        self.max_bytes = resp.telemetry_max_bytes
        self.delta = bool(resp.delta_temporality)
        self.requested = list(resp.requested_metrics or ())
        if not self.requested:
            self.state, self.due = SUBSCRIBE, now + self.interval     # nothing asked of this client: ask again
            return
        self.state = PUSH
        self.due = now + self.interval * (random.uniform(0.5, 1.5) if self._first_push else 1.0)
        self._first_push = False

    # -------------------------------------------------------------- pushes
    def _codec(self) -> int:
        for c in self.codecs:
            if c in _CODECS:
                return c
        return CODEC_NONE

    def payload(self, now: float) -> bytes:
        """The OTLP ``MetricsData`` of the requested metrics now (deltas since the last push for
        sums, when the broker asked for delta temporality)."""
        now_ns = time.time_ns()
        start = self._last_push_ns if self.delta else self._started_ns
        gauges: Dict[str, List[Point]] = {}
        sums: Dict[str, List[Point]] = {}
        for name, ms in split(self.collect(now), self.requested).items():
            for m in ms:
                attrs = attributes_of(m)
                if m.kind == "counter":
                    value = m.value
                    if self.delta:
                        prev = self._last.get((name, attrs), 0.0)
                        self._last[(name, attrs)] = m.value
                        value = m.value - prev if m.value >= prev else m.value
                    sums.setdefault(name, []).append(Point(attrs, value, start, now_ns))
                else:
                    gauges.setdefault(name, []).append(Point(attrs, m.value, start, now_ns))
        self._last_push_ns = now_ns
        from kwire import __version__

        return encode_metrics(gauges, sums, DELTA if self.delta else CUMULATIVE, dict(self.resource()),
                              ("kwire", __version__))

    def _push(self, node: int, terminating: bool) -> Optional[Future]:
        data = self.payload(time.monotonic())
        codec = self._codec()
        body = compress(codec, data) if codec != CODEC_NONE else data
        if self.max_bytes and len(body) > self.max_bytes:
            self._say("too-large", logging.WARNING, "client telemetry of %d bytes is over the broker's "
                      "telemetry_max_bytes (%d): not pushed (narrow the subscription)", len(body), self.max_bytes)
            self.due = time.monotonic() + self.interval
            return None
        req = protocol.message("PushTelemetryRequest")(
            client_instance_id=self._instance_or_zero(), subscription_id=self.subscription_id,
            terminating=terminating, compression_type=codec, metrics=body)
        return self._send(node, req, lambda f: self._on_push(f, terminating))

    def _on_push(self, fut: Future, terminating: bool) -> None:
        self.in_flight = None
        now = time.monotonic()
        if terminating:
            self.state = TERMINATED
            return
        if fut.failed():
            self.state, self.due = SUBSCRIBE, now + self.interval      # the broker went away: subscriptions anew
            return
        code = fut.value.error_code
        if not code:
            self.pushes += 1
            self.due = now + self.interval
        elif code in _RESUBSCRIBE_AT_ONCE:
            self.state, self.due = SUBSCRIBE, now
        elif code in _NEXT_PUSH:
            self._say(f"push-{code}", logging.WARNING, "PushTelemetry refused (%s); pushing again next interval",
                      type(protocol.error_for(code, api="PushTelemetry")).__name__)
            self.due = now + self.interval
        elif code in _GIVE_UP:
            self._say("push-refused", logging.WARNING, "PushTelemetry refused (%s): client telemetry is off",
                      type(protocol.error_for(code, api="PushTelemetry")).__name__)
            self.state = DISABLED
        else:
            self.state, self.due = SUBSCRIBE, now + self.interval

    def terminate_steps(self, deadline: float) -> Any:
        """(steps) The last push, marked terminating, waited for until ``deadline``, when the
        client has a subscription that asks for metrics."""
        if self.state != PUSH or self.in_flight is not None:
            if self.state != DISABLED:
                self.state = TERMINATED
            return
        node = self._node()
        if node is None:
            return
        try:
            fut = self._push(node, terminating=True)
        except Exception as e:  # noqa: BLE001 - closing anyway
            log.debug("the terminating telemetry push failed: %r", e)
            return
        if fut is not None:
            try:
                yield from self.client.wait_steps(fut, max(0.0, deadline - time.monotonic()))
            except Exception as e:  # noqa: BLE001 - closing anyway
                log.debug("the terminating telemetry push got no answer: %r", e)
        self.state = TERMINATED
