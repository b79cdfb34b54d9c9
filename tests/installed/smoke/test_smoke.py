"""The installed package, with the source tree off the path: every public
module imports (or, without its extra, says which extra to install); the
``kwire`` command; produce and consume with the blocking clients and with
kwire.aio on the bundled broker; what each extra adds (Arrow and with it
kwire.scan and the JSON format, key stores, ``format("kwire")`` on Spark),
and the error naming the extra when it is absent."""

from __future__ import annotations

import asyncio
import importlib
import importlib.machinery
import importlib.util
import os
import pkgutil
import re
import subprocess
import sys
import sysconfig

import pytest

import kwire

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
#: The extra that brings each optional top-level package kwire uses.
EXTRA_OF = {"pyarrow": "arrow", "cryptography": "tls", "pyspark": "spark", "jwt": "oauth", "requests": "oauth",
            "google.protobuf": "protobuf", "grpc_tools": "protobuf",
            "aws_msk_iam_sasl_signer": "aws", "gssapi": "kerberos", "httpx": "registry",
            "opentelemetry": "otel", "prometheus_client": "prometheus"}


def _have(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:          # a dotted name whose parent is absent (google.protobuf without google)
        return False


def test_kwire_is_the_installed_wheel_not_the_source_tree():
    site = os.path.realpath(sysconfig.get_paths()["purelib"])
    assert os.path.realpath(kwire.__file__).startswith(site + os.sep), kwire.__file__
    assert kwire._codec.__file__.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))
    assert not any(p.rstrip("/").endswith("/src") for p in sys.path), sys.path


def test_extras_bring_what_they_declare(extra):
    for module, name in EXTRA_OF.items():
        if extra == name or (extra == "spark" and module in ("pyarrow", "cryptography")) or \
                (extra == "oauth" and module == "cryptography") or (extra == "protobuf" and module in ("pyarrow",
                                                                                                     "httpx")):
            assert _have(module), f"kwire[{extra}] did not install {module}"


def _modules():
    for info in pkgutil.walk_packages(kwire.__path__, "kwire."):
        yield info.name


def test_every_module_imports_or_names_its_extra():
    missing_extra = []
    for name in _modules():
        try:
            importlib.import_module(name)
        except ImportError as e:
            absent = [m for m in EXTRA_OF if not _have(m)]
            named = re.findall(r"kwire\[(\w+)", str(e))
            assert named and set(named) <= {EXTRA_OF[m] for m in absent} | {"broker"}, f"{name}: {e}"
            missing_extra.append(name)
    if all(_have(m) for m in EXTRA_OF):
        assert not missing_extra


def test_kwire_command(bootstrap, topic):
    kw = os.path.join(os.path.dirname(sys.executable), "kwire")
    run = lambda *a, **k: subprocess.run([kw, *a], capture_output=True, text=True, timeout=60, **k)  # noqa: E731
    assert run("--help").returncode == 0
    done = run("produce", topic, "-b", bootstrap, "-z", "zstd", input="one\ntwo\nthree\n")
    assert done.returncode == 0, done.stderr
    done = run("consume", topic, "-b", bootstrap, "-e", "--format", "value")
    assert done.returncode == 0 and sorted(done.stdout.split()) == ["one", "three", "two"], done


@pytest.mark.parametrize("codec", CODECS)
def test_blocking_produce_and_consume(bootstrap, topic, codec):
    values = [b"v-%d-" % i + bytes(i % 7) for i in range(500)]
    with kwire.Producer(bootstrap_servers=bootstrap, compression_type=codec, linger_ms=5) as p:
        for i, v in enumerate(values):
            p.send(topic, v, key=b"k%d" % i, headers=[("h", b"%d" % i)], partition=i % 2)
        p.flush()
    got = []
    with kwire.Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        c.assign([kwire.TopicPartition(topic, 0), kwire.TopicPartition(topic, 1)])
        for _ in range(100):
            for records in c.poll(500).values():
                got.extend(records)
            if len(got) >= len(values):
                break
    assert sorted(r.value for r in got) == sorted(values)
    # kwire.metrics, its compiled measure (kwire._core.meter) and the decoder's counters, as installed
    assert p.metrics()["producer-metrics"]["record-send-total"] == len(values)
    assert c.metrics()["consumer-fetch-manager-metrics"]["records-consumed-total"] == len(values)


def test_asyncio_produce_and_consume(bootstrap, topic):
    from kwire.aio import AsyncConsumer, AsyncProducer

    async def main():
        async with AsyncProducer(bootstrap_servers=bootstrap, compression_type="lz4") as p:
            for i in range(300):
                await p.send(topic, b"a%d" % i, partition=i % 2)
            await p.flush()
        got = []
        async with AsyncConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
            c.assign([(topic, 0), (topic, 1)])
            for _ in range(100):
                for records in (await c.getmany(timeout_ms=500)).values():
                    got.extend(r.value for r in records)
                if len(got) >= 300:
                    break
        return got

    assert sorted(asyncio.run(main())) == sorted(b"a%d" % i for i in range(300))


# ----------------------------------------------------------------- extras
def test_arrow(bootstrap, topic):
    builder = kwire.RecordBatchBuilder("lz4")
    builder.append(b"x", key=b"k")
    data = builder.build()
    if not _have("pyarrow"):
        with pytest.raises(ImportError, match=r"kwire\[arrow\]"):
            kwire.decode_columnar(data)
        with kwire.Producer(bootstrap_servers=bootstrap) as p, pytest.raises(ImportError, match=r"kwire\[arrow\]"):
            p.send_arrow(topic, object())
        with _consumer(bootstrap, topic) as c, pytest.raises(ImportError, match=r"kwire\[arrow\]"):
            c.poll_columnar(100)
        return
    import pyarrow as pa

    assert kwire.decode_columnar(data).record_batch.column("value").to_pylist() == [b"x"]
    with kwire.Producer(bootstrap_servers=bootstrap) as p:
        p.send_arrow(topic, pa.record_batch({"value": [b"a", b"b"], "partition": pa.array([0, 0], pa.int32())}))
        p.flush()
    with _consumer(bootstrap, topic) as c:
        rows = []
        for _ in range(50):
            rows += [v for rb in c.poll_columnar(500).values() for v in rb.column("value").to_pylist()]
            if len(rows) >= 2:
                break
    assert rows == [b"a", b"b"]


def test_scan_and_the_json_format(bootstrap, topic):
    """kwire.scan over JSON values typed by the JSON format (kwire[arrow]),
    or, without pyarrow, the error naming the extra."""
    if not _have("pyarrow"):
        with pytest.raises(ImportError, match=r"kwire\[arrow\]"):
            kwire.scan(topic, bootstrap_servers=bootstrap)
        return
    with kwire.Producer(bootstrap_servers=bootstrap) as p:
        for i in range(3):
            p.send(topic, b'{"n": %d, "at": "2024-05-01T00:00:00Z"}' % i, partition=0)
        p.flush()
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "at": {"type": "string",
                                                                                "format": "date-time"}}}
    table = kwire.scan(topic, bootstrap_servers=bootstrap, value_format=("json", {"schema": schema})).read_all()
    assert [v["n"] for v in table.column("value").to_pylist()] == [0, 1, 2]
    assert table.schema.field("value").type.field("at").type.tz == "UTC"


def _consumer(bootstrap, topic):
    c = kwire.Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    c.assign([kwire.TopicPartition(topic, 0)])
    return c


def test_tls_key_stores(tmp_path):
    from kwire.stores import pem_files

    store = tmp_path / "client.p12"
    options = {"ssl_keystore_location": str(store), "ssl_keystore_type": "PKCS12", "ssl_keystore_password": "pw"}
    if not _have("cryptography"):
        store.write_bytes(b"\x30\x82")
        with pytest.raises(Exception, match=re.escape("kwire[tls]")):
            pem_files(options)
        return
    store.write_bytes(_pkcs12(b"pw"))
    files = pem_files(options)
    with open(files.certfile, "rb") as f:
        assert f.read().startswith(b"-----BEGIN CERTIFICATE-----")


def _pkcs12(password: bytes) -> bytes:
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import BestAvailableEncryption, pkcs12
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "smoke")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .sign(key, hashes.SHA256()))
    return pkcs12.serialize_key_and_certificates(b"smoke", key, cert, None, BestAvailableEncryption(password))


def test_spark_format_kwire(bootstrap, topic):
    if not _have("pyspark"):
        with pytest.raises(ImportError, match=re.escape("kwire[spark]")):
            importlib.import_module("kwire.spark")
        return
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import kwire.spark

    spark = (SparkSession.builder.master("local[1]").appName("kwire-smoke").config("spark.ui.enabled", "false")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    try:
        kwire.spark.register(spark)
        df = spark.createDataFrame([(b"k%d" % i, b"v%d" % i) for i in range(100)], "key binary, value binary")
        (df.write.mode("append").format("kwire").option("kafka.bootstrap.servers", bootstrap)
         .option("topic", topic).save())
        back = (spark.read.format("kwire").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
                .load())
        assert sorted(bytes(r.value) for r in back.select("value").collect()) == sorted(b"v%d" % i for i in range(100))
    finally:
        spark.stop()


# ------------------------------------------------------------- SASL extras
def _sasl_options(**kw):
    from kwire.config import PRODUCER, resolve

    return resolve(PRODUCER, {"bootstrap.servers": "127.0.0.1:9", "security.protocol": "SASL_SSL", **kw})


def test_oauth_extra(monkeypatch):
    """kwire[oauth]: unsecured JWTs are made and OIDC clients set up; without
    it, the error names the extra."""
    from kwire.config import ConfigError
    from kwire.sasl import authenticator

    oidc = dict(sasl_mechanism="OAUTHBEARER", sasl_oauthbearer_method="oidc", sasl_oauthbearer_client_id="c",
                sasl_oauthbearer_client_secret="s", sasl_oauthbearer_token_endpoint_url="https://idp.invalid/token")
    if not (_have("jwt") and _have("requests")):
        with pytest.raises(ConfigError, match=re.escape("kwire[oauth]")):
            authenticator(_sasl_options(**oidc))
        return
    assert authenticator(_sasl_options(**oidc)).what.startswith("the OIDC token endpoint")
    from kwire.sasl.oauth.unsecured import UnsecuredJwt

    tok = UnsecuredJwt({"principal": "smoke"})()
    assert tok.principal == "smoke" and tok.value.count(".") == 2


def test_aws_extra(monkeypatch):
    from kwire.config import ConfigError
    from kwire.sasl import authenticator

    opts = dict(sasl_mechanism="OAUTHBEARER", sasl_oauthbearer_method="aws_msk_iam",
                sasl_oauthbearer_aws_region="eu-west-1")
    if not _have("aws_msk_iam_sasl_signer"):
        with pytest.raises(ConfigError, match=re.escape("kwire[aws]")):
            authenticator(_sasl_options(**opts))
        return
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDSMOKETEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "smoke-secret")
    token = authenticator(_sasl_options(**opts))._fetch()
    assert 800 < token.lifetime_left() <= 900 and token.value


def test_kerberos_extra(tmp_path, monkeypatch):
    from kwire.config import ConfigError
    from kwire.sasl import SaslAuthenticationError, authenticator

    opts = dict(sasl_mechanism="GSSAPI", sasl_kerberos_ccache=f"FILE:{tmp_path / 'none.cc'}")
    if not _have("gssapi"):
        with pytest.raises(ConfigError, match=re.escape("kwire[kerberos]")):
            authenticator(_sasl_options(**opts))
        return
    monkeypatch.setenv("KRB5_CONFIG", str(tmp_path / "krb5.conf"))
    (tmp_path / "krb5.conf").write_text("[libdefaults]\n default_realm = SMOKE.TEST\n")
    with pytest.raises(SaslAuthenticationError, match="GSSAPI: no Kerberos credentials"):
        authenticator(_sasl_options(**opts)).mechanism("127.0.0.1").first()


# ---------------------------------------------------------- typed formats
def test_protobuf_extra():
    """kwire[protobuf]: .proto text compiled by grpcio-tools' protoc, values
    decoded to Arrow by the compiled core and encoded back; without it, the
    error names the extra."""
    if not (_have("google.protobuf") and _have("grpc_tools") and _have("pyarrow")):
        with pytest.raises(ImportError, match=re.escape("kwire[")):
            from kwire.formats.protobuf import parse_schema

            parse_schema('syntax = "proto3"; message M { int64 id = 1; }')
        return
    import pyarrow as pa
    from google.protobuf.message_factory import GetMessageClass

    from kwire.formats.protobuf import ProtobufFormat, parse_schema

    schema = parse_schema('syntax = "proto3"; import "google/protobuf/timestamp.proto"; '
                          'message M { int64 id = 1; repeated string tags = 2; google.protobuf.Timestamp at = 3; }')
    cls = GetMessageClass(schema.message([0]))
    m = cls(id=7, tags=["a", "b"])
    m.at.seconds = 1_700_000_000
    fmt = ProtobufFormat(schema)
    col = fmt.decode(pa.array([m.SerializeToString(), None]), topic="t", partition=0, offsets=pa.array([0, 1]))
    assert col.to_pylist()[0]["tags"] == ["a", "b"] and col.to_pylist()[1] is None
    assert fmt.encode(col, topic="t").to_pylist() == [m.SerializeToString(), None]


# ------------------------------------------------------------- the schema registry
def test_registry_extra():
    """kwire[registry]: both clients register and read a schema on the session's
    Apicurio Registry; without httpx, the error names the extra."""
    import kwire.aio

    if not _have("httpx"):
        with pytest.raises(ImportError, match=re.escape("kwire[registry]")):
            importlib.import_module("kwire.registry.client")
        with pytest.raises(ImportError, match=re.escape("kwire[registry]")):
            kwire.aio.AsyncSchemaRegistryClient  # noqa: B018
        return
    url = os.environ.get("KWIRE_SMOKE_REGISTRY")
    if url is None:
        pytest.skip("the registry is passed to the registry extra's run only")
    import uuid

    from kwire.registry import AsyncSchemaRegistryClient, Schema, SchemaRegistryClient

    subject = f"smoke-{uuid.uuid4().hex[:10]}-value"
    schema = Schema('{"type": "record", "name": "Smoke", "fields": [{"name": "n", "type": "long"}]}')
    with SchemaRegistryClient({"url": url, "timeout": 10}) as c:
        schema_id = c.register_schema(subject, schema)
        assert c.get_latest_version(subject).schema_id == schema_id

    async def main() -> int:
        async with kwire.aio.AsyncSchemaRegistryClient({"url": url}) as ac:
            return (await ac.lookup_schema(subject, schema)).schema_id

    assert kwire.aio.AsyncSchemaRegistryClient is AsyncSchemaRegistryClient
    assert asyncio.run(main()) == schema_id


# ------------------------------------------------------------- metrics exporters
def test_otel_extra(bootstrap):
    """kwire[otel]: the instruments register on OpenTelemetry's API alone (its
    no-op provider without an SDK); without it, the error names the extra."""
    if not _have("opentelemetry"):
        with pytest.raises(ImportError, match=re.escape("kwire[otel]")):
            importlib.import_module("kwire.metrics.otel")
        return
    from kwire.metrics.otel import instrument

    with kwire.Producer(bootstrap_servers=bootstrap) as p:
        inst = instrument(p)
        assert "producer-metrics.record-send-rate" in inst.names
        inst.close()


def test_prometheus_extra(bootstrap, topic):
    """kwire[prometheus]: a registry with kwire's collector renders the
    producer's figures; without it, the error names the extra."""
    if not _have("prometheus_client"):
        with pytest.raises(ImportError, match=re.escape("kwire[prometheus]")):
            importlib.import_module("kwire.metrics.prometheus")
        return
    from prometheus_client import CollectorRegistry, generate_latest

    from kwire.metrics.prometheus import KwireCollector

    with kwire.Producer(bootstrap_servers=bootstrap, client_id="smoke") as p:
        p.send(topic, b"one", partition=0)
        p.flush()
        registry = CollectorRegistry()
        registry.register(KwireCollector(p))
        text = generate_latest(registry).decode()
    assert f'kafka_producer_topic_metrics_record_send_total{{client_id="smoke",topic="{topic}"}} 1.0' in text


def test_share_records_sorted_by_the_compiled_core():
    """kwire.share's compiled piece (kwire._core.acquired) in the wheel: a share group's records taken from
    decoded batches by the ranges acquired for the member (share groups need Kafka 4.2+, not the bundled
    broker: tests/share runs the consumer)."""
    from kwire._codec import RecordBatchBuilder, decode
    from kwire._core.acquired import take_acquired
    from kwire.share import AcknowledgeType, ShareConsumer, ShareRecord  # noqa: F401

    b = RecordBatchBuilder(base_offset=10)
    for i in range(3):
        b.append(b"v%d" % i)
    taken, gaps = take_acquired(decode(b.build()).records, [(11, 14, 2)], "t", 0)
    assert [(r.offset, r.delivery_count, r.value) for r in taken] == [(11, 2, b"v1"), (12, 2, b"v2")]
    assert gaps == [(13, 14)] and isinstance(taken[0], ShareRecord)
