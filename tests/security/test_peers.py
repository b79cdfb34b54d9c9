"""kwire and Kafka's Java client on the same secured listeners with the same
credentials: what one writes the other reads, both ways, on OAUTHBEARER
(Keycloak OIDC), unsecured JWTs and GSSAPI (confluent-kafka's OIDC and the
Java client alone: test_servers.py); a consumer group on the OIDC listener
shared by a Java member and a kwire member; and the ``kwire`` command with
the same options (``-X`` and ``--command-config`` with a JAAS entry, as
Kafka's tools take them). Amazon MSK's IAM cannot be reached from here: its
token is made by AWS's signer and carried by the OAUTHBEARER exchange, which
a Kafka broker refuses as the wrong kind of token (the exchange itself is
what is tested)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import pytest

from kwire.admin import Admin, NewTopic
from kwire.consumer import Consumer
from kwire.producer import Producer
from kwire.sasl import SaslAuthenticationError
from security.mechanisms import options
from support.java_peer import JavaGroupMember, java_consume, java_produce, send_op

pytestmark = pytest.mark.kafka

N = 40


def _topic(sk, name, partitions=1):
    topic = f"peer-{name}-{uuid.uuid4().hex[:6]}"
    with Admin(sk.client_config("scram")) as admin:
        admin.create_topics([NewTopic(topic, partitions)])
    return topic


@pytest.mark.parametrize("way,listener", [("oidc", "oauth"), ("unsecured", "unsecured"), ("gssapi", "gssapi")])
def test_kwire_and_java_read_each_other(secure_kafka, krb5_env, way, listener):
    topic = _topic(secure_kafka, way)
    cfg = options(secure_kafka, way)
    java, jvm = secure_kafka.java_config(listener), secure_kafka.java_options()
    with Producer(cfg) as producer:
        for i in range(N):
            producer.send(topic, b"kwire-%d" % i, partition=0)
        producer.flush(30)
    sent = java_produce(java, [send_op(topic, b"java-%d" % i, partition=0) for i in range(N)], timeout=90,
                        jvm_options=jvm)
    assert all(e.get("error") is None for e in sent)
    got = java_consume(java, assign=[(topic, 0)], until_end=True, timeout=90, jvm_options=jvm)
    want = [b"kwire-%d" % i for i in range(N)] + [b"java-%d" % i for i in range(N)]
    assert [r.value for r in got] == want
    with Consumer(cfg, auto_offset_reset="earliest") as consumer:
        consumer.assign([(topic, 0)])
        values, deadline = [], time.monotonic() + 30
        while len(values) < 2 * N and time.monotonic() < deadline:
            values += [r.value for recs in consumer.poll(200).values() for r in recs]
    assert values == want


def test_a_group_of_java_and_kwire_members_over_oidc(secure_kafka):
    topic, group = _topic(secure_kafka, "group", 4), f"peer-group-{uuid.uuid4().hex[:6]}"
    java_cfg = {**secure_kafka.java_config("oauth"), "group.id": group, "auto.offset.reset": "earliest"}
    java = JavaGroupMember(java_cfg, [topic], name="java-oidc", jvm_options=secure_kafka.java_options())
    try:
        java.wait_for("assigned", timeout=60)
        cfg = options(secure_kafka, "oidc")
        with Consumer(cfg, group_id=group, auto_offset_reset="earliest") as mine:
            mine.subscribe([topic])
            got, deadline = [], time.monotonic() + 60
            while time.monotonic() < deadline and not (mine.assignment() and java.snapshot()[1]
                                                       and len(mine.assignment()) + len(java.snapshot()[1]) == 4):
                got += [r.value for recs in mine.poll(200).values() for r in recs]
            assert mine.assignment() and java.snapshot()[1], "the partitions were not shared"
            with Producer(cfg) as producer:
                for i in range(N):
                    producer.send(topic, b"g-%d" % i, partition=i % 4)
                producer.flush(30)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and len(got) + len(java.snapshot()[0]) < N:
                got += [r.value for recs in mine.poll(200).values() for r in recs]
            both = got + [r.value for r in java.snapshot()[0]]
            assert sorted(both) == sorted(b"g-%d" % i for i in range(N))      # each record once, by one of them
    finally:
        java.stop()


def _kwire_command(*args, env=None, stdin=None):
    return subprocess.run([sys.executable, "-m", "kwire", *args], capture_output=True, text=True, timeout=90,
                          input=stdin, env=env)


def test_the_kwire_command_with_oidc_and_kerberos(secure_kafka, krb5_env, tmp_path):
    kc = secure_kafka.keycloak
    topic = _topic(secure_kafka, "cli")
    oidc = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=OAUTHBEARER",
            "-X", "sasl.oauthbearer.method=oidc", "-X", f"sasl.oauthbearer.token.endpoint.url={secure_kafka.token_endpoint}",
            "-X", f"sasl.oauthbearer.client.id={kc.client.client_id}",
            "-X", f"sasl.oauthbearer.client.secret={kc.client.secret}"]
    done = _kwire_command("produce", topic, "-b", secure_kafka.bootstrap("oauth"), *oidc, stdin="one\ntwo\n")
    assert done.returncode == 0, done.stderr
    props = tmp_path / "client.properties"           # as Kafka's tools take a client's settings
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=GSSAPI\nsasl.kerberos.service.name=kafka\n"
                     "sasl.jaas.config=com.sun.security.auth.module.Krb5LoginModule required \\\n"
                     f"    useKeyTab=true keyTab=\"{secure_kafka.keytabs['alice']}\" "
                     f"principal=\"{secure_kafka.principals['alice']}\";\n")
    done = _kwire_command("consume", topic, "-b", secure_kafka.bootstrap("gssapi"), "--command-config", str(props),
                          "-e", "--format", "value", env={**os.environ, "KRB5_CONFIG": secure_kafka.krb5_conf})
    assert done.returncode == 0 and done.stdout.split() == ["one", "two"], done.stderr
    assert kc.client.secret not in done.stderr and secure_kafka.keytabs["alice"] not in done.stderr


def test_msk_iam_tokens_travel_through_the_oauthbearer_exchange(secure_kafka, monkeypatch):
    """AWS's signer makes the token (a presigned kafka-cluster:Connect request
    for the region, from test credentials); kwire sends it in the
    OAUTHBEARER exchange; Kafka, which is not MSK, refuses it as a token."""
    import base64
    from urllib.parse import parse_qs, urlparse

    from kwire.sasl import authenticator
    from kwire.config import PRODUCER, resolve

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDKWIRETEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "kwire-test-aws-secret")
    cfg = secure_kafka.client_config("oauth", **{"sasl.mechanism": "OAUTHBEARER",
                                                 "sasl.oauthbearer.method": "aws_msk_iam",
                                                 "sasl.oauthbearer.aws.region": "eu-west-1"})
    token = authenticator(resolve(PRODUCER, cfg))._fetch()
    url = urlparse(base64.urlsafe_b64decode(token.value + "=" * (-len(token.value) % 4)).decode())
    query = parse_qs(url.query)
    assert url.netloc == "kafka.eu-west-1.amazonaws.com" and query["Action"] == ["kafka-cluster:Connect"]
    assert query["X-Amz-Credential"][0].startswith("AKIDKWIRETEST/") and "/eu-west-1/kafka-cluster/" in \
        query["X-Amz-Credential"][0]
    assert 800 < token.lifetime_left() <= 900
    with pytest.raises(SaslAuthenticationError, match=r"refused SASL OAUTHBEARER.*status invalid_token") as info:
        with Admin({**cfg, "request.timeout.ms": 10000}) as admin:
            admin.list_topics(timeout=10)
    assert "kwire-test-aws-secret" not in str(info.value) and token.value not in str(info.value)
