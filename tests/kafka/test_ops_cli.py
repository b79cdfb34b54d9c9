"""The operator's commands of kwire.cli.cluster, and the admin actions
added to ``topics``, ``groups`` and ``log-dirs``, on Apache Kafka (the
``kafka`` fixture), run in-process with their text and ``--json`` output:
each change is checked through the cluster (the Admin calls, or a SASL
login), not only through what the command prints. Replicas moved between
brokers: tests/cluster/test_follower_fetch.py (``reassign-partitions``);
a replica moved between log dirs: tests/kafka/test_admin_log_dirs.py."""

from __future__ import annotations

import io
import json
import sys
import time
import uuid

import pytest

from kwire.acl import AclBinding
from kwire.admin import Admin, NewTopic
from kwire.consumer import Consumer
from kwire.producer import Producer
from support.cli_run import cli_runner

pytestmark = pytest.mark.kafka


def _rows(out: str) -> list:
    return [json.loads(line) for line in out.splitlines()]


def _topic(bootstrap: str, partitions: int = 1, records: int = 0) -> str:
    topic = f"ops-{uuid.uuid4().hex[:8]}"
    with Admin(bootstrap_servers=bootstrap) as a:
        a.create_topics([NewTopic(topic, partitions)])
    if records:
        with Producer(bootstrap_servers=bootstrap) as p:
            for i in range(records):
                p.send(topic, b"%d" % i, partition=0)
            p.flush(10)
    return topic


def _until(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out: {what}"
        time.sleep(0.2)


def test_acls_add_list_remove(kafka, capsys):
    run = cli_runner(capsys, kafka.bootstrap())
    topic = f"acl-{uuid.uuid4().hex[:8]}"
    _, out, err = run("acls", "add", "--allow-principal", "User:alice", "--operation", "Read",
                      "--operation", "DescribeConfigs", "--topic", topic, "--json")
    assert {(r["operation"], r["permission"]) for r in _rows(out)} == {("read", "allow"),
                                                                        ("describe_configs", "allow")}
    run("acls", "add", "--allow-principal", "User:bob", "--producer", "--topic", topic)
    with Admin(bootstrap_servers=kafka.bootstrap()) as a:
        listed = a.describe_acls(AclBinding("topic", topic, "literal", None, None, "any", "any"))
    assert sorted((b.principal, b.operation) for b in listed) == [
        ("User:alice", "describe_configs"), ("User:alice", "read"), ("User:bob", "create"), ("User:bob", "describe"),
        ("User:bob", "write")]
    _, out, _ = run("acls", "list", "--topic", topic, "--principal", "User:bob", "--json")
    assert sorted(r["operation"] for r in _rows(out)) == ["create", "describe", "write"]
    _, out, err = run("acls", "remove", "--allow-principal", "User:bob", "--topic", topic)
    assert len(out.splitlines()) == 1 + 3 and "nothing removed: add --force" in err
    _, out, err = run("acls", "remove", "--allow-principal", "User:bob", "--topic", topic, "--force")
    assert "removed 3 ACLs" in err
    _, out, _ = run("acls", "list", "--topic", topic, "--json")
    assert {r["principal"] for r in _rows(out)} == {"User:alice"}
    run("acls", "remove", "--topic", topic, "--force")
    with pytest.raises(SystemExit, match="--allow-principal"):
        run("acls", "add", "--topic", topic)


def test_quotas_describe_alter(kafka, capsys):
    run = cli_runner(capsys, kafka.bootstrap())
    client = f"ops-{uuid.uuid4().hex[:8]}"
    entity = ["--user", "alice", "--client-id", client]
    run("quotas", "alter", *entity, "--add", "producer_byte_rate=1048576", "--add", "request_percentage=50")

    def shown():
        return {r["quota"]: r["value"] for r in _rows(run("quotas", "describe", *entity, "--strict", "--json")[1])}
    _until(lambda: shown() == {"producer_byte_rate": 1048576.0, "request_percentage": 50.0}, 10, "the quotas")
    assert _rows(run("quotas", "describe", *entity, "--strict", "--json")[1])[0]["entity"] == \
        f"client-id={client},user=alice"
    run("quotas", "alter", *entity, "--delete", "producer_byte_rate", "--delete", "request_percentage")
    _until(lambda: shown() == {}, 10, "the quotas removed")
    with pytest.raises(SystemExit, match="name the entity"):
        run("quotas", "describe")


def test_user_scram_credentials_log_in(kafka, capsys, monkeypatch):
    run = cli_runner(capsys, kafka.bootstrap())
    user, password = f"ops{uuid.uuid4().hex[:6]}", "not-in-argv-" + uuid.uuid4().hex[:6]
    monkeypatch.setattr(sys, "stdin", io.StringIO(password + "\n"))
    _, _, err = run("user-scram", "alter", "--user", user, "--mechanism", "SCRAM-SHA-256", "--iterations", "4096",
                    "--password", "-")
    assert "set 1 SCRAM credentials" in err and password not in err
    _, out, _ = run("user-scram", "describe", "--user", user, "--json")
    assert _rows(out) == [{"user": user, "mechanism": "SCRAM-SHA-256", "iterations": 4096}]
    cfg = kafka.client_config("sasl_plaintext", user=(user, password), mechanism="SCRAM-SHA-256")
    deadline = time.monotonic() + 15          # the brokers take it from the metadata log
    while True:
        try:
            with Admin(cfg) as a:
                a.list_topics(timeout=5)
            break
        except Exception:
            assert time.monotonic() < deadline, "the new credential does not log in"
            time.sleep(0.3)
    run("user-scram", "alter", "--user", user, "--mechanism", "SCRAM-SHA-256", "--delete")
    rc, _, err = cli_runner(capsys, kafka.bootstrap(), check=False)("user-scram", "describe", "--user", user)
    assert rc == 1 and "RESOURCE_NOT_FOUND" in err


def test_delete_records_leader_election_and_more_partitions(kafka, capsys, tmp_path):
    run = cli_runner(capsys, kafka.bootstrap())
    topic = _topic(kafka.bootstrap(), records=10)
    _, out, _ = run("delete-records", "--topic", topic, "--partition", "0", "--offset", "4", "--json")
    assert _rows(out) == [{"topic": topic, "partition": 0, "low_watermark": 4}]
    plan = tmp_path / "offsets.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "offset": 7}]}))
    _, out, _ = run("delete-records", "--offset-json-file", str(plan), "--json")
    assert _rows(out)[0]["low_watermark"] == 7
    with Consumer(bootstrap_servers=kafka.bootstrap()) as c:
        assert c.beginning_offsets([(topic, 0)]) == {(topic, 0): 7}
    _, out, _ = run("leader-election", "--election-type", "preferred", "--topic", topic, "--partition", "0", "--json")
    assert "ELECTION_NOT_NEEDED" in _rows(out)[0]["outcome"]          # one broker: it leads already
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"partitions": [{"topic": topic}]}))
    with pytest.raises(SystemExit, match=r"expected .*topic.*partition.*this entry is not"):
        run("leader-election", "--election-type", "preferred", "--path-to-json-file", str(bad))
    run("topics", "alter", topic, "--partitions", "3")
    _, out, _ = run("topics", "describe", topic)
    assert "partitions=3" in out
    _, out, _ = run("reassign-partitions", "--list", "--json")
    assert all(r["topic"] != topic for r in _rows(out))


def test_group_offsets_deleted(kafka, capsys):
    run = cli_runner(capsys, kafka.bootstrap())
    topic, group = _topic(kafka.bootstrap(), 2), f"ops-{uuid.uuid4().hex[:8]}"
    with Consumer(bootstrap_servers=kafka.bootstrap(), group_id=group) as c:
        c.commit({(topic, 0): 1, (topic, 1): 2})
    run("groups", "delete-offsets", group, "--topic", topic, "--partitions", "1")
    with Admin(bootstrap_servers=kafka.bootstrap()) as a:
        assert {tp.partition: om.offset for tp, om in a.list_group_offsets(group).items()} == {0: 1}
    run("groups", "delete-offsets", group, "--topic", topic)
    with Admin(bootstrap_servers=kafka.bootstrap()) as a:
        assert a.list_group_offsets(group) == {}
