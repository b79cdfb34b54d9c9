"""read_committed against real aborted transactions on Apache Kafka (Tansu
sends no aborted-transaction list, so this is where kwire's compiled Aborter
meets a broker's): two transactional producers commit some transactions and
abort others, interleaved across partitions and with each other, beside
plain (non-transactional) records; read_committed returns exactly the
committed and plain records, in poll and poll_columnar, and
read_uncommitted returns every record, never a control record."""

from __future__ import annotations

import time
import uuid

import pytest

from kwire.admin import Admin, NewTopic
from kwire.consumer import Consumer
from kwire.producer import Producer

pytestmark = pytest.mark.kafka

PARTITIONS = 3


@pytest.fixture(scope="module")
def log(kafka):
    """The topic and the records written: {(partition, offset): (value, fate)}, fate in committed/aborted/plain."""
    cfg = kafka.client_config("plaintext")
    topic = f"rc-{uuid.uuid4().hex[:8]}"
    with Admin(cfg) as admin:
        admin.create_topics([NewTopic(topic, PARTITIONS)])
    written = {}
    producers = [Producer(cfg, transactional_id=f"rc-{name}-{uuid.uuid4().hex[:6]}", linger_ms=1,
                          compression_type=codec)
                 for name, codec in (("a", "zstd"), ("b", "none"))]
    plain = Producer(cfg, linger_ms=1)
    try:
        for p in producers:
            p.init_transactions(30)
        for p in producers:
            p.begin_transaction()
        for txn in range(12):
            # both producers have a transaction open at once; each ends one per round, alternately
            # committing and aborting, so aborted and committed batches interleave on every partition
            for i, p in enumerate(producers):
                fate = "committed" if (txn + i) % 3 != 1 else "aborted"
                sent = []
                for n in range(4 + txn % 5):
                    value = b"%s-%d-%d-%s" % (b"ab"[i:i + 1], txn, n, fate.encode())
                    part = (txn + n + i) % PARTITIONS
                    sent.append((p.send(topic, value, key=b"k%d" % n, partition=part), value, fate))
                    if n % 2:
                        plain_value = b"plain-%d-%d-%d" % (i, txn, n)
                        sent.append((plain.send(topic, plain_value, partition=part), plain_value, "plain"))
                        plain.flush(20)
                    p.flush(20)                  # several batches per transaction, all written
                if fate == "committed":
                    p.commit_transaction(30)
                else:
                    p.abort_transaction(30)
                p.begin_transaction()
                for f, value, fate_ in sent:
                    meta = f.get(30)
                    written[(meta.partition, meta.offset)] = (value, fate_)
        for p in producers:
            p.abort_transaction(30)              # the last open ones end aborted, with nothing in them
    finally:
        for p in producers:
            p.close()
        plain.close()
    return topic, written


def _read(kafka, topic, isolation, columnar, want, **cfg):
    got = {}
    with Consumer(kafka.client_config("plaintext"), auto_offset_reset="earliest", isolation_level=isolation,
                  **cfg) as c:
        c.assign([(topic, p) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 30
        idle_until = None
        while time.monotonic() < deadline:
            if columnar:
                batch = c.poll_columnar(300)
                for tp, rb in batch.items():
                    for o, v in zip(rb.column("offset").to_pylist(), rb.column("value").to_pylist()):
                        assert (tp.partition, o) not in got
                        got[(tp.partition, o)] = v
            else:
                batch = c.poll(300)
                for tp, recs in batch.items():
                    for r in recs:
                        assert (tp.partition, r.offset) not in got
                        got[(tp.partition, r.offset)] = r.value
            if len(got) >= want:
                # everything expected is here: poll a little longer to see nothing more comes
                idle_until = idle_until or time.monotonic() + 1.0
                if time.monotonic() > idle_until:
                    break
    return got


def _values(written, fates):
    return {key: value for key, (value, fate) in written.items() if fate in fates}


@pytest.mark.parametrize("columnar", [False, True], ids=["poll", "poll_columnar"])
@pytest.mark.parametrize("fetch_bytes", [1048576, 300], ids=["one-fetch", "small-fetches"])
def test_read_committed_returns_exactly_the_committed_records(kafka, log, columnar, fetch_bytes):
    topic, written = log
    fates = {fate for _, fate in written.values()}
    assert fates == {"committed", "aborted", "plain"}
    for p in range(PARTITIONS):   # every partition holds both fates of transactional record
        assert {fate for (part, _), (_, fate) in written.items() if part == p} == fates
    expected = _values(written, {"committed", "plain"})
    got = _read(kafka, topic, "read_committed", columnar, len(expected), max_partition_fetch_bytes=fetch_bytes)
    assert got == expected


@pytest.mark.parametrize("columnar", [False, True], ids=["poll", "poll_columnar"])
def test_read_uncommitted_returns_every_record(kafka, log, columnar):
    topic, written = log
    got = _read(kafka, topic, "read_uncommitted", columnar, len(written))
    assert got == _values(written, {"committed", "aborted", "plain"})
