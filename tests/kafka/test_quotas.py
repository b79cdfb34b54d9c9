"""Client quotas (KIP-219) on Apache Kafka: a produce and a fetch byte-rate
quota set live with Admin.alter_client_quotas for one (user, client id);
kwire as that client honours the ``throttle_time_ms`` of the broker's
answers (nothing is sent to the broker before the throttle is over) and
its throughput settles at the quota.

A broker of its own (the fixture ``quota_kafka``) measures rates over 2
one-second samples (``quota.window.num=2``) rather than Kafka's default 11:
with 11, a client's first burst (10 s worth of quota) passes unthrottled
and ages out of the window 11 s later, so the rate seen over any 10 s is a
sawtooth whose phase decides the figure; over 2 samples the rate the
broker enforces is the rate over the last second or two, and the figure
over MEASURE seconds (after WARMUP) is the quota's.

The fetch rate depends on the size of a fetch against the quota: the
broker checks the quota before it answers and, when over, sends an empty
response with a throttle of up to a sample window (1 s). With fetches of
1 MiB (one second of this quota) nearly every other cycle is such a
throttle, and the same broker gave 39% of the quota (kwire sending nothing
early); with 256 KiB, 80%; with 64 KiB (FETCH_BYTES), 90%. Kafka's Java
consumer is paced by the same broker rule."""

from __future__ import annotations

import time
import uuid

import pytest

from kwire.admin import Admin, NewTopic
from kwire.consumer import Consumer
from kwire.channel import Channel
from kwire.producer import Producer
from support.kafka import start_kafka

pytestmark = pytest.mark.kafka

LISTENER = "sasl_plaintext"
QUOTA = 1024 * 1024          # bytes/s, for produce and for fetch
WARMUP = 3.0
MEASURE = 10.0
RECORD = b"q" * 10_000
TOLERANCE = 0.20
FETCH_BYTES = 64 * 1024       # per fetch (see the module doc)


@pytest.fixture(scope="module")
def quota_kafka():
    broker = start_kafka(overrides={"quota.window.num": "2", "quota.window.size.seconds": "1"})
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def quota_client(quota_kafka):
    """The client id the quotas apply to (alice's other clients are free)."""
    kafka = quota_kafka
    client_id = f"quota-{uuid.uuid4().hex[:8]}"
    entity = {"user": "alice", "client-id": client_id}
    with Admin(kafka.client_config(LISTENER)) as admin:
        admin.alter_client_quotas(entity, {"producer_byte_rate": QUOTA, "consumer_byte_rate": QUOTA})
        deadline = time.monotonic() + 10
        while admin.describe_client_quotas(entity, strict=True).get(
                (("client-id", client_id), ("user", "alice"))) != {"producer_byte_rate": QUOTA,
                                                                   "consumer_byte_rate": QUOTA}:
            assert time.monotonic() < deadline, "the quota did not show"
            time.sleep(0.1)
    time.sleep(1.0)        # the brokers' quota managers take it from the metadata log
    yield client_id
    with Admin(kafka.client_config(LISTENER)) as admin:
        admin.alter_client_quotas(entity, {"producer_byte_rate": None, "consumer_byte_rate": None})
        assert admin.describe_client_quotas(entity, strict=True) == {}


@pytest.fixture
def throttle_log(monkeypatch):
    """Throttles received, and requests sent while a throttle was on (must stay 0)."""
    seen = {"throttles": [], "early": []}
    real_throttle, real_send = Channel._throttle, Channel._send_now

    def throttle(self, ms):
        seen["throttles"].append(ms)
        return real_throttle(self, ms)

    def send_now(self, request, *args, **kwargs):
        if time.monotonic() < self.throttled_until:
            seen["early"].append(type(request).__name__)
        return real_send(self, request, *args, **kwargs)

    monkeypatch.setattr(Channel, "_throttle", throttle)
    monkeypatch.setattr(Channel, "_send_now", send_now)
    return seen


def _alice(kafka, **extra):
    return {**kafka.client_config(LISTENER, user=("alice", kafka.users["alice"])), **extra}


def _report(what, rate, seen):
    ratio = rate / QUOTA
    print(f"\n{what}: {rate / 2**20:.3f} MiB/s measured over {MEASURE:.0f} s against a quota of "
          f"{QUOTA / 2**20:.3f} MiB/s ({ratio:.0%}); {len(seen['throttles'])} throttled responses, "
          f"longest {max(seen['throttles'], default=0)} ms")
    assert seen["throttles"], "the broker never throttled"
    assert not seen["early"], f"sent during a throttle: {seen['early'][:5]}"
    assert abs(ratio - 1) <= TOLERANCE, f"{what} rate {ratio:.0%} of the quota"


def test_produce_rate_settles_at_the_quota(quota_kafka, quota_client, throttle_log):
    kafka = quota_kafka
    topic = f"quota-p-{uuid.uuid4().hex[:8]}"
    with Admin(kafka.client_config(LISTENER)) as admin:
        admin.create_topics([NewTopic(topic, 1)])
    acked = []        # (time, bytes) of each acknowledged record
    told: list = []   # throttle_cb's events
    cfg = _alice(kafka, client_id=quota_client, buffer_memory=256 * 1024, batch_size=64 * 1024, linger_ms=5,
                 throttle_cb=told.append)
    with Producer(cfg) as p:
        t0 = time.monotonic()
        while time.monotonic() - t0 < WARMUP + MEASURE:
            p.send(topic, RECORD).add_callback(
                lambda meta, err: acked.append((time.monotonic(), len(RECORD))) if err is None else None)
        p.flush(30)
    start = t0 + WARMUP
    measured = sum(n for t, n in acked if start <= t < start + MEASURE)
    _report("produce", measured / MEASURE, throttle_log)
    # librdkafka's throttle_cb: each throttled response told, as a ThrottleEvent (seconds)
    assert told and len(told) <= len(throttle_log["throttles"])
    assert all(e.broker_name.endswith(f"/{e.broker_id}") and e.broker_id >= 0 for e in told)
    assert {round(e.throttle_time * 1000) for e in told} <= set(throttle_log["throttles"])


def test_fetch_rate_settles_at_the_quota(quota_kafka, quota_client, throttle_log):
    kafka = quota_kafka
    topic = f"quota-f-{uuid.uuid4().hex[:8]}"
    total = int(QUOTA * (WARMUP + MEASURE + 4))
    with Admin(kafka.client_config(LISTENER)) as admin:
        admin.create_topics([NewTopic(topic, 1)])
    with Producer(_alice(kafka, linger_ms=20, batch_size=256 * 1024)) as p:      # not the quota's client id
        for _ in range(total // len(RECORD)):
            p.send(topic, RECORD)
        p.flush(60)
    throttle_log["throttles"].clear()
    got = []
    with Consumer(_alice(kafka, client_id=quota_client, auto_offset_reset="earliest",
                         max_partition_fetch_bytes=FETCH_BYTES)) as c:
        c.assign([(topic, 0)])
        t0 = time.monotonic()
        while time.monotonic() - t0 < WARMUP + MEASURE:
            for recs in c.poll(100).values():
                got.append((time.monotonic(), sum(len(r.value) for r in recs)))
    start = t0 + WARMUP
    measured = sum(n for t, n in got if start <= t < start + MEASURE)
    assert sum(n for _, n in got) < total, "read everything: the measurement ran out of records"
    _report("fetch", measured / MEASURE, throttle_log)
