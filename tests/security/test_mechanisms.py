"""Every way into the secure broker (tests/security/mechanisms.py: OIDC with a
secret, a client assertion and the JWT bearer grant, a token callback,
unsecured JWTs, Kerberos with a keytab and a ticket cache, a delegation
token), each on kwire's blocking clients and kwire.aio's (``kw``): an admin
call, produce, a consumer group that commits, a transaction read back with
read_committed. The broker names each client's principal as its way says.
No secret, token or keytab path reaches the log."""

from __future__ import annotations

import logging
import time
import uuid

import pytest

from kwire.admin import NewTopic
from security.mechanisms import WAYS, options

pytestmark = pytest.mark.kafka

N = 20


def _secrets(sk, cfg, token):
    kc = sk.keycloak
    return [s for s in (kc.client.secret, kc.bearer_client.secret, token.password, sk.keytabs["alice"],
                        kc.jwt_private_key, kc.assertion_private_key) if s]


def _consume(consumer, topic, want, timeout=30.0):
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        for recs in consumer.poll(200).values():
            got += [r.value for r in recs]
    return got


@pytest.mark.parametrize("way", WAYS)
def test_admin_produce_group_and_transaction(kw, secure_kafka, krb5_env, token, way, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    cfg = options(secure_kafka, way, aio=kw.name == "aio", tmp=tmp_path, token=token)
    topic, group = f"sec-{way}-{uuid.uuid4().hex[:6]}", f"g-{way}-{uuid.uuid4().hex[:6]}"
    with kw.Admin(cfg) as admin:
        admin.create_topics([NewTopic(topic, 2)])
        assert admin.describe_cluster(timeout=20).cluster_id
    with kw.Producer(cfg) as producer:
        for i in range(N):
            producer.send(topic, b"r%d" % i, partition=i % 2)
        producer.flush(30)
    with kw.Consumer(cfg, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False) as consumer:
        consumer.subscribe([topic])
        assert sorted(_consume(consumer, topic, N)) == sorted(b"r%d" % i for i in range(N))
        consumer.commit()
    with kw.Producer(cfg, transactional_id=f"txn-{way}-{uuid.uuid4().hex[:6]}") as txn:
        txn.init_transactions()
        txn.begin_transaction()
        txn.send(topic, b"in-txn", partition=0)
        txn.commit_transaction()
    with kw.Consumer(cfg, isolation_level="read_committed", auto_offset_reset="earliest") as reader:
        reader.assign([(topic, 0)])
        assert b"in-txn" in _consume(reader, topic, N // 2 + 1)
    with kw.Admin(cfg) as admin:
        committed = admin.list_group_offsets(group)
        assert sum(o.offset for o in committed.values()) == N
    for secret in _secrets(secure_kafka, cfg, token):
        assert secret not in caplog.text
