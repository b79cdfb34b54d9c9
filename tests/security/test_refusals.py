"""Each way a login fails, against the real servers: a clear error naming
what failed, raised at once from an admin call, a consumer and a producer
(blocking and kwire.aio), not retriable and not retried in a loop; the
secret, the token or the keytab's path appears neither in the error nor
in the log."""

from __future__ import annotations

import logging
import subprocess
import sys
import time

import pytest

from kwire.config import ConfigError
from kwire.sasl import SaslAuthenticationError
from client.test_security import _clients_refused
from security.mechanisms import keycloak_callback, oidc, options

pytestmark = pytest.mark.kafka

FAST = 5.0


def _refused(kw, cfg, match, secrets=(), caplog=None, error=SaslAuthenticationError):
    t0 = time.monotonic()
    with pytest.raises(error, match=match) as info:
        with kw.Admin({**cfg, "request.timeout.ms": 10000}) as admin:
            admin.list_topics(timeout=10)
    assert time.monotonic() - t0 < FAST, f"took {time.monotonic() - t0:.1f} s"
    assert getattr(info.value, "retriable", False) is False
    err = _clients_refused(kw, cfg, error, match, fast=FAST)
    for secret in secrets:
        for text in (str(info.value), repr(info.value), str(err), caplog.text if caplog else ""):
            assert secret not in text
    return info.value


def test_wrong_client_secret(kw, secure_kafka, caplog):
    caplog.set_level(logging.DEBUG)
    kc = secure_kafka.keycloak
    cfg = {**secure_kafka.client_config("oauth"), **oidc(secure_kafka, kc.client),
           "sasl.oauthbearer.client.secret": "wrong-secret-8f2a"}
    _refused(kw, cfg, r"OIDC token endpoint .* refused client kwire-client \(HTTP 401: unauthorized_client",
             ["wrong-secret-8f2a"], caplog)


def test_wrong_audience(kw, secure_kafka, caplog):
    caplog.set_level(logging.DEBUG)
    kc = secure_kafka.keycloak
    cfg = {**secure_kafka.client_config("oauth"), **oidc(secure_kafka, kc.other_client)}
    _refused(kw, cfg, r"refused SASL OAUTHBEARER: .*\(status invalid_token", [kc.other_client.secret], caplog)


def test_expired_tokens(kw, secure_kafka, caplog):
    """An expired token from the callback is refused by kwire itself; one the
    callback claims is fresh but the broker holds expired, by the broker."""
    caplog.set_level(logging.DEBUG)
    from kwire.sasl.oauth.unsecured import UnsecuredJwt

    stale = UnsecuredJwt({"principal": "admin", "lifeSeconds": "-60"})().value
    base = secure_kafka.client_config("unsecured", **{"sasl.mechanism": "OAUTHBEARER"})
    _refused(kw, {**base, "oauth_cb": lambda: (stale, time.time() - 60)},
             "the token callback .*gave a token that expired", [stale], caplog)
    _refused(kw, {**base, "oauth_cb": lambda: (stale, time.time() + 600)},
             r"refused SASL OAUTHBEARER: .*\(status invalid_token", [stale], caplog)


def test_a_failing_callback_names_its_error(kw, secure_kafka, caplog):
    caplog.set_level(logging.DEBUG)

    def broken():
        raise RuntimeError("vault unreachable")

    cfg = secure_kafka.client_config("oauth", **{"sasl.mechanism": "OAUTHBEARER", "oauth_cb": broken})
    _refused(kw, cfg, "the token callback \\(oauth_cb\\) failed: RuntimeError: vault unreachable", (), caplog)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and "vault unreachable" in r.getMessage()]
    assert 1 <= len(warnings) <= 3       # once per client (admin, consumer, producer), not per retry


def test_principal_unknown_to_the_kdc(kw, secure_kafka, krb5_env, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    kdc = secure_kafka.kdc
    keytab = str(tmp_path / "mallory.keytab")
    env = {**kdc.env(), "KRB5_KDC_PROFILE": kdc.kdc_conf}
    for q in ("addprinc -randkey mallory", f"ktadd -k {keytab} mallory", "delprinc -force mallory"):
        subprocess.run(["kadmin.local", "-q", q], env=env, check=True, capture_output=True, timeout=30)
    cfg = secure_kafka.client_config("gssapi", **{
        "sasl.mechanism": "GSSAPI", "sasl.kerberos.keytab": keytab, "sasl.kerberos.principal": "mallory@KWIRE.TEST"})
    _refused(kw, cfg, "GSSAPI: no Kerberos credentials for mallory@KWIRE.TEST: .*not found in Kerberos database",
             [keytab], caplog)


def test_missing_keytab(secure_kafka, krb5_env, tmp_path):
    from kwire.admin import Admin

    missing = str(tmp_path / "gone" / "alice.keytab")
    cfg = secure_kafka.client_config("gssapi", **{"sasl.mechanism": "GSSAPI", "sasl.kerberos.keytab": missing})
    with pytest.raises(ConfigError, match="sasl_kerberos_keytab: the keytab file does not exist") as info:
        Admin(cfg)
    assert missing not in str(info.value)


def test_broker_without_the_mechanism(kw, secure_kafka, krb5_env, caplog):
    caplog.set_level(logging.DEBUG)
    cfg = {**options(secure_kafka, "gssapi"), "bootstrap.servers": secure_kafka.bootstrap("oauth")}
    _refused(kw, cfg, r"does not offer SASL mechanism GSSAPI \(it offers: OAUTHBEARER\)",
             [secure_kafka.keytabs["alice"]], caplog)


@pytest.mark.parametrize("blocked,way,extra", [
    (("jwt", "requests"), "oidc", "kwire\\[oauth\\]"),
    (("gssapi",), "gssapi", "kwire\\[kerberos\\]"),
    (("aws_msk_iam_sasl_signer",), "aws", "kwire\\[aws\\]"),
])
def test_a_missing_extra_is_named(secure_kafka, monkeypatch, blocked, way, extra):
    from kwire.admin import Admin

    for module in blocked:
        monkeypatch.setitem(sys.modules, module, None)       # as if not installed
    if way == "aws":
        cfg = secure_kafka.client_config("oauth", **{"sasl.mechanism": "OAUTHBEARER",
                                                     "sasl.oauthbearer.method": "aws_msk_iam",
                                                     "sasl.oauthbearer.aws.region": "us-east-1"})
    else:
        cfg = options(secure_kafka, way)
    with pytest.raises(ConfigError, match=f"pip install '{extra}'"):
        Admin(cfg)


def test_callback_refusal_on_kwire_aio_is_the_same(secure_kafka):
    """An ``async def`` callback that fails: kwire.aio raises the same error."""
    import asyncio

    from kwire.aio import AsyncAdmin

    async def broken():
        raise PermissionError("no token for you")

    async def main():
        cfg = secure_kafka.client_config("oauth", **{"sasl.mechanism": "OAUTHBEARER", "oauth_cb": broken})
        async with AsyncAdmin(cfg) as admin:
            await admin.list_topics(timeout=10)

    t0 = time.monotonic()
    with pytest.raises(SaslAuthenticationError, match="PermissionError: no token for you"):
        asyncio.run(main())
    assert time.monotonic() - t0 < FAST
    assert keycloak_callback          # the module's helper is the success case (test_mechanisms)
