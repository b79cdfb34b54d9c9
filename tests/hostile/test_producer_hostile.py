"""Issue 13, defects 2, 12 and 13: the real :class:`kwire.producer.Producer`
(and the ``kwire produce`` command) against a broker that stops answering,
announces absurd partition indexes, or lacks the partition asked for. Each
runs in a child interpreter with its time, peak RSS and log volume bounded."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

import kwire
from support.hostile_broker import CLOSE, NEVER, batch_header

from ._scenario import counting_logs, error_info, timed


def _outcome(fut):
    """A record future's outcome: the offset, or the error; None if pending."""
    if not fut.done():
        return None
    try:
        return {"offset": fut.result(0).offset}
    except Exception as e:  # noqa: BLE001 - the error is the outcome
        return {"error": error_info(e)}


def _sender_threads():
    return [t.name for t in threading.enumerate() if t.name.startswith("kwire")]


def _produce_values(req):
    """(partition, first value, batch header) of every batch of a Produce request."""
    out = []
    for t in req.body.topic_data:
        for p in t.partition_data:
            data = bytes(p.records or b"")
            recs = kwire.decode(data).records
            out.append((p.index, recs[0].value if recs else None, batch_header(data)))
    return out


# ----------------------------------------------------------------- defect 2
HUNG_FOR = 3.5     # seconds the broker stays hung after the first Produce


def expire_in_flight(params):
    from kwire.producer import Producer

    p = Producer(bootstrap_servers=params["bootstrap"], linger_ms=0, delivery_timeout_ms=1500,
                 request_timeout_ms=1000, retry_backoff_ms=50, socket_connection_setup_timeout_ms=1000,
                 reconnect_backoff_max_ms=200)
    out = {}
    t0 = time.monotonic()
    with counting_logs() as logs:
        futs = [p.send("t", b"hang-%d" % i, partition=0) for i in range(3)]
        out["flush"] = timed(p.flush)                      # no timeout: it must end when the batches expire
        out["hang"] = [_outcome(f) for f in futs]
        time.sleep(max(0.0, t0 + params["hung_for"] + 0.3 - time.monotonic()))   # the broker answers again
        ok = p.send("t", b"ok", partition=0)
        out["ok_wait"] = timed(lambda: ok.result(6))
        out["ok"] = _outcome(ok)
        out["close"] = timed(p.close)                      # no timeout either
    out["logs"] = logs.count
    out["log_messages"] = logs.messages
    out["threads_after_close"] = _sender_threads()
    return out


def test_idempotent_producer_expires_sent_batches(broker, run_scenario):
    """The leader takes the first Produce, drops the connection and then
    hangs for 3.5 s (connections never get past ApiVersions). With
    enable_idempotence (the default) the records that were sent once still
    fail at delivery_timeout_ms (1.5 s) with a timeout error, so flush() and
    close() without a timeout return; a record sent afterwards is written
    under a bumped producer epoch (or a new producer id), its sequence from 0."""
    b = broker({"t": 1})
    hung = []

    def is_hung():
        return bool(hung) and time.monotonic() - hung[0] < HUNG_FOR

    def produce(req):
        if not hung:
            hung.append(time.monotonic())
            return CLOSE
        return CLOSE if is_hung() else None

    b.on("Produce", produce)
    b.on("ApiVersions", lambda req: NEVER if is_hung() else None)
    run = run_scenario(expire_in_flight, {"bootstrap": b.bootstrap, "hung_for": HUNG_FOR}, timeout=25)
    res = run.check().result
    sent = [batch for req in b.received("Produce") for batch in _produce_values(req)]
    hang = [h for _, v, h in sent if v.startswith(b"hang")]
    ok = [h for _, v, h in sent if v == b"ok"]
    run.figure = {"flush_s": round(res["flush"]["seconds"], 2), "hang": res["hang"], "ok": res["ok"]}
    assert res["flush"]["ok"] and res["flush"]["seconds"] < 2.5, res["flush"]
    assert all(o is not None and "KafkaTimeoutError" in o["error"]["types"] for o in res["hang"]), res["hang"]
    assert res["ok"] is not None and "offset" in res["ok"], res["ok"]
    assert hang and ok
    assert (ok[-1]["producer_id"], ok[-1]["producer_epoch"]) != (hang[0]["producer_id"], hang[0]["producer_epoch"]), \
        "the epoch must be bumped before the partition is written again"
    assert ok[-1]["base_sequence"] == 0
    assert res["close"]["ok"] and res["close"]["seconds"] < 2.0, res["close"]
    assert not res["threads_after_close"], res["threads_after_close"]
    assert res["logs"] <= 10, res["log_messages"]


# ---------------------------------------------------------------- defect 12
def keyed_sends(params):
    from kwire.producer import Producer

    p = Producer(bootstrap_servers=params["bootstrap"], linger_ms=0, delivery_timeout_ms=3000,
                 request_timeout_ms=1000)
    out = {}
    try:
        with counting_logs() as logs:
            futs = []
            out["sends"] = timed(lambda: futs.extend(p.send("t", b"v", key=b"k%d" % i) for i in range(100)))
            out["flush"] = timed(lambda: p.flush(6))
            out["outcomes"] = [_outcome(f) for f in futs]
        out["logs"] = logs.count
        out["log_messages"] = logs.messages
    finally:
        out["close"] = timed(lambda: p.close(2))
    return out


@pytest.mark.parametrize("index", [50_000_000, 2**31 - 1])
def test_huge_partition_index_in_metadata(broker, run_scenario, index):
    """Metadata gives topic t the partitions 0, 1 and ``index``. A hundred
    keyed sends neither allocate a table of ``index`` slots (peak RSS grows
    by less than 64 MiB) nor hang: every record is settled by flush(6), and
    the sends themselves take well under a second."""
    b = broker({"t": 2})

    def metadata(req):
        names = None if req.body.topics is None else [t.name for t in req.body.topics]
        return b.metadata_response(names, partitions={"t": [0, 1, index]})

    b.on("Metadata", metadata)
    run = run_scenario(keyed_sends, {"bootstrap": b.bootstrap}, timeout=30, address_space_mib=3072)
    run.figure = {"rss_growth_mib": round(run.rss_growth_mib), "error": ((run.report or {}).get("error") or "")[-200:]}
    res = run.check().result
    run.figure["sends_s"] = round(res["sends"]["seconds"], 3)
    assert res["sends"]["ok"], res["sends"]
    assert res["sends"]["seconds"] < 1.0, res["sends"]
    assert run.rss_growth_mib < 64, run.describe()
    assert all(o is not None for o in res["outcomes"]), "records left pending after flush(6)"
    delivered = {p for req in b.received("Produce") for p, _, _ in _produce_values(req)}
    assert delivered <= {0, 1}, f"records sent to partitions {sorted(delivered)}"
    assert res["logs"] <= 5, res["log_messages"]


# ---------------------------------------------------------------- defect 13
def close_with_timeout(params):
    from kwire.producer import Producer

    p = Producer(bootstrap_servers=params["bootstrap"], linger_ms=0)
    with counting_logs() as logs:
        futs = [p.send("t", b"v%d" % i, partition=0) for i in range(10)]
        out = {"close": timed(lambda: p.close(timeout=2))}
        out["outcomes"] = [_outcome(f) for f in futs]
    out["logs"] = logs.count
    out["log_messages"] = logs.messages
    out["threads_after_close"] = _sender_threads()
    return out


def test_close_with_timeout_is_bounded_and_quiet(broker, run_scenario):
    """Produce is never answered. close(timeout=2) returns within 2.5 s,
    fails the records it could not deliver, leaves no sender thread behind
    and logs no error."""
    b = broker({"t": 1})
    b.on("Produce", NEVER)
    run = run_scenario(close_with_timeout, {"bootstrap": b.bootstrap}, timeout=25)
    res = run.check().result
    run.figure = {"close_s": round(res["close"]["seconds"], 2), "logs": res["log_messages"][:3]}
    assert res["close"]["seconds"] < 2.5, res["close"]
    assert all(o is not None and "error" in o for o in res["outcomes"]), res["outcomes"]
    assert not res["threads_after_close"], res["threads_after_close"]
    assert not run.report["logs_by_level"].get("ERROR") and not run.report["logs_with_traceback"], \
        res["log_messages"]


def cli_missing_partition(params):
    env = dict(os.environ)
    out = timed(lambda: None)
    try:
        proc = subprocess.run([sys.executable, "-m", "kwire", "produce", "t", "-p", "99", "-b", params["bootstrap"]],
                              input="hello\n", capture_output=True, text=True, timeout=params["timeout"], env=env)
        out = {"returncode": proc.returncode, "output": (proc.stdout + proc.stderr)[-2000:]}
    except subprocess.TimeoutExpired as e:
        out = {"returncode": None, "output": f"still running after {e.timeout} s"}
    return out


def test_cli_produce_to_missing_partition_says_so(broker, run_scenario):
    """``kwire produce t -p 99`` on a 2-partition topic fails within 5 s
    with an error naming the partition and the topic's partition count,
    instead of waiting for the delivery timeout and saying "expired"."""
    b = broker({"t": 2})
    run = run_scenario(cli_missing_partition, {"bootstrap": b.bootstrap, "timeout": 10}, timeout=20)
    res = run.check().result
    run.figure = {"seconds": round(run.seconds, 2), "output": res["output"][-200:]}
    assert run.seconds < 5.0, res
    assert res["returncode"] not in (0, None), res
    assert "99" in res["output"] and "does not exist" in res["output"] and "2" in res["output"], res["output"]
    assert "expired" not in res["output"], res["output"]
    assert not b.received("Produce")
