"""The Spark source's and sink's ``kafka.sasl.jaas.config`` (with its Java
classes), without a broker or a Spark session: what each login module
becomes in the options the driver checks and in the executors' consumers and
producers (made from the pickled options, as Spark ships them), the
keytab found in the job's files, a token callback named as module:function,
and errors that name the ``kafka.*`` option and never show a secret or a
keytab's path. The mappings themselves: tests/sasl/test_login_options.py."""

from __future__ import annotations

import os
import pickle

import pytest

from kwire.config import CONSUMER, PRODUCER, resolve
from kwire.sasl.login import IAM_MODULE, IAM_OAUTH_HANDLER, KRB5_MODULE, OAUTH_MODULE, OIDC_HANDLERS
from kwire.spark.errors import SparkOptionError
from kwire.spark.options import parse_sink_options, parse_source_options

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9092", "kafka.security.protocol": "SASL_SSL"}
SECRET = "cl1ent-s3cret"


def executor_config(**opts):
    """The executor consumer's options of a read, from options pickled as Spark ships them."""
    shipped = pickle.loads(pickle.dumps(parse_source_options({**BOOT, "subscribe": "t", **opts}, streaming=False)))
    return resolve(CONSUMER, shipped.consumer_config("executor"))


def writer_config(**opts):
    shipped = pickle.loads(pickle.dumps(parse_sink_options({**BOOT, **opts})))
    return resolve(PRODUCER, shipped.producer_config())


def refused(match: str, *secrets: str, **opts) -> None:
    for parse in (lambda: parse_source_options({**BOOT, "subscribe": "t", **opts}, streaming=True),
                  lambda: parse_sink_options({**BOOT, **opts})):
        with pytest.raises(SparkOptionError, match=match) as e:
            parse()
        for secret in secrets:
            assert secret not in str(e.value)


def test_oidc_and_kip_1139_reach_the_executors():
    opts = {"kafka.sasl.mechanism": "OAUTHBEARER",
            "kafka.sasl.jaas.config": f'{OAUTH_MODULE} required clientId="spark" clientSecret="{SECRET}" '
                                      'scope="kafka" extension_logicalCluster="lkc-1";',
            "kafka.sasl.login.callback.handler.class": OIDC_HANDLERS[0],
            "kafka.sasl.oauthbearer.token.endpoint.url": "https://idp.example/token"}
    for cfg in (executor_config(**opts), writer_config(**opts)):
        assert (cfg["sasl_mechanism"], cfg["sasl_oauthbearer_method"], cfg["sasl_oauthbearer_client_id"],
                cfg["sasl_oauthbearer_client_secret"], cfg["sasl_oauthbearer_scope"],
                cfg["sasl_oauthbearer_extensions"]) == ("OAUTHBEARER", "oidc", "spark", SECRET, "kafka",
                                                        {"logicalCluster": "lkc-1"})
    cfg = executor_config(**{**opts, "kafka.sasl.jaas.config": f"{OAUTH_MODULE} required;",
                             "kafka.sasl.oauthbearer.jwt.retriever.class":
                                 "org.apache.kafka.common.security.oauthbearer.JwtBearerJwtRetriever",
                             "kafka.sasl.oauthbearer.assertion.file": "/run/assertion.jwt"})
    assert cfg["sasl_oauthbearer_grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer"
    assert cfg["sasl_oauthbearer_assertion_file"] == "/run/assertion.jwt"
    refused("kafka.sasl.oauthbearer.token.endpoint.url", SECRET,
            **{k: v for k, v in opts.items() if "endpoint" not in k})


def test_unsecured_jwts_and_delegation_tokens():
    cfg = executor_config(**{"kafka.sasl.mechanism": "OAUTHBEARER", "kafka.sasl.jaas.config":
                             f'{OAUTH_MODULE} required unsecuredLoginStringClaim_sub="alice" '
                             'unsecuredLoginLifetimeSeconds="300";'})
    assert cfg["enable_sasl_oauthbearer_unsecure_jwt"] is True
    assert cfg["sasl_oauthbearer_config"] == "principal=alice lifeSeconds=300"
    scram = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="tok" password="aG1hYw==" ' \
            'tokenauth="true";'
    for cfg in (executor_config(**{"kafka.sasl.mechanism": "SCRAM-SHA-256", "kafka.sasl.jaas.config": scram}),
                writer_config(**{"kafka.sasl.mechanism": "SCRAM-SHA-256", "kafka.sasl.jaas.config": scram})):
        assert (cfg["sasl_scram_tokenauth"], cfg["sasl_plain_username"]) == (True, "tok")


def test_a_token_callback_named_for_the_executors(tmp_path, monkeypatch):
    (tmp_path / "kwire_spark_tokens.py").write_text("def token(config):\n    return ('a.b.c', 4102444800.0)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    opts = {"kafka.sasl.mechanism": "OAUTHBEARER", "kafka.oauth.cb": "kwire_spark_tokens:token",
            "kafka.sasl.oauthbearer.config": "audience=kafka"}
    parsed = parse_source_options({**BOOT, "subscribe": "t", **opts}, streaming=False)
    assert parsed.kafka["oauth.cb"] == "kwire_spark_tokens:token"        # a string is what ships
    import kwire_spark_tokens

    for cfg in (executor_config(**opts), writer_config(**opts),
                executor_config(**opts, **{"kafka.sasl.jaas.config": f"{OAUTH_MODULE} required;"})):
        assert cfg["oauth_cb"] is kwire_spark_tokens.token and cfg["sasl_oauthbearer_config"] == "audience=kafka"
    refused("^kafka.oauth.cb: cannot import kwire_spark_missing", **{**opts, "kafka.oauth.cb": "kwire_spark_missing:t"})


def test_aws_msk_iam_region_per_process(monkeypatch):
    monkeypatch.setenv("AWS_REGION", "eu-central-1")
    for module, mechanism, extra in (
            (IAM_MODULE, "AWS_MSK_IAM",
             {"kafka.sasl.client.callback.handler.class": "software.amazon.msk.auth.iam.IAMClientCallbackHandler"}),
            (OAUTH_MODULE, "OAUTHBEARER",
             {"kafka.sasl.login.callback.handler.class": IAM_OAUTH_HANDLER,
              "kafka.sasl.client.callback.handler.class": IAM_OAUTH_HANDLER})):
        cfg = executor_config(**{"kafka.sasl.mechanism": mechanism, **extra,
                                 "kafka.sasl.jaas.config": f'{module} required awsProfileName="etl";'})
        assert (cfg["sasl_mechanism"], cfg["sasl_oauthbearer_method"], cfg["sasl_oauthbearer_aws_profile"],
                cfg["sasl_oauthbearer_aws_region"]) == ("OAUTHBEARER", "aws_msk_iam", "etl", "eu-central-1")


def test_keytab_shipped_with_the_job(tmp_path, monkeypatch):
    """``--files kafka.keytab`` and ``keyTab="./kafka.keytab"``: found in
    the working directory or in SparkFiles' root, by its relative path or
    its file name; the client gets the absolute path."""
    files = tmp_path / "userFiles"
    files.mkdir()
    (files / "kafka.keytab").write_bytes(b"\x05\x02")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setattr("kwire.spark.security._job_file_dirs", lambda: [str(files)])
    opts = {"kafka.sasl.kerberos.service.name": "kafka", "kafka.sasl.jaas.config":
            f'{KRB5_MODULE} required useKeyTab=true storeKey=true keyTab="./kafka.keytab" principal="etl@EXAMPLE.COM";'}
    for cfg in (executor_config(**opts), writer_config(**opts)):
        assert (cfg["sasl_mechanism"], cfg["sasl_kerberos_keytab"], cfg["sasl_kerberos_principal"],
                cfg["sasl_kerberos_service_name"]) == ("GSSAPI", str(files / "kafka.keytab"), "etl@EXAMPLE.COM", "kafka")
    # by its file name, when the JAAS path has directories of another host
    other = {**opts, "kafka.sasl.jaas.config": opts["kafka.sasl.jaas.config"].replace(
        "./kafka.keytab", "/etc/security/keytabs/kafka.keytab")}
    assert executor_config(**other)["sasl_kerberos_keytab"] == str(files / "kafka.keytab")
    # the working directory's copy comes first (YARN puts --files there)
    (work / "kafka.keytab").write_bytes(b"\x05\x02")
    assert executor_config(**opts)["sasl_kerberos_keytab"] == str(work / "kafka.keytab")


def test_a_missing_keytab_is_refused_without_its_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("kwire.spark.security._job_file_dirs", lambda: [])    # no SparkContext here
    secret_path = "./secret-dir/alice-prod.keytab"
    refused("^the keytab named in kafka.sasl.jaas.config is not in this process's working directory nor among the "
            "job's files \\(ship it with --files", secret_path, "alice-prod",
            **{"kafka.sasl.jaas.config": f'{KRB5_MODULE} required useKeyTab=true keyTab="{secret_path}" '
                                         'principal="alice@EXAMPLE.COM";'})
    refused("^kafka.sasl.kerberos.keytab is not in this process's working directory", secret_path, "alice-prod",
            **{"kafka.sasl.mechanism": "GSSAPI", "kafka.sasl.kerberos.keytab": secret_path})


def test_refusals_name_the_kafka_option_and_hide_secrets():
    refused("kafka.sasl.jaas.config: login module com.example.Custom is not supported by kwire", SECRET,
            **{"kafka.sasl.jaas.config": f'com.example.Custom required password="{SECRET}";'})
    refused("kafka.sasl.login.callback.handler.class=com.example.Handler is not supported by kwire", SECRET,
            **{"kafka.sasl.mechanism": "OAUTHBEARER", "kafka.sasl.login.callback.handler.class": "com.example.Handler",
               "kafka.sasl.jaas.config": f'{OAUTH_MODULE} required clientSecret="{SECRET}";'})
    refused("kafka.sasl.oauthbearer.client.secret contradicts clientSecret", SECRET, "other-secret",
            **{"kafka.sasl.mechanism": "OAUTHBEARER", "kafka.sasl.login.callback.handler.class": OIDC_HANDLERS[1],
               "kafka.sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
               "kafka.sasl.oauthbearer.client.secret": "other-secret",
               "kafka.sasl.jaas.config": f'{OAUTH_MODULE} required clientId="c" clientSecret="{SECRET}";'})
    refused("kafka.sasl.jaas.config: .*needs useKeyTab=true with keyTab, or useTicketCache=true",
            **{"kafka.sasl.jaas.config": f'{KRB5_MODULE} required principal="p";'})


def test_the_driver_checks_before_any_task(tmp_path, monkeypatch):
    """What the driver refuses is what the executors would: the options are
    translated (and their files found) on the driver as the query starts."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("kwire.spark.security._job_file_dirs", lambda: [])
    jaas = f'{KRB5_MODULE} required useKeyTab=true keyTab="k.keytab";'
    refused("the keytab named in kafka.sasl.jaas.config", **{"kafka.sasl.jaas.config": jaas})
    (tmp_path / "k.keytab").write_bytes(b"\x05\x02")
    opts = parse_source_options({**BOOT, "subscribe": "t", "kafka.sasl.jaas.config": jaas}, streaming=False)
    assert os.path.isabs(opts.consumer_config("driver")["sasl.kerberos.keytab"])


def test_a_streaming_planner_finds_the_jobs_files_in_the_root(monkeypatch, tmp_path):
    """PySpark 4's streaming planner is told ``<root>/streaming_job``, which
    Spark never makes: the job's files are looked for in the root itself."""
    import pyspark

    from kwire.spark import security

    (tmp_path / "alice.keytab").write_bytes(b"\x05\x02")
    monkeypatch.setattr(pyspark.SparkFiles, "getRootDirectory", lambda: str(tmp_path / "streaming_job"))
    assert security.find_job_file("alice.keytab") == str(tmp_path / "alice.keytab")
