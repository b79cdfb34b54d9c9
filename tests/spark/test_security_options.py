"""Spark's Kafka security options through ``format("kwire")`` against
Apache Kafka's SASL and TLS listeners (tests/support/kafka.py):
``kafka.sasl.jaas.config`` (Plain and SCRAM login modules), the key and
trust stores (JKS and PKCS12, made by the JDK's keytool from the test PKI)
on the mutual-TLS listener, and what group id a read presents to the broker
(none: a DENY ACL on the query's ``kafka.group.id`` stops neither kwire nor
Spark's own connector, which get the same options).

Apache Kafka only: Tansu has no SASL or TLS listener.
"""

from __future__ import annotations

import os
import re
import stat
import time
import uuid

import pytest

from kwire.acl import AclBinding
from kwire.admin import Admin
from kwire.consumer import Consumer
from kwire.errors import GroupAuthorizationFailedError
from kwire.spark.security import translate_security

from support.stores import make_stores

from .conftest import kwire_read, kwire_write, new_topic, offsets_of, produce, spark_rows

pytestmark = pytest.mark.kafka

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


def sasl_options(kafka, listener: str, mechanism: str, module: str, user: str) -> dict:
    opts = {"kafka.security.protocol": listener.upper(), "kafka.sasl.mechanism": mechanism,
            "kafka.sasl.jaas.config": f'{module} required username="{user}" password="{kafka.users[user]}";'}
    if listener == "sasl_ssl":
        opts["kafka.ssl.truststore.location"] = kafka.pki.ca
        opts["kafka.ssl.truststore.type"] = "PEM"
    return opts


def round_trip(spark, bootstrap: str, plain_bootstrap: str, options: dict, rows: int = 20) -> None:
    """Write ``rows`` records with ``format("kwire")`` and ``options``,
    read them back with the same options, compare."""
    topic = new_topic(plain_bootstrap, 2, prefix="sec")
    df = spark.createDataFrame([(f"k{i}", f"v{i}", i % 2) for i in range(rows)], "key string, value string, "
                                                                                  "partition int")
    kwire_write(df, bootstrap, topic=topic, **options).save()
    got = spark_rows(kwire_read(spark, bootstrap, subscribe=topic, **options))
    assert sorted((r[1], r[3], r[4]) for r in got) == sorted(
        (i % 2, f"k{i}".encode(), f"v{i}".encode()) for i in range(rows))


@pytest.mark.parametrize("listener, mechanism, module", [
    ("sasl_plaintext", "PLAIN", PLAIN),
    ("sasl_plaintext", "SCRAM-SHA-256", SCRAM),
    ("sasl_ssl", "SCRAM-SHA-512", SCRAM),
])
def test_sasl_jaas_config_read_and_write(spark, kafka, listener, mechanism, module):
    round_trip(spark, kafka.bootstrap(listener), kafka.bootstrap("plaintext"),
               sasl_options(kafka, listener, mechanism, module, "alice"))


def test_wrong_password_and_unsupported_login_module(spark, kafka):
    from pyspark.errors import PySparkException

    opts = sasl_options(kafka, "sasl_plaintext", "SCRAM-SHA-256", SCRAM, "alice")
    opts["kafka.sasl.jaas.config"] = f'{SCRAM} required username="alice" password="not-hers";'
    topic = new_topic(kafka.bootstrap("plaintext"), 1, prefix="sec")
    with pytest.raises(PySparkException, match="(?i)authentication"):
        kwire_read(spark, kafka.bootstrap("sasl_plaintext"), subscribe=topic, **opts).collect()
    opts["kafka.sasl.jaas.config"] = 'com.example.CustomLoginModule required username="alice";'
    with pytest.raises(PySparkException, match="login module com.example.CustomLoginModule is not supported by "
                                               "kwire"):
        kwire_read(spark, kafka.bootstrap("sasl_plaintext"), subscribe=topic, **opts).collect()


# ---------------------------------------------------------------- key stores
@pytest.fixture(scope="module")
def stores(kafka, tmp_path_factory):
    """JKS and PKCS12 trust and key stores of the test PKI, made by keytool
    (``support.stores.make_stores``), as ``kafka.*``
    options. The JKS key has its own password."""
    made = make_stores(kafka.pki, tmp_path_factory.mktemp("stores"))
    return {kind: {"kafka.security.protocol": "SSL", **{f"kafka.{k}": v for k, v in made[kind].items()}}
            for kind in ("JKS", "PKCS12")}


@pytest.mark.parametrize("kind", ["JKS", "PKCS12"])
def test_key_and_trust_stores_on_mutual_tls(spark, kafka, stores, kind):
    round_trip(spark, kafka.bootstrap("ssl"), kafka.bootstrap("plaintext"), stores[kind])
    # what the stores became in this process: PEM files only its user can read, in a private directory
    cfg = translate_security({k[len("kafka."):]: v for k, v in stores[kind].items()})
    assert not any(k.startswith(("ssl.keystore", "ssl.truststore")) for k in cfg)
    for name in ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location"):
        mode = os.stat(cfg[name]).st_mode
        assert stat.S_IMODE(mode) == 0o600, (name, oct(mode))
        assert stat.S_IMODE(os.stat(os.path.dirname(cfg[name])).st_mode) == 0o700
    assert b"PRIVATE KEY" in open(cfg["ssl.key.location"], "rb").read()


def test_pem_text_options_on_mutual_tls(spark, kafka):
    """Java's ssl.truststore.certificates, ssl.keystore.certificate.chain
    and ssl.keystore.key as kafka.* options, each PEM block's base64 on one
    line as an option's value often holds it: written to private files in
    each process; the key never reaches an option handed on."""
    def one_line(path: str) -> str:
        return re.sub(r"-----\n(.*?)\n-----", lambda m: "-----" + m.group(1).replace("\n", "") + "-----",
                      open(path).read(), flags=re.DOTALL)
    opts = {"kafka.security.protocol": "SSL", "kafka.ssl.truststore.certificates": one_line(kafka.pki.ca),
            "kafka.ssl.keystore.certificate.chain": one_line(kafka.pki.client_cert),
            "kafka.ssl.keystore.key": one_line(kafka.pki.client_key)}
    round_trip(spark, kafka.bootstrap("ssl"), kafka.bootstrap("plaintext"), opts)
    cfg = translate_security({k[len("kafka."):]: v for k, v in opts.items()})
    assert not any(k.startswith(("ssl.keystore", "ssl.truststore")) for k in cfg)
    assert b"PRIVATE KEY" in open(cfg["ssl.key.location"], "rb").read()
    assert stat.S_IMODE(os.stat(cfg["ssl.key.location"]).st_mode) == 0o600


def test_store_errors_name_the_option(spark, kafka, stores):
    from pyspark.errors import PySparkException

    topic = new_topic(kafka.bootstrap("plaintext"), 1, prefix="sec")
    wrong = {**stores["JKS"], "kafka.ssl.keystore.password": "nope"}
    with pytest.raises(PySparkException, match="kafka.ssl.keystore.location .*keytool could not read the JKS store"):
        kwire_read(spark, kafka.bootstrap("ssl"), subscribe=topic, **wrong).collect()
    wrong = {**stores["PKCS12"], "kafka.ssl.truststore.password": "nope"}
    with pytest.raises(PySparkException, match="kafka.ssl.truststore.location .*cannot read the PKCS12 store"):
        kwire_read(spark, kafka.bootstrap("ssl"), subscribe=topic, **wrong).collect()
    no_key = {k: v for k, v in stores["PKCS12"].items() if not k.startswith("kafka.ssl.key")}
    with pytest.raises(PySparkException):             # the listener requires a client certificate
        kwire_read(spark, kafka.bootstrap("ssl"), subscribe=topic,
                   **{**no_key, "kafka.socket.connection.setup.timeout.ms": "3000",
                      "kafka.request.timeout.ms": "3000", "fetchOffset.numRetries": "1"}).collect()


# ------------------------------------------------------------------ group id
def test_group_id_is_never_presented_to_the_broker(spark, kafka):
    """alice is DENIED every operation on group G; reads as alice with
    ``kafka.group.id=G`` still work, through Spark's connector and through
    kwire: neither sends the group id to the broker (the connector's driver
    looks offsets up with an admin client, its executors assign and seek;
    kwire's do the same). A consumer that does use the group is refused,
    so the ACL is in force."""
    group = f"spark-deny-{uuid.uuid4().hex[:8]}"
    deny = AclBinding("group", group, principal="User:alice", permission_type="deny")
    plain = kafka.bootstrap("plaintext")
    topic = new_topic(plain, 2, prefix="sec")
    produce(plain, topic, 30, 2)
    admin_cfg = kafka.client_config("sasl_plaintext")
    with Admin(admin_cfg) as admin:
        admin.create_acls([deny])
        deadline = time.monotonic() + 10          # ACLs reach the authorizer through the metadata log
        while not admin.describe_acls(AclBinding("group", group, operation="any", permission_type="any",
                                                 principal=None, host=None)):
            assert time.monotonic() < deadline
            time.sleep(0.1)
    try:
        opts = {**sasl_options(kafka, "sasl_plaintext", "PLAIN", PLAIN, "alice"), "kafka.group.id": group}
        bootstrap = kafka.bootstrap("sasl_plaintext")
        expected = {(topic, p): list(range(15)) for p in range(2)}
        assert offsets_of(spark_rows(kwire_read(spark, bootstrap, subscribe=topic, **opts))) == expected
        reader = spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
        for k, v in opts.items():
            reader = reader.option(k, v)
        assert sorted((r.partition, r.offset) for r in reader.load().collect()) == [
            (p, o) for p in range(2) for o in range(15)]
        user = kafka.client_config("sasl_plaintext", user=("alice", kafka.users["alice"]))
        with Consumer({**user, "group.id": group, "enable.auto.commit": False}) as c:
            deadline = time.monotonic() + 10
            while True:                           # the ACL may reach the authorizer a moment later
                try:
                    c.committed([(topic, 0)], timeout=5)
                except GroupAuthorizationFailedError:
                    break
                assert time.monotonic() < deadline, "the DENY ACL on the group is not in force"
                time.sleep(0.2)
    finally:
        with Admin(admin_cfg) as admin:
            admin.delete_acls([AclBinding("group", group, principal=None, host=None, operation="any",
                                          permission_type="any")])
