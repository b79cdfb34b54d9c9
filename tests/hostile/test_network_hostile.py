"""Issue 13, defects 4, 7 and 9: hostile frames, a leader missing from the
broker list, requests never answered, and an oversized Metadata answer,
against the real :class:`kwire.consumer.Consumer` in a child interpreter
(time, peak RSS and log volume bounded; records checked)."""

from __future__ import annotations

import functools
import struct
import time

from kwire.protocol import messages as m
from support.hostile_broker import CLOSE, NEVER, Delay, Raw, RawFrame, records_batch

from ._scenario import offsets, poll_for


def consume(params):
    """Poll ``params["topic"]`` partition 0 (from offset 0 when
    ``params["seek"]``, else from the earliest offset, looked up)."""
    from kwire.consumer import Consumer

    c = Consumer(bootstrap_servers=params["bootstrap"], auto_offset_reset="earliest", **params.get("options", {}))
    try:
        tp = (params["topic"], 0)
        c.assign([tp])
        if params.get("seek"):
            c.seek(tp, 0)
        want = params.get("want")
        return poll_for(c, params["seconds"], timeout_ms=params.get("timeout_ms", 100),
                        until=None if want is None else (lambda counts: sum(counts.values()) >= want))
    finally:
        c.close()


def _fill(b, topic: str = "t", n: int = 10) -> None:
    b.log(topic, 0).append(records_batch([b"r%d" % i for i in range(n)]))


# ----------------------------------------------------------------- defect 4
def _huge_prefix(declared: int, then: float):
    """A Fetch answer that declares ``declared`` bytes, sends 64 of them,
    waits ``then`` s and hangs up; the client reconnects and asks again."""
    def handler(req):
        head = struct.pack(">ii", declared, req.correlation_id)
        return [RawFrame(head + bytes(64)), Delay(then, CLOSE)]
    return handler


def _consume_behind_huge_prefix(broker, run_scenario, size, close_after, seconds):
    """A one-partition broker answering every Fetch with a size prefix of
    `size` (then 64 bytes, then a close after `close_after` s), consumed
    for `seconds` with poll(500): the run and its result."""
    b = broker({"t": 1})
    _fill(b)
    b.on("Fetch", _huge_prefix(size, close_after))
    run = run_scenario(consume, {"bootstrap": b.bootstrap, "topic": "t", "seconds": seconds, "timeout_ms": 500},
                       timeout=40)
    res = run.check().result
    run.figure = {"slowest_poll": round(res["slowest_poll"], 2), "connections": b.connections}
    return run, res


def test_huge_size_prefix_allocates_nothing(broker, run_scenario):
    """Every Fetch is answered with a size prefix of 1 GiB - 1 and 64 bytes,
    then the connection closes after 0.3 s. For 2.5 s of poll(500): each poll
    returns within its timeout, the peak RSS grows by less than 32 MiB (no
    buffer of the declared size) and the log stays quiet."""
    run, res = _consume_behind_huge_prefix(broker, run_scenario, (1 << 30) - 1, 0.3, seconds=2.5)
    assert run.rss_growth_mib < 32, run.describe()
    assert res["slowest_poll"] < 0.5 + 0.3, run.describe()
    assert res["logs"] <= 5, res["log_messages"]
    assert not res["counts"], "nothing is readable from such a broker"


def test_allowed_size_grows_as_bytes_arrive(broker, run_scenario):
    """A Fetch answer declaring 40 MB (under the response limit) of which
    only 64 bytes come: the frame buffer grows as bytes arrive, so the peak
    RSS grows by less than 16 MiB."""
    run, res = _consume_behind_huge_prefix(broker, run_scenario, 40_000_000, 1.0, seconds=2.0)
    assert run.rss_growth_mib < 16, run.describe()
    assert res["slowest_poll"] < 0.5 + 0.3, run.describe()


# ----------------------------------------------------------------- defect 7
def test_leader_missing_from_broker_list_recovers(broker, run_scenario):
    """For its first second the broker's Metadata names node 7, which is not
    in its broker list, as the leader. The consumer treats that as an
    unknown leader: it refreshes the metadata with backoff (not in a tight
    loop), logs it at most a couple of times, and reads the records within
    a second or two of the leader appearing (not after metadata_max_age_ms)."""
    b = broker({"t": 1})
    _fill(b)
    first = []

    def metadata(req):
        first.append(time.monotonic())
        if first[-1] - first[0] < 1.0:
            names = None if req.body.topics is None else [t.name for t in req.body.topics]
            return b.metadata_response(names, leader=7)
        return None

    b.on("Metadata", metadata)
    run = run_scenario(consume, {"bootstrap": b.bootstrap, "topic": "t", "seek": True, "seconds": 5.0, "want": 10},
                       timeout=30)
    res = run.check().result
    refreshes = len(b.received("Metadata"))
    run.figure = {"first_record_at": res["first_record_at"], "metadata_requests": refreshes}
    assert offsets(res, 0) == list(range(10)), run.describe()
    assert res["first_record_at"] is not None and res["first_record_at"] < 3.0, run.describe()
    assert refreshes <= 40, f"{refreshes} Metadata requests: no backoff"
    assert res["logs"] <= 3, res["log_messages"]
    assert res["slowest_poll"] < 0.5, run.describe()


# ----------------------------------------------------------------- defect 9
def test_poll_is_bounded_while_list_offsets_goes_unanswered(broker, run_scenario):
    """The first ListOffsets is never answered (request_timeout_ms 3 s).
    Every poll(100) returns within 0.4 s all the same; the lookup goes on in
    the background and, once the request timed out and was sent again, the
    records come."""
    b = broker({"t": 1})
    _fill(b)
    asked = []

    def list_offsets(req):
        asked.append(req)
        return NEVER if len(asked) == 1 else None

    b.on("ListOffsets", list_offsets)
    run = run_scenario(consume, {"bootstrap": b.bootstrap, "topic": "t", "seconds": 7.0, "want": 10,
                                 "options": {"request_timeout_ms": 3000}}, timeout=30)
    res = run.check().result
    run.figure = {"slowest_poll": round(res["slowest_poll"], 2), "first_record_at": res["first_record_at"]}
    assert res["slowest_poll"] < 0.4, run.describe()
    assert offsets(res, 0) == list(range(10)), run.describe()
    assert res["logs"] <= 3, res["log_messages"]


MANY_TOPICS = 200_000


@functools.lru_cache(maxsize=None)
def _many_topics_body(version: int, host: str, port: int) -> bytes:
    r = m.MetadataResponse
    part = [r.MetadataResponsePartition(error_code=0, partition_index=0, leader_id=0, leader_epoch=0,
                                        replica_nodes=[0], isr_nodes=[0], offline_replicas=[])]
    topics = [r.MetadataResponseTopic(error_code=0, name=f"x{i:06d}", partitions=part) for i in range(MANY_TOPICS)]
    topics.append(r.MetadataResponseTopic(error_code=0, name="t", partitions=part))
    resp = r(brokers=[r.MetadataResponseBroker(node_id=0, host=host, port=port)], cluster_id="hostile",
             controller_id=0, topics=topics)
    return r.encode_bytes(resp, version)


def test_poll_is_bounded_with_200k_topics_in_metadata(broker, run_scenario):
    """Every Metadata answer lists 200,000 topics besides the one asked for
    (8 MB). Every poll(500) returns within 1 s; the records come."""
    b = broker({"t": 1})
    _fill(b)
    b.on("Metadata", lambda req: Raw(_many_topics_body(req.version, b.host, b.port)))
    run = run_scenario(consume, {"bootstrap": b.bootstrap, "topic": "t", "seconds": 10.0, "want": 10,
                                 "timeout_ms": 500}, timeout=40)
    res = run.check().result
    run.figure = {"slowest_poll": round(res["slowest_poll"], 2), "first_record_at": res["first_record_at"]}
    assert res["slowest_poll"] < 1.0, run.describe()
    assert offsets(res, 0) == list(range(10)), run.describe()
