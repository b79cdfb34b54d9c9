"""OAUTHBEARER's client side without a broker: the RFC 7628 message, what a
token callback may return, when tokens are refreshed, and what a failing
source does (an error naming it, logged once, no retrying of its own once
no valid token is left). The exchange against real brokers and a real
identity provider is tests/security/."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest

from kwire.config import PRODUCER, ConfigError, redact, resolve
from kwire.sasl import SaslAuthenticationError, authenticator
from kwire.sasl.oauth import OAuthBearer, OAuthToken, TokenAuthenticator, as_token, refresh_delay
from kwire.sasl.oauth.unsecured import UnsecuredJwt, parse_config

SECRET = "tok-3f9c2a-very-secret"


def _cfg(**kw):
    return resolve(PRODUCER, {"bootstrap.servers": "127.0.0.1:9", "security.protocol": "SASL_PLAINTEXT",
                              "sasl.mechanism": "OAUTHBEARER", **kw})


def test_client_first_message_carries_token_and_extensions():
    tok = OAuthToken(SECRET, time.time() + 60, "alice", {"traceId": "abc", "logicalCluster": "lkc-1"})
    assert OAuthBearer(tok).first() == (
        f"n,,\x01auth=Bearer {SECRET}\x01traceId=abc\x01logicalCluster=lkc-1\x01\x01".encode())
    assert SECRET not in repr(tok)


def test_refusal_is_acknowledged_and_named():
    mech = OAuthBearer(OAuthToken(SECRET, time.time() + 60))
    assert mech.step(b'{"status":"invalid_token","scope":"kafka"}') == b"\x01"
    assert mech.refusal() == "status invalid_token, scope kafka"
    assert OAuthBearer(OAuthToken(SECRET, time.time() + 60)).step(b"") is None


@pytest.mark.parametrize("bad", [{"auth": "x"}, {"bad-name": "x"}, {"ok": "\x01"}])
def test_invalid_extensions_are_refused(bad):
    with pytest.raises(SaslAuthenticationError, match="extension"):
        as_token((SECRET, time.time() + 60), bad)


def test_callback_results():
    exp = time.time() + 60
    assert as_token((SECRET, exp)).expires_at == exp
    assert as_token((SECRET, exp, "bob", {"a": "b"})).principal == "bob"
    jwt_token = UnsecuredJwt({"principal": "carol", "lifeSeconds": "30"})().value
    tok = as_token(jwt_token)
    assert tok.principal == "carol" and 25 < tok.lifetime_left() <= 30
    for bad in (None, 42, ("", exp), (SECRET, "soon")):
        with pytest.raises(SaslAuthenticationError):
            as_token(bad)


def test_unsecured_config_words():
    words = parse_config("principal=alice scope=read,write lifeSeconds=120 extension_traceId=7")
    tok = UnsecuredJwt(words)()
    assert tok.principal == "alice" and tok.extensions == {"traceId": "7"}
    assert tok.value.endswith(".")            # alg none: an empty signature
    with pytest.raises(SaslAuthenticationError, match="principal"):
        UnsecuredJwt(parse_config("scope=x"))


def test_refresh_delay_window_and_bounds():
    cfg = dict(_cfg())
    now = time.time()
    short = OAuthToken("t", now + 20)                 # too short for the min period and buffer: 80-85% of it
    assert all(16.0 <= refresh_delay(short, cfg, now) <= 17.0 for _ in range(50))
    long = OAuthToken("t", now + 3600)                # 80-85%, then at least the buffer (300 s) before expiry
    assert all(2880 <= refresh_delay(long, cfg, now) <= 3060 for _ in range(50))
    medium = OAuthToken("t", now + 400)               # 80% would leave less than the buffer: the min period wins
    assert refresh_delay(medium, cfg, now) == pytest.approx(100, abs=1)


def _started(fetch, cfg=None, is_async=False, loop=None):
    wakes = []
    auth = TokenAuthenticator(fetch, cfg or dict(_cfg()), "the test's callback", is_async)
    auth.start(lambda: wakes.append(time.monotonic()), loop)
    return auth, wakes


def _until(cond, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    return False


def test_tokens_are_refreshed_before_expiry_without_blocking_handshakes():
    calls = []
    gate = threading.Event()

    def fetch():
        calls.append(time.monotonic())
        if len(calls) > 1:
            gate.wait(5)           # a slow refresh: handshakes go on with the current token
        return OAuthToken(f"{SECRET}-{len(calls)}", time.time() + 1.0)

    auth, wakes = _started(fetch)
    try:
        assert _until(lambda: auth.token() is not None) and wakes
        t0 = time.monotonic()
        mech = auth.mechanism("127.0.0.1")
        assert mech is not None and time.monotonic() - t0 < 0.05
        assert _until(lambda: len(calls) >= 2, 2.0)       # at 80-85% of its second of life
        assert 0.7 < calls[1] - calls[0] < 1.0
        assert auth.mechanism("127.0.0.1") is not None     # while the refresh hangs
        gate.set()
        assert _until(lambda: auth.fetches >= 2)
    finally:
        gate.set()
        auth.close()


def test_a_failing_source_is_an_error_logged_once_and_not_retried_forever(caplog):
    caplog.set_level(logging.DEBUG, "kwire.sasl.oauth")
    calls = []

    def fetch():
        calls.append(time.monotonic())
        raise RuntimeError("the identity provider is down")

    cfg = dict(_cfg(**{"sasl.login.retry.backoff.ms": 50, "sasl.login.retry.backoff.max.ms": 100}))
    auth, _ = _started(fetch, cfg)
    try:
        assert _until(lambda: calls)
        time.sleep(0.3)
        assert len(calls) == 1              # no valid token: no retrying on its own
        for _ in range(5):
            with pytest.raises(SaslAuthenticationError, match="the test's callback failed: RuntimeError: the "
                                                             "identity provider is down"):
                auth.mechanism("127.0.0.1")
            time.sleep(0.15)
        assert 2 <= len(calls) <= 6         # each handshake may ask again, after the backoff
        # no valid token: the failing handshakes are what the client logs (kwire.client), not the refresh
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    finally:
        auth.close()


def test_a_failed_refresh_keeps_the_valid_token_and_retries(caplog):
    calls = []

    def fetch():
        calls.append(time.monotonic())
        if len(calls) == 1:
            return OAuthToken(SECRET, time.time() + 1.0)
        if len(calls) < 4:
            raise RuntimeError("flaky")
        return OAuthToken(SECRET + "-new", time.time() + 60)

    caplog.set_level(logging.DEBUG, "kwire.sasl.oauth")
    cfg = dict(_cfg(**{"sasl.login.retry.backoff.ms": 20, "sasl.login.retry.backoff.max.ms": 50}))
    auth, _ = _started(fetch, cfg)
    try:
        assert _until(lambda: len(calls) >= 4, 3.0)
        assert _until(lambda: auth.token() is not None and auth.token().value.endswith("-new"))
        assert auth.mechanism("h") is not None
        warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warned) == 1 and "flaky; the current token expires in" in warned[0]     # once, not per retry
    finally:
        auth.close()


def test_coroutine_callback_runs_on_the_loop():
    async def main():
        loop = asyncio.get_running_loop()
        seen = []

        async def cb():
            seen.append(asyncio.get_running_loop() is loop)
            return SECRET, time.time() + 60

        cfg = _cfg(oauth_cb=cb)
        auth = authenticator(cfg)
        auth.start(lambda: None, loop)
        try:
            for _ in range(100):
                if auth.token() is not None:
                    break
                await asyncio.sleep(0.01)
            assert seen == [True] and auth.mechanism("h") is not None
        finally:
            auth.close()

    asyncio.run(main())


def test_coroutine_callback_needs_an_aio_client():
    async def cb():
        return SECRET, time.time() + 60

    with pytest.raises(ConfigError, match="kwire.aio"):
        authenticator(_cfg(oauth_cb=cb)).start(lambda: None, None)


def test_a_token_source_is_required_and_secrets_are_redacted():
    with pytest.raises(ConfigError, match="needs a token source"):
        authenticator(_cfg())
    with pytest.raises(ConfigError, match="token_endpoint_url"):
        authenticator(_cfg(**{"sasl.oauthbearer.method": "oidc"}))
    cfg = _cfg(**{"sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.token.endpoint.url": "http://127.0.0.1:9/t",
                  "sasl.oauthbearer.client.id": "c", "sasl.oauthbearer.client.secret": SECRET})
    assert SECRET not in repr(redact(cfg)) and SECRET not in repr(authenticator(cfg))


def test_provider_objects_as_kafka_python_has_them():
    class Provider:
        def token(self):
            return UnsecuredJwt({"principal": "dave"})().value

        def extensions(self):
            return {"traceId": "9"}

    auth = authenticator(_cfg(sasl_oauth_token_provider=Provider()))
    auth.start(lambda: None)
    try:
        assert _until(lambda: auth.token() is not None)
        assert auth.token().principal == "dave" and auth.token().extensions == {"traceId": "9"}
    finally:
        auth.close()


def test_msk_iam_ready_callback(monkeypatch):
    """kwire.sasl.oauth.aws.msk_iam_callback: a ready oauth_cb signing MSK IAM
    tokens with AWS's signer (credentials from boto's chain: here the environment)."""
    pytest.importorskip("aws_msk_iam_sasl_signer")
    from kwire.sasl.oauth.aws import msk_iam_callback

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDKWIREUNIT")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "kwire-unit-secret")
    auth = authenticator(_cfg(oauth_cb=msk_iam_callback("ap-south-1")))
    auth.start(lambda: None)
    try:
        assert _until(lambda: auth.token() is not None)
        assert 800 < auth.token().lifetime_left() <= 900
    finally:
        auth.close()
