"""Option resolution (Kafka names, dotted or snake, strings converted) and
the futures requests and produced records complete."""

from __future__ import annotations

import threading
import time

import pytest

from kwire.config import CONSUMER, PRODUCER, ConfigError, parse_bootstrap, parse_duration_ms, redact, resolve
from kwire.future import Future, KafkaTimeoutError


def test_dotted_and_snake_names_and_string_values():
    cfg = resolve(PRODUCER, {"bootstrap.servers": "a:1,b", "linger.ms": "20", "enable.idempotence": "false",
                             "acks": "all", "compression.type": "LZ4"}, {"batch_size": 1000})
    assert cfg["bootstrap_servers"] == [("a", 1), ("b", 9092)]
    assert (cfg["linger_ms"], cfg["enable_idempotence"], cfg["acks"], cfg["compression_type"]) == (20, False, -1, "lz4")
    assert cfg["batch_size"] == 1000
    # keyword arguments win over the mapping
    assert resolve(CONSUMER, {"fetch.min.bytes": 5, "bootstrap.servers": "x"}, {"fetch_min_bytes": 7})["fetch_min_bytes"] == 7


def test_librdkafka_and_java_spellings():
    cfg = resolve(CONSUMER, {"bootstrap.servers": "x", "sasl.username": "u", "sasl.password": "p",
                             "sasl.mechanisms": "scram-sha-512", "ssl.endpoint.identification.algorithm": ""})
    assert (cfg["sasl_plain_username"], cfg["sasl_plain_password"], cfg["sasl_mechanism"]) == ("u", "p", "SCRAM-SHA-512")
    assert cfg["ssl_check_hostname"] is False
    # librdkafka's aliases of Java's names
    cfg = resolve(PRODUCER, {"metadata.broker.list": "x", "queue.buffering.max.ms": "7", "request.required.acks": "1",
                             "message.send.max.retries": "3", "message.timeout.ms": "60000"})
    assert (cfg["bootstrap_servers"], cfg["linger_ms"], cfg["acks"], cfg["retries"], cfg["delivery_timeout_ms"]) == \
        ([("x", 9092)], 7, 1, 3, 60000)
    cfg = resolve(CONSUMER, {"bootstrap.servers": "x", "fetch.wait.max.ms": "250", "fetch.message.max.bytes": "4096"})
    assert (cfg["fetch_max_wait_ms"], cfg["max_partition_fetch_bytes"]) == (250, 4096)
    # librdkafka's values of auto.offset.reset (and kafka-python's old smallest / largest)
    for value, policy in [("smallest", "earliest"), ("beginning", "earliest"), ("Largest", "latest"),
                          ("end", "latest"), ("error", "none"), (" EARLIEST ", "earliest")]:
        assert resolve(CONSUMER, {"bootstrap.servers": "x", "auto.offset.reset": value})["auto_offset_reset"] == policy
    with pytest.raises(ConfigError, match="'auto.offset.reset'='oldest'.*smallest"):
        resolve(CONSUMER, {"bootstrap.servers": "x", "auto.offset.reset": "oldest"})


def test_auto_offset_reset_by_duration_takes_javas_iso_8601_durations():
    """Java 4.x's ``by_duration:<duration>`` (KIP-1106), as Duration.parse reads it."""
    for text, ms in [("PT1H", 3600000), ("P1D", 86400000), ("p1dt12h", 129600000), ("PT0.5S", 500),
                     ("PT1M30.25S", 90250), ("P0D", 0)]:
        assert parse_duration_ms(text) == ms, text
    cfg = resolve(CONSUMER, {"bootstrap.servers": "x", "auto.offset.reset": "by_duration:pt15m"})
    assert cfg["auto_offset_reset"] == "by_duration:PT15M"
    for bad in ["P", "PT", "-PT1H", "PT-1H", "1H", "PT1.5H", ""]:
        with pytest.raises(ConfigError, match="ISO 8601 duration"):
            resolve(CONSUMER, {"bootstrap.servers": "x", "auto.offset.reset": f"by_duration:{bad}"})


def test_consumer_timeout_ms_takes_kafka_pythons_values():
    def value(v):
        return resolve(CONSUMER, {"bootstrap.servers": "x", "consumer_timeout_ms": v})["consumer_timeout_ms"]
    assert [value(v) for v in (None, float("inf"), "inf", 0, "250")] == [None, None, None, 0, 250]
    with pytest.raises(ConfigError, match="consumer_timeout_ms"):
        value(-1)


def test_endpoint_identification_accepts_only_https_or_empty():
    """Any other value used to turn host name verification off silently."""
    def check(value):
        return resolve(CONSUMER, {"bootstrap.servers": "x", "ssl.endpoint.identification.algorithm": value})[
            "ssl_check_hostname"]

    assert check("https") is True and check(" HTTPS ") is True
    assert check("") is False and check(None) is False
    for typo in ("htps", "none", "http", "true"):
        with pytest.raises(ConfigError, match="ssl.endpoint.identification.algorithm.*expected 'https'"):
            check(typo)


def test_errors_name_the_option_and_hide_secrets():
    with pytest.raises(ConfigError, match="did you mean 'linger_ms'"):
        resolve(PRODUCER, {"bootstrap.servers": "x", "linger.msec": 1})
    with pytest.raises(ConfigError, match="'acks'='2'"):
        resolve(PRODUCER, {"bootstrap.servers": "x", "acks": "2"})
    with pytest.raises(ConfigError, match="needs bootstrap_servers"):
        resolve(PRODUCER, {})
    assert redact({"sasl_plain_password": "hunter2", "acks": 1}) == {"sasl_plain_password": "***", "acks": 1}


def test_compression_levels_are_checked_as_java_and_librdkafka_do():
    """KIP-390's per-codec levels (Java's ranges, each codec's default
    allowed) and librdkafka's one ``compression.level``; what reaches the
    batch builder (None: the codec's default mode)."""
    from kwire.producer import compression_level

    def level(**options):
        return compression_level(resolve(PRODUCER, {"bootstrap.servers": "x", **options}))

    assert level(**{"compression.type": "gzip"}) is None and level(**{"compression.type": "lz4"}) is None
    assert level(**{"compression.type": "zstd"}) == 3
    assert level(**{"compression.type": "gzip", "compression.gzip.level": "9"}) == 9
    assert level(**{"compression.type": "lz4", "compression.lz4.level": 17}) == 17
    assert level(**{"compression.type": "zstd", "compression.zstd.level": -7}) == -7
    assert level(**{"compression.type": "zstd", "compression.level": 12, "compression.zstd.level": 1}) == 12
    assert level(**{"compression.type": "snappy"}) is None
    for name, bad in (("compression.gzip.level", 0), ("compression.gzip.level", 10), ("compression.lz4.level", 0),
                      ("compression.lz4.level", 18), ("compression.zstd.level", 23),
                      ("compression.zstd.level", -131073), ("compression.level", 13), ("compression.level", -2)):
        with pytest.raises(ConfigError, match=f"'{name}'={bad}: must be between"):
            resolve(PRODUCER, {"bootstrap.servers": "x", name: bad})
    with pytest.raises(ConfigError, match="snappy has no levels"):
        level(**{"compression.type": "snappy", "compression.level": 3})
    with pytest.raises(ConfigError, match="gzip takes 0 to 9"):
        level(**{"compression.type": "gzip", "compression.level": 11})


def test_the_partitioner_option_takes_names_callables_and_module_attributes():
    from kwire.partitioners import HashPartitioner, RoundRobinPartitioner, fnv1a, resolve_partitioner

    def cfg(value):
        return resolve_partitioner(resolve(PRODUCER, {"bootstrap.servers": "x", "partitioner": value})["partitioner"])

    assert cfg(None) == (None, False) and cfg("murmur2_random") == (None, False)
    assert cfg("org.apache.kafka.clients.producer.UniformStickyPartitioner") == (None, True)
    assert isinstance(cfg("org.apache.kafka.clients.producer.RoundRobinPartitioner")[0], RoundRobinPartitioner)
    assert isinstance(cfg("fnv1a")[0], HashPartitioner)
    assert cfg("kwire.partitioners:fnv1a")[0] is fnv1a
    mine = lambda topic, key, value, n: 0      # noqa: E731
    assert cfg(mine) == (mine, False)
    with pytest.raises(ConfigError, match="unknown partitioner 'sticky'"):
        cfg("sticky")
    with pytest.raises(ConfigError, match="expected a callable"):
        cfg(3)
    rr = RoundRobinPartitioner()
    assert [rr("a", None, None, 3) for _ in range(4)] + [rr("b", b"k", None, 3)] == [0, 1, 2, 0, 0]


def test_parse_bootstrap():
    assert parse_bootstrap(["[::1]:9093", ("h", 1), "PLAINTEXT://k:9", "plain"]) == [
        ("::1", 9093), ("h", 1), ("k", 9), ("plain", 9092)]
    with pytest.raises(ValueError):
        parse_bootstrap(" , ")
    with pytest.raises(ValueError):
        parse_bootstrap("h:70000")


def test_future_completes_across_threads_and_runs_callbacks():
    f: Future[int] = Future()
    seen = []
    f.add_done_callback(lambda fut: seen.append(fut.value))
    threading.Timer(0.05, f.set_result, (5,)).start()
    assert f.result(timeout=5) == 5
    assert seen == [5]
    f.add_done_callback(lambda fut: seen.append("late"))       # runs at once
    assert seen == [5, "late"]
    with pytest.raises(RuntimeError):
        f.set_result(6)


def test_future_failure_timeout_and_bad_callbacks():
    f: Future[int] = Future()
    f.add_done_callback(lambda fut: 1 / 0)                     # logged, not raised
    t0 = time.monotonic()
    with pytest.raises(KafkaTimeoutError):
        f.result(timeout=0.05)
    assert time.monotonic() - t0 < 2
    f.set_exception(ValueError("boom"))
    assert f.failed() and isinstance(f.exception(), ValueError)
    with pytest.raises(ValueError, match="boom"):
        f.get()


def test_poll_returns_while_another_thread_keeps_waking_it():
    """A producer's send() wakes the sender thread's poll for every full
    batch. poll() reads the wakeup once and returns; it used to read until
    the socket was empty, which a thread waking it in a loop never let
    happen. And a wakeup not yet seen is not written again."""
    from kwire.client import Client

    client = Client(resolve(PRODUCER, None, {"bootstrap_servers": "127.0.0.1:9"}, what="producer"))
    stop = threading.Event()

    def waker():      # like send(): busy with the GIL, now and then a wakeup
        while not stop.is_set():
            deadline = time.perf_counter() + 0.0005
            while time.perf_counter() < deadline:
                pass
            client.wakeup()

    t = threading.Thread(target=waker)
    t.start()
    try:
        for _ in range(20):
            t0 = time.monotonic()
            client.poll(0.05)
            assert time.monotonic() - t0 < 1.0
    finally:
        stop.set()
        t.join(5)
        client.close()


def test_waiters_wake_after_the_callbacks_ran():
    """result() on another thread returns only once the callbacks have run
    (a producer's flush() then sees every delivery callback done, as
    Java's); a callback that waits for its own future does not deadlock."""
    import threading
    import time

    from kwire.future import Future

    fut: Future = Future()
    ran = []
    fut.add_done_callback(lambda f: (time.sleep(0.2), ran.append(f.result(1))))   # waits for itself: no deadlock
    woke = []
    waiter = threading.Thread(target=lambda: (fut.result(5), woke.append(list(ran))))
    waiter.start()
    time.sleep(0.05)
    setter = threading.Thread(target=fut.set_result, args=(7,))
    setter.start()
    time.sleep(0.05)
    assert fut.done() and not ran
    waiter.join(5)
    setter.join(5)
    assert woke == [[7]]            # the waiter woke after the callback had run
    assert fut.result(0) == 7
