"""Configs changed live on Apache Kafka (the ``kafka`` fixture), with
kwire's blocking admin and kwire.aio's (``kw``): IncrementalAlterConfigs'
SET, DELETE, APPEND and SUBTRACT on a topic, a broker (and the
cluster-wide default), a group (KIP-848's group configs) and a client
metrics subscription (KIP-714), read back with DescribeConfigs; the legacy
AlterConfigs, which replaces a resource's whole set; ``validate_only``;
per-resource errors naming their resource; Kafka's Java AdminClient
reading back what kwire set; the ``kwire configs`` command."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from kwire.admin import Admin, AlterConfigOp, ConfigResource, NewTopic
from kwire.errors import InvalidConfigError, UnknownTopicOrPartitionError

pytestmark = pytest.mark.kafka

DYNAMIC_TOPIC = 1        # ConfigSource.DYNAMIC_TOPIC_CONFIG
DYNAMIC_BROKER = 2       # ConfigSource.DYNAMIC_BROKER_CONFIG
DYNAMIC_DEFAULT_BROKER = 3


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _configs(admin, kind: str, name: str, until=None):
    """The resource's configs, once ``until(configs)`` holds: a broker
    applies a change when the metadata log reaches it, a moment after the
    controller answered (as with Java's admin client)."""
    deadline = time.monotonic() + 10
    while True:
        got = admin.describe_configs(resources=[(kind, name)])[(kind, name)]
        if until is None or until(got) or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def _value(name: str, value):
    return lambda got: name in got and got[name].value == value


def test_topic_set_append_subtract_delete(kw, kafka):
    topic = _name("cfg")
    res = ConfigResource("topic", topic)
    with kw.Admin(bootstrap_servers=kafka.bootstrap()) as a:
        a.create_topics([NewTopic(topic, 1)])
        a.incremental_alter_configs({res: [AlterConfigOp("retention.ms", "123456"),
                                           AlterConfigOp("cleanup.policy", "compact", "append")]})
        got = _configs(a, "topic", topic, _value("cleanup.policy", "delete,compact"))
        assert got["retention.ms"].value == "123456" and got["retention.ms"].source == DYNAMIC_TOPIC
        assert got["cleanup.policy"].value == "delete,compact"
        a.incremental_alter_configs({res: [AlterConfigOp("cleanup.policy", "delete", "subtract"),
                                           AlterConfigOp("retention.ms", op_type="delete")]})
        got = _configs(a, "topic", topic, _value("retention.ms", "604800000"))
        assert got["cleanup.policy"].value == "compact"
        assert got["retention.ms"].value == "604800000" and got["retention.ms"].is_default
        # validate_only: checked, not changed
        a.incremental_alter_configs({res: [AlterConfigOp("retention.ms", "1000")]}, validate_only=True)
        time.sleep(0.5)
        assert _configs(a, "topic", topic)["retention.ms"].value == "604800000"
        a.delete_topics([topic])


def test_broker_and_cluster_default(kw, kafka):
    with kw.Admin(bootstrap_servers=kafka.bootstrap()) as a:
        node = str(a.describe_cluster().brokers[0].node_id)
        a.incremental_alter_configs({("broker", node): [AlterConfigOp("log.cleaner.backoff.ms", "16000")],
                                     ("broker", ""): [AlterConfigOp("log.retention.bytes", "1073741824")]})
        try:
            _configs(a, "broker", node, _value("log.retention.bytes", "1073741824"))
            got = a.describe_configs(brokers=[int(node)])[("broker", node)]
            assert got["log.cleaner.backoff.ms"].value == "16000"
            assert got["log.cleaner.backoff.ms"].source == DYNAMIC_BROKER
            assert got["log.retention.bytes"].value == "1073741824"
            assert got["log.retention.bytes"].source == DYNAMIC_DEFAULT_BROKER
        finally:
            a.incremental_alter_configs({("broker", node): [AlterConfigOp("log.cleaner.backoff.ms", op_type="delete")],
                                         ("broker", ""): [AlterConfigOp("log.retention.bytes", op_type="delete")]})
        got = _configs(a, "broker", node, _value("log.retention.bytes", "-1"))
        assert got["log.cleaner.backoff.ms"].value == "15000" and got["log.retention.bytes"].value == "-1"


def test_group_and_client_metrics(kw, kafka):
    group, subscription = _name("cfg-group"), _name("cfg-metrics")
    with kw.Admin(bootstrap_servers=kafka.bootstrap()) as a:
        a.incremental_alter_configs({("group", group): [AlterConfigOp("consumer.session.timeout.ms", "50000")]})
        assert _configs(a, "group", group, _value("consumer.session.timeout.ms", "50000"))["consumer.session.timeout.ms"].value == "50000"
        metrics = ("client_metrics", subscription)
        a.incremental_alter_configs({metrics: [AlterConfigOp("interval.ms", "60000"),
                                               AlterConfigOp("metrics", "org.apache.kafka.producer.")]})
        a.incremental_alter_configs({metrics: [AlterConfigOp("metrics", "org.apache.kafka.producer.,"
                                                                        "org.apache.kafka.consumer.")]})
        # Kafka 4.4 does not take APPEND of a client metrics subscription's list ("its type is not LIST")
        with pytest.raises(InvalidConfigError, match="not LIST.*client_metrics"):
            a.incremental_alter_configs({metrics: [AlterConfigOp("metrics", "org.apache.kafka.share.", "append")]})
        got = _configs(a, *metrics, until=_value("metrics", "org.apache.kafka.producer.,org.apache.kafka.consumer."))
        assert got["interval.ms"].value == "60000"
        assert got["metrics"].value == "org.apache.kafka.producer.,org.apache.kafka.consumer."
        a.incremental_alter_configs({metrics: [AlterConfigOp("metrics", op_type="delete"),
                                               AlterConfigOp("interval.ms", op_type="delete")]})


def test_legacy_alter_configs_replaces_the_set(kw, kafka):
    topic = _name("cfg-legacy")
    with kw.Admin(bootstrap_servers=kafka.bootstrap()) as a:
        a.create_topics([NewTopic(topic, 1, configs={"retention.ms": "1000"})])
        a.alter_configs({("topic", topic): {"segment.ms": "3600000"}})
        got = _configs(a, "topic", topic, _value("segment.ms", "3600000"))
        assert got["segment.ms"].value == "3600000" and got["segment.ms"].source == DYNAMIC_TOPIC
        assert got["retention.ms"].value == "604800000" and got["retention.ms"].is_default
        a.delete_topics([topic])


def test_errors_name_their_resource(kw, kafka):
    topic, missing = _name("cfg-err"), _name("cfg-missing")
    with kw.Admin(bootstrap_servers=kafka.bootstrap()) as a:
        a.create_topics([NewTopic(topic, 1)])
        with pytest.raises(InvalidConfigError, match=topic):
            a.incremental_alter_configs({("topic", topic): [AlterConfigOp("no.such.config", "1")]})
        with pytest.raises(UnknownTopicOrPartitionError, match=missing):
            a.incremental_alter_configs({("topic", topic): [AlterConfigOp("retention.ms", "5000")],
                                         ("topic", missing): [AlterConfigOp("retention.ms", "5000")]})
        # the other resource of the request was changed: errors are per resource
        assert _configs(a, "topic", topic, _value("retention.ms", "5000"))["retention.ms"].value == "5000"
        with pytest.raises(ValueError, match="op_type"):
            a.incremental_alter_configs({("topic", topic): [AlterConfigOp("retention.ms", "1", "add")]})
        a.delete_topics([topic])


def test_cli_configs(kafka, capsys, monkeypatch):
    """``kwire configs alter`` (--set, --append, --subtract, --delete) and
    ``describe`` (text and --json) of a topic; a missing resource option
    is refused."""
    from kwire.__main__ import main
    from support.cli_run import cli_runner

    topic = _name("cfg-cli")
    b = ["-b", kafka.bootstrap()]
    run = cli_runner(capsys, kafka.bootstrap(), check=False)

    assert run("topics", "create", topic)[0] == 0
    rc, _, err = run("configs", "alter", "--topic", topic, "--set", "retention.ms=7200000",
                     "--append", "cleanup.policy=compact")
    assert rc == 0 and "altered topic" in err
    with Admin(bootstrap_servers=kafka.bootstrap()) as a:
        _configs(a, "topic", topic, _value("cleanup.policy", "delete,compact"))
    rc, out, _ = run("configs", "describe", "--topic", topic, "--json")
    got = {c["name"]: c for c in map(json.loads, out.splitlines())}
    assert rc == 0 and got["retention.ms"]["value"] == "7200000" and got["retention.ms"]["source"] == DYNAMIC_TOPIC
    assert got["cleanup.policy"]["value"] == "delete,compact" and got["cleanup.policy"]["resource_name"] == topic
    assert run("configs", "alter", "--topic", topic, "--subtract", "cleanup.policy=delete",
               "--delete", "retention.ms")[0] == 0
    with Admin(bootstrap_servers=kafka.bootstrap()) as a:
        _configs(a, "topic", topic, _value("retention.ms", "604800000"))
    rc, out, _ = run("configs", "describe", "--topic", topic)
    rows = {line.split("\t")[0]: line.split("\t") for line in out.splitlines()[1:]}
    assert rows["cleanup.policy"][1] == "compact" and rows["retention.ms"][1:4] == ["604800000", "5", "yes"]
    with pytest.raises(SystemExit, match="name one of"):
        main(["configs", "describe", *b])
    assert run("topics", "delete", topic)[0] == 0


def test_java_reads_back_what_kwire_set(kafka):
    """Kafka's Java AdminClient reads the values kwire's
    IncrementalAlterConfigs set on a topic and a group, as kwire's
    DescribeConfigs does (the blocking admin only: the requests are the
    same on both drivers, and a JVM costs seconds)."""
    from support.java_peer import java_describe_configs

    topic, group = _name("cfg-java"), _name("cfg-java-group")
    with Admin(bootstrap_servers=kafka.bootstrap()) as a:
        a.create_topics([NewTopic(topic, 1)])
        a.incremental_alter_configs({("topic", topic): [AlterConfigOp("retention.ms", "7654321"),
                                                        AlterConfigOp("cleanup.policy", "compact", "append")],
                                     ("group", group): [AlterConfigOp("consumer.heartbeat.interval.ms", "6000")]})
        mine = {"topic": _configs(a, "topic", topic, _value("cleanup.policy", "delete,compact")),
                "group": _configs(a, "group", group, _value("consumer.heartbeat.interval.ms", "6000"))}
    java = java_describe_configs({"bootstrap.servers": kafka.bootstrap()}, [("topic", topic), ("group", group)])
    assert java[("topic", topic)]["retention.ms"] == "7654321"
    assert java[("topic", topic)]["cleanup.policy"] == "delete,compact"
    assert java[("group", group)]["consumer.heartbeat.interval.ms"] == "6000"
    for kind, name in java:
        assert java[(kind, name)] == {n: e.value for n, e in mine[kind].items()}
