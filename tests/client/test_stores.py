"""Kafka's key and trust store options (``ssl.truststore.*``,
``ssl.keystore.*``, ``ssl.key.password``) on kwire's own clients
(:mod:`kwire.stores`): JKS, PKCS12 and PEM stores of the test PKI (JKS and
PKCS12 made by the JDK's keytool) against Apache Kafka's TLS listener
(SASL_SSL, server certificate only) and mutual-TLS listener (SSL, client
certificate required), and every refusal, without a broker. The round
trips run with kwire's blocking clients and with kwire.aio's (``kw``).

Apache Kafka only for the round trips: Tansu has no TLS listener.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import time
import uuid
from typing import Dict

import pytest

from kwire import stores
from kwire.admin import Admin, NewTopic
from kwire.config import PRODUCER, ConfigError, redact, resolve
from kwire.consumer import Consumer
from kwire.net import ssl_context_from_config
from kwire.producer import Producer
from support.proxies import make_crl, make_pki
from support.stores import make_stores

KINDS = ("JKS", "PKCS12", "PEM")


def _trust_only(options: Dict[str, str]) -> Dict[str, str]:
    return {k: v for k, v in options.items() if k.startswith("ssl.truststore.")}


# ---------------------------------------------------- against Apache Kafka
@pytest.fixture(scope="module")
def kafka_stores(kafka, tmp_path_factory):
    return make_stores(kafka.pki, tmp_path_factory.mktemp("kafka-stores"))


def _round_trip(kw, cfg: Dict[str, str], records: int = 5) -> None:
    """Create a topic, produce ``records`` and consume them back, each
    client made from ``cfg`` alone (the producer and consumer ``kw``'s)."""
    topic = f"stores-{uuid.uuid4().hex[:8]}"
    with Admin(cfg) as admin:
        admin.create_topics([NewTopic(topic, 1)])
    sent = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(records)]
    with kw.Producer(cfg) as p:
        for key, value in sent:
            p.send(topic, value, key=key, partition=0)
        p.flush(20)
    got = []
    with kw.Consumer(cfg, auto_offset_reset="earliest") as c:
        c.assign([(topic, 0)])
        deadline = time.monotonic() + 20
        while len(got) < records and time.monotonic() < deadline:
            got += [(r.key, r.value) for r in c.poll(500).get((topic, 0), [])]
    assert got == sent


@pytest.mark.kafka
@pytest.mark.parametrize("kind", KINDS)
def test_mutual_tls_with_key_and_trust_stores(kw, kafka, kafka_stores, kind):
    """The SSL listener requires a client certificate: the key store's."""
    _round_trip(kw, {"bootstrap.servers": kafka.bootstrap("ssl"), "security.protocol": "SSL", **kafka_stores[kind]})


@pytest.mark.kafka
@pytest.mark.parametrize("kind", KINDS)
def test_tls_with_a_trust_store(kw, kafka, kafka_stores, kind):
    """SASL_SSL: the broker's certificate checked against the trust store
    (host name too), no client certificate."""
    cfg = {k: v for k, v in kafka.client_config("sasl_ssl").items() if k != "ssl.ca.location"}
    _round_trip(kw, {**cfg, **_trust_only(kafka_stores[kind])})


@pytest.mark.kafka
def test_stores_are_converted_once(kw, kafka, kafka_stores, tmp_path, monkeypatch):
    """Once per client at most (not per connection), and once per process
    for an unchanged store; a changed store is converted again."""
    trust, keys = tmp_path / "trust.jks", tmp_path / "keys.jks"        # paths no earlier test converted
    shutil.copy(kafka_stores["JKS"]["ssl.truststore.location"], trust)
    shutil.copy(kafka_stores["JKS"]["ssl.keystore.location"], keys)
    cfg = {"bootstrap.servers": kafka.bootstrap("ssl"), "security.protocol": "SSL", **kafka_stores["JKS"],
           "ssl.truststore.location": str(trust), "ssl.keystore.location": str(keys)}
    runs = []
    real = subprocess.run
    monkeypatch.setattr(stores.subprocess, "run", lambda args, **kw: runs.append(args) or real(args, **kw))
    _round_trip(kw, cfg)              # an Admin, a Producer, a Consumer, each with several connections
    conversions = [a for a in runs if "-importkeystore" in a]
    assert len(conversions) == 2, runs                                  # the trust store and the key store
    os.utime(keys, ns=(time.time_ns(), time.time_ns() + 10**9))
    with Admin(cfg) as admin:
        admin.list_topics(timeout=20)
    assert len([a for a in runs if "-importkeystore" in a]) == 3         # the key store again


def _inline(pki, made, one_line: bool = False, librdkafka: bool = False) -> Dict[str, str]:
    """The test PKI as PEM text options (the key encrypted, with its
    password); ``one_line``: each block's base64 on one line, as a Spark
    option or an environment variable holds it."""
    def text(path: str) -> str:
        pem = open(path).read()
        if one_line:
            pem = re.sub(r"-----\n(.*?)\n-----", lambda m: "-----" + m.group(1).replace("\n", "") + "-----", pem,
                         flags=re.DOTALL)
        return pem
    key_pem = open(made["PEM"]["ssl.keystore.location"]).read().split("-----BEGIN CERTIFICATE")[0]
    key_file = os.path.join(os.path.dirname(made["PEM"]["ssl.keystore.location"]), "inline-key.pem")
    with open(key_file, "w") as f:
        f.write(key_pem)
    names = (("ssl.ca.pem", "ssl.certificate.pem", "ssl.key.pem") if librdkafka else
             ("ssl.truststore.certificates", "ssl.keystore.certificate.chain", "ssl.keystore.key"))
    return {**dict(zip(names, (text(pki.ca), text(pki.client_cert), text(key_file)))),
            "ssl.key.password": "pem-key-pass"}


@pytest.mark.kafka
@pytest.mark.parametrize("shape", ["java-names", "librdkafka-names-one-line"])
def test_mutual_tls_with_pem_text(kw, kafka, kafka_stores, shape):
    """Java's ssl.truststore.certificates / ssl.keystore.certificate.chain /
    ssl.keystore.key (librdkafka's ssl.ca.pem / ssl.certificate.pem /
    ssl.key.pem): the PKI as text, not files, on the listener that requires
    a client certificate."""
    cfg = _inline(kafka.pki, kafka_stores, one_line="one-line" in shape, librdkafka="librdkafka" in shape)
    _round_trip(kw, {"bootstrap.servers": kafka.bootstrap("ssl"), "security.protocol": "SSL", **cfg})


# ------------------------------------------------------------ without a broker
@pytest.fixture(scope="module")
def local_stores(tmp_path_factory):
    d = tmp_path_factory.mktemp("local-stores")
    pki = make_pki(str(d))
    return pki, make_stores(pki, d)


def _tls(options: Dict[str, str]) -> Dict[str, str]:
    return {"bootstrap.servers": "localhost:9093", "security.protocol": "SSL", **options}


def _context(options: Dict[str, str]):
    return ssl_context_from_config(resolve(PRODUCER, _tls(options)))


@pytest.mark.parametrize("kind", KINDS)
def test_converted_files_are_private(local_stores, kind):
    pki, made = local_stores
    files = stores.pem_files(resolve(PRODUCER, _tls(made[kind])))
    if kind == "PEM":
        assert files == stores.PemFiles(pki.ca, made["PEM"]["ssl.keystore.location"], None, "pem-key-pass")
        return
    assert files.password is None and b"PRIVATE KEY" in open(files.keyfile, "rb").read()
    for path in (files.cafile, files.certfile, files.keyfile):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path
        assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    assert _context(made[kind]).get_ca_certs()[0]["subject"] == ((("commonName", "kwire test CA"),),)


def test_jks_trust_store_without_a_password(local_stores, tmp_path):
    """Read as Java reads it (its integrity unchecked), as Kafka does."""
    _, made = local_stores
    trust = tmp_path / "trust.jks"
    shutil.copy(made["JKS"]["ssl.truststore.location"], trust)
    ctx = _context({"ssl.truststore.location": str(trust)})
    assert [c["subject"] for c in ctx.get_ca_certs()] == [((("commonName", "kwire test CA"),),)]


def test_pem_options_and_ssl_password_still_work(local_stores, tmp_path):
    pki, made = local_stores
    ctx = _context({"ssl_cafile": pki.ca, "ssl_certfile": pki.client_cert,
                    "ssl_keyfile": made["PEM"]["ssl.keystore.location"], "ssl_password": "pem-key-pass"})
    assert len(ctx.get_ca_certs()) == 1


@pytest.mark.parametrize("client", [Producer, Consumer, Admin])
@pytest.mark.parametrize("option", ["ssl.truststore.type", "ssl.truststore.password", "ssl.keystore.type",
                                    "ssl.keystore.password"])
def test_type_or_password_without_location(client, option):
    store = option.split(".")[1]
    with pytest.raises(ConfigError, match=f"{option} is set without ssl.{store}.location"):
        client(_tls({option: "PKCS12" if option.endswith("type") else "secret"}))


@pytest.mark.parametrize("store, pem, option", [
    ("ssl.truststore.location", "ssl.ca.location", "ssl_cafile"),
    ("ssl.truststore.location", "ssl_cafile", "ssl_cafile"),
    ("ssl.keystore.location", "ssl.certificate.location", "ssl_certfile"),
    ("ssl.keystore.location", "ssl_keyfile", "ssl_keyfile"),
])
def test_store_and_pem_option_for_the_same_thing(local_stores, store, pem, option):
    pki, made = local_stores
    with pytest.raises(ConfigError, match=f"{store} and {option} .* both give .*: set one"):
        Producer(_tls({**made["PKCS12"], pem: pki.ca}))


def test_unknown_type_and_passwords_on_pem_stores(local_stores):
    pki, made = local_stores
    with pytest.raises(ConfigError, match="'ssl.truststore.type'='BKS': expected JKS, PKCS12 or PEM"):
        Consumer(_tls({**made["JKS"], "ssl.truststore.type": "BKS"}))
    with pytest.raises(ConfigError, match="ssl.truststore.password is not supported for a PEM truststore"):
        Consumer(_tls({**made["PEM"], "ssl.truststore.password": "x"}))
    with pytest.raises(ConfigError, match="ssl.keystore.password is not supported for a PEM keystore, as in "
                                          "Kafka: its key's password is ssl_password"):
        Consumer(_tls({**made["PEM"], "ssl.keystore.password": "x"}))
    with pytest.raises(ConfigError, match=r"ssl_password \(ssl.key.password\) is set without a client certificate"):
        Consumer(_tls({**_trust_only(made["PEM"]), "ssl.key.password": "x"}))


@pytest.mark.parametrize("kind, option, wrong", [
    ("JKS", "ssl.keystore.password", "ssl.keystore.location .*keytool could not read the JKS store: .*password "
     "was incorrect.*check ssl.keystore.password"),
    ("JKS", "ssl.key.password", "ssl.keystore.location .*keytool could not read the JKS store: .*check "
     r"ssl.keystore.password and ssl_password \(ssl.key.password\)"),
    ("JKS", "ssl.truststore.password", "ssl.truststore.location .*keytool could not read the JKS store: .*password "
     "was incorrect.*check ssl.truststore.password"),
    ("PKCS12", "ssl.truststore.password", "ssl.truststore.location .*cannot read the PKCS12 store.*wrong "
     "ssl.truststore.password"),
    ("PKCS12", "ssl.keystore.password", "ssl.keystore.location .*cannot read the PKCS12 store.*wrong "
     "ssl.keystore.password"),
    ("PEM", "ssl.key.password", r"ssl.keystore.location .*cannot load the client certificate and key.*wrong "
     r"ssl_password \(ssl.key.password\)"),
])
def test_wrong_password_names_the_option(local_stores, kind, option, wrong):
    _, made = local_stores
    with pytest.raises(ConfigError, match=wrong) as info:
        Admin(_tls({**made[kind], option: "not-the-password"}))
    assert "not-the-password" not in str(info.value)


def test_files_that_are_not_stores(local_stores, tmp_path):
    pki, made = local_stores
    junk = tmp_path / "junk.jks"
    junk.write_bytes(b"not a key store at all")
    with pytest.raises(ConfigError, match="ssl.truststore.location .*junk.jks': is not a key store"):
        Producer(_tls({**made["JKS"], "ssl.truststore.location": str(junk)}))
    with pytest.raises(ConfigError, match="ssl.truststore.location .*: is a PEM file: set ssl.truststore.type to PEM"):
        Producer(_tls({"ssl.truststore.location": pki.ca}))
    with pytest.raises(ConfigError, match="ssl.keystore.location .*: is not a PEM file .ssl.keystore.type is PEM"):
        Producer(_tls({**made["PEM"], "ssl.keystore.location": made["JKS"]["ssl.keystore.location"]}))
    with pytest.raises(ConfigError, match="ssl.truststore.location .*missing.p12': cannot be read .No such file"):
        Producer(_tls({**made["PKCS12"], "ssl.truststore.location": str(tmp_path / "missing.p12")}))
    empty = tmp_path / "empty.p12"           # a PKCS12 store holding neither certificate nor key
    from cryptography.hazmat.primitives.serialization import BestAvailableEncryption, pkcs12

    cert = pkcs12.load_pkcs12(open(made["PKCS12"]["ssl.truststore.location"], "rb").read(), b"trust-pass")
    empty.write_bytes(pkcs12.serialize_key_and_certificates(b"x", None, None, cert.additional_certs,
                                                            BestAvailableEncryption(b"p")))
    with pytest.raises(ConfigError, match="ssl.keystore.location .*: holds no private key with its certificate"):
        Producer(_tls({**made["PKCS12"], "ssl.keystore.location": str(empty), "ssl.keystore.password": "p"}))


def test_missing_cryptography_and_keytool(local_stores, tmp_path, monkeypatch):
    pki, made = local_stores
    trust = tmp_path / "trust.jks"          # a path no earlier test converted
    shutil.copy(made["JKS"]["ssl.truststore.location"], trust)
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ConfigError, match="ssl.truststore.location .*: reading a JKS store needs the JDK's keytool, "
                                          "which is not on PATH and JAVA_HOME is not set"):
        Producer(_tls({**_trust_only(made["JKS"]), "ssl.truststore.location": str(trust)}))
    p12 = tmp_path / "trust.p12"
    shutil.copy(made["PKCS12"]["ssl.truststore.location"], p12)
    monkeypatch.setitem(sys.modules, "cryptography", None)          # as if it were not installed
    with pytest.raises(ConfigError, match=r"ssl.truststore.location .*: reading a PKCS12 store needs the "
                                          r"'cryptography' package \(pip install 'kwire\[tls\]'\)"):
        Producer(_tls({**_trust_only(made["PKCS12"]), "ssl.truststore.location": str(p12)}))
    assert _context(made["PEM"]).get_ca_certs()          # PEM stores need neither


def test_store_passwords_are_secrets(local_stores):
    _, made = local_stores
    cfg = resolve(PRODUCER, _tls(made["JKS"]))
    shown = redact(cfg)
    assert all(shown[k] == "***" for k in ("ssl_truststore_password", "ssl_keystore_password", "ssl_password"))


def test_pem_text_is_written_once_privately_and_never_shown(local_stores):
    pki, made = local_stores
    cfg = resolve(PRODUCER, _tls(_inline(pki, made, one_line=True)))
    files = stores.pem_files(cfg)
    assert stores.pem_files(cfg) == files                  # the same text: the same files
    for path in (files.cafile, files.certfile, files.keyfile):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path
    assert b"ENCRYPTED PRIVATE KEY" in open(files.keyfile, "rb").read() and files.password == "pem-key-pass"
    assert _context(_inline(pki, made)).get_ca_certs()[0]["subject"] == ((("commonName", "kwire test CA"),),)
    assert redact(cfg)["ssl_keystore_key"] == "***"


@pytest.mark.parametrize("options, match", [
    ({"ssl.keystore.certificate.chain": "x"}, "ssl.keystore.certificate.chain is set without ssl.keystore.key"),
    ({"ssl.key.pem": "x"}, "ssl.keystore.key is set without ssl.keystore.certificate.chain"),
    ({"ssl.ca.pem": "x", "ssl.ca.location": "/ca.pem"},
     r"ssl.truststore.certificates and ssl_cafile \(ssl.ca.location\) both give"),
    ({"ssl.truststore.certificates": "x", "ssl.truststore.type": "JKS"}, "leave it unset or PEM"),
    ({"ssl.truststore.certificates": "x", "ssl.truststore.location": "/t.jks"},
     "ssl.truststore.location and ssl.truststore.certificates both give"),
])
def test_pem_text_refusals(options, match):
    with pytest.raises(ConfigError, match=match):
        Producer(_tls(options))


def test_pem_text_without_a_block_is_refused_without_showing_it(local_stores):
    pki, made = local_stores
    secret = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC-not-a-pem-block"
    with pytest.raises(ConfigError, match="ssl.keystore.key holds no PEM PRIVATE KEY block") as info:
        Producer(_tls({"ssl.truststore.certificates": open(pki.ca).read(),
                       "ssl.keystore.certificate.chain": open(pki.client_cert).read(), "ssl.keystore.key": secret}))
    assert secret not in str(info.value)
    with pytest.raises(ConfigError, match="ssl.truststore.certificates holds no PEM CERTIFICATE block"):
        Producer(_tls({"ssl.truststore.certificates": "not pem"}))


def test_tls_versions_and_revocation_lists_in_the_context(local_stores, tmp_path):
    """ssl.enabled.protocols bounds the context's versions; ssl_crlfile
    turns on the leaf's revocation check (tests/kafka/test_security.py
    connects with both); what cannot be used is refused, naming it."""
    import ssl

    pki, _ = local_stores
    ctx = _context({"ssl_cafile": pki.ca, "ssl.enabled.protocols": "TLSv1.3"})
    assert (ctx.minimum_version, ctx.maximum_version) == (ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_3)
    ctx = _context({"ssl_cafile": pki.ca, "ssl.enabled.protocols": ["tlsv1.3", "TLSv1.2"]})
    assert (ctx.minimum_version, ctx.maximum_version) == (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3)
    with pytest.raises(ConfigError, match="'ssl.enabled.protocols'='SSLv3': expected TLS versions"):
        _context({"ssl.enabled.protocols": "SSLv3"})
    crl = make_crl(pki, str(tmp_path / "ca.crl"))
    assert _context({"ssl_cafile": pki.ca, "ssl.crl.location": crl}).verify_flags & ssl.VERIFY_CRL_CHECK_LEAF
    with pytest.raises(ConfigError, match=r"ssl_crlfile \(ssl.crl.location\) .*cannot load the revocation list"):
        _context({"ssl_crlfile": str(tmp_path / "missing.crl")})
