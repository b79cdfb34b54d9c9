"""Log dirs on Apache Kafka, with both drivers (``kw``): DescribeLogDirs on
the session's broker (its one dir, a topic's replicas with their sizes,
the dir's total and usable bytes); AlterReplicaLogDirs on a broker of its
own with two log dirs (``two_dir_kafka``: a single dir cannot show a
move): a replica moved to the other dir, its records still read; a dir
the broker does not have is refused per replica; ``kwire log-dirs alter``
moves one too."""

from __future__ import annotations

import json
import time
import uuid
from types import SimpleNamespace

import pytest

from kwire.admin import Admin, NewTopic, TopicPartitionReplica
from kwire.errors import LogDirNotFoundError
from kwire.producer import Producer
from kwire.types import TopicPartition
from support.cli_run import cli_runner
from support.kafka import start_kafka

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def two_dir_kafka(tmp_path_factory):
    dirs = [tmp_path_factory.mktemp("dir-a"), tmp_path_factory.mktemp("dir-b")]
    broker = start_kafka(overrides={"log.dirs": ",".join(map(str, dirs))})
    try:
        yield broker, [str(d) for d in dirs]
    finally:
        broker.stop()


def _fill(kw, bootstrap: str, partitions: int = 1) -> str:
    topic = f"logdir-{uuid.uuid4().hex[:8]}"
    with Admin(bootstrap_servers=bootstrap) as a:
        a.create_topics([NewTopic(topic, partitions)])
    with kw.Producer(bootstrap_servers=bootstrap, linger_ms=0) as p:
        for i in range(partitions * 10):
            p.send(topic, b"v%d" % i, partition=i % partitions)
        p.flush()
    return topic


def test_describe_log_dirs(kw, kafka):
    topic = _fill(kw, kafka.bootstrap(), 2)
    with kw.Admin(bootstrap_servers=kafka.bootstrap()) as a:
        node = a.describe_cluster().brokers[0].node_id
        got = a.describe_log_dirs([node])
    (path, d), = got[node].items()
    assert path.endswith("data") and d.error is None
    assert 0 < d.usable_bytes <= d.total_bytes
    for p in (0, 1):
        info = d.replica_infos[TopicPartition(topic, p)]
        assert info.size > 0 and info.offset_lag == 0 and not info.is_future


def test_alter_replica_log_dirs(kw, two_dir_kafka):
    broker, dirs = two_dir_kafka
    topic = _fill(kw, broker.bootstrap())
    tp = TopicPartition(topic, 0)
    with kw.Admin(bootstrap_servers=broker.bootstrap()) as a:
        node = a.describe_cluster().brokers[0].node_id

        def where() -> list:
            return [path for path, d in a.describe_log_dirs([node])[node].items()
                    if tp in d.replica_infos and not d.replica_infos[tp].is_future]

        (before,) = where()
        other = next(d for d in dirs if d != before)
        a.alter_replica_log_dirs({TopicPartitionReplica(topic, 0, node): other})
        deadline = time.monotonic() + 30
        while where() != [other]:
            assert time.monotonic() < deadline, f"the replica stayed in {where()}"
            time.sleep(0.1)
        with pytest.raises(LogDirNotFoundError, match=topic):
            a.alter_replica_log_dirs({(topic, 0, node): "/no/such/dir"})
    with kw.Consumer(bootstrap_servers=broker.bootstrap(), auto_offset_reset="earliest") as c:
        c.assign([tp])
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 10 and time.monotonic() < deadline:
            for recs in c.poll(200).values():
                got.extend(r.value for r in recs)
    assert sorted(got) == sorted(b"v%d" % i for i in range(10))


def test_the_cli_moves_a_replica_between_log_dirs(two_dir_kafka, capsys):
    """``kwire log-dirs alter``: the move, seen by ``kwire log-dirs describe --json``."""
    broker, dirs = two_dir_kafka
    topic = _fill(SimpleNamespace(Producer=Producer), broker.bootstrap())
    run = cli_runner(capsys, broker.bootstrap())

    def where() -> list:
        return [r["log_dir"] for r in map(json.loads, run("log-dirs", "describe", "--json")[1].splitlines())
                if r["topic"] == topic and not r["is_future"]]

    (before,) = where()
    other = next(d for d in dirs if d != before)
    node = str(json.loads(run("log-dirs", "describe", "--json")[1].splitlines()[0])["broker"])
    run("log-dirs", "alter", "--broker", node, "--topic", topic, "--partition", "0", "--dir", other)
    deadline = time.monotonic() + 30
    while where() != [other]:
        assert time.monotonic() < deadline, f"the replica stayed in {where()}"
        time.sleep(0.2)
