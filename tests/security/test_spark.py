"""Spark's source and sink through each way in, as Spark's connector users
write it (``kafka.sasl.jaas.config`` and the options beside it, kwire.sasl.login):
OIDC with Kafka's login callback handler, unsecured JWTs, a token callback
named ``module:function`` and shipped as a job's Python file, Kerberos with
a keytab shipped with the job (``SparkContext.addFile``: the executors find
it by name) and a delegation token. For each, a batch write, a batch read
and a streaming read (``availableNow``) of the same records.

This process's local[2] session (one per process: another module's, if it
made one first), its Python workers finding the test KDC through
``KRB5_CONFIG`` as executors find a cluster's krb5.conf (tests/conftest.py).
"""

from __future__ import annotations

import textwrap
import uuid

import pytest

pytest.importorskip("pyspark")

from kwire.admin import Admin, NewTopic  # noqa: E402
from kwire.sasl.login import KRB5_MODULE, OAUTH_MODULE, OIDC_HANDLERS, SCRAM_MODULE  # noqa: E402

pytestmark = pytest.mark.kafka

OAUTH, OIDC_HANDLER, KRB5, SCRAM = OAUTH_MODULE, OIDC_HANDLERS[0], KRB5_MODULE, SCRAM_MODULE
ROWS = 30


@pytest.fixture(scope="module")
def spark(krb5_env, secure_kafka, tmp_path_factory):
    """The session (this process's, if another module made one: Spark has one
    per process), with a user's token module and alice's keytab added as
    ``spark-submit --py-files`` and ``--files`` would add them."""
    from pyspark.sql import SparkSession

    from kwire.demo import spark_session

    before = SparkSession.getActiveSession()
    session = spark_session("kwire-security")
    ship = tmp_path_factory.mktemp("job-files")
    callback = ship / "kwire_test_tokens.py"
    kc = secure_kafka.keycloak
    callback.write_text(textwrap.dedent(f'''\
        import time
        import requests

        def token():
            r = requests.post({kc.token_endpoint!r}, timeout=10, data={{"grant_type": "client_credentials",
                              "client_id": {kc.client.client_id!r}, "client_secret": {kc.client.secret!r}}})
            r.raise_for_status()
            return r.json()["access_token"], time.time() + r.json()["expires_in"]
        '''))
    session.sparkContext.addPyFile(str(callback))
    session.sparkContext.addFile(secure_kafka.keytabs["alice"])
    try:
        yield session
    finally:
        if before is None:
            session.stop()


def _options(sk, way, token):
    kc = sk.keycloak
    if way == "oidc":
        return "oauth", {"kafka.sasl.mechanism": "OAUTHBEARER",
                         "kafka.sasl.login.callback.handler.class": OIDC_HANDLER,
                         "kafka.sasl.oauthbearer.token.endpoint.url": sk.token_endpoint,
                         "kafka.sasl.jaas.config": f'{OAUTH} required clientId="{kc.client.client_id}" '
                                                   f'clientSecret="{kc.client.secret}";'}
    if way == "unsecured":
        return "unsecured_reauth", {"kafka.sasl.mechanism": "OAUTHBEARER",
                                    "kafka.sasl.jaas.config": f'{OAUTH} required unsecuredLoginStringClaim_sub="admin";'}
    if way == "callback":
        return "oauth", {"kafka.sasl.mechanism": "OAUTHBEARER", "kafka.oauth.cb": "kwire_test_tokens:token"}
    if way == "gssapi":
        return "gssapi", {"kafka.sasl.mechanism": "GSSAPI", "kafka.sasl.kerberos.service.name": "kafka",
                          "kafka.sasl.jaas.config": f'{KRB5} required useKeyTab=true storeKey=true '
                                                    f'keyTab="alice.keytab" principal="{sk.principals["alice"]}";'}
    if way == "token":
        return "scram", {"kafka.sasl.mechanism": "SCRAM-SHA-256",
                         "kafka.sasl.jaas.config": f'{SCRAM} required username="{token.token_id}" '
                                                   f'password="{token.password}" tokenauth="true";'}
    raise ValueError(way)


@pytest.mark.parametrize("way", ["oidc", "unsecured", "callback", "gssapi", "token"])
def test_batch_write_read_and_stream(spark, secure_kafka, token, way, tmp_path):
    listener, opts = _options(secure_kafka, way, token)
    opts = {"kafka.bootstrap.servers": secure_kafka.bootstrap(listener), "kafka.security.protocol": "SASL_PLAINTEXT",
            **opts}
    topic = f"spark-sec-{way}-{uuid.uuid4().hex[:6]}"
    with Admin(secure_kafka.client_config("scram")) as admin:
        admin.create_topics([NewTopic(topic, 2)])
    df = spark.createDataFrame([(f"k{i}", f"v{i}", i % 2) for i in range(ROWS)], "key string, value string, partition int")
    writer = df.write.mode("append").format("kwire").option("topic", topic)
    for k, v in opts.items():
        writer = writer.option(k, v)
    writer.save()
    want = sorted((f"k{i}".encode(), f"v{i}".encode()) for i in range(ROWS))
    reader = spark.read.format("kwire").option("subscribe", topic)
    for k, v in opts.items():
        reader = reader.option(k, v)
    assert sorted((bytes(r.key), bytes(r.value)) for r in reader.load().collect()) == want
    stream = spark.readStream.format("kwire").option("subscribe", topic).option("startingOffsets", "earliest")
    for k, v in opts.items():
        stream = stream.option(k, v)
    out = str(tmp_path / "out")
    q = (stream.load().selectExpr("key", "value").writeStream.format("parquet").option("path", out)
         .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert q.exception() is None
    assert sorted((bytes(r.key), bytes(r.value)) for r in spark.read.parquet(out).collect()) == want
