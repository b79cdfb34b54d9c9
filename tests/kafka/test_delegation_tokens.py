"""Delegation tokens (KIP-48) against Apache Kafka's SCRAM listener (the test
broker sets ``delegation.token.secret.key``):

* Admin's create, describe (by owner and all), renew and expire, blocking and
  kwire.aio (the ``kw`` fixture), and ``kwire delegation-token``;
* the broker's refusals, each as its own error class: a token asked for over
  PLAINTEXT or over a token-authenticated connection, an unknown HMAC, a
  renewer the token does not name, an expired token, one expired at once;
* the token authenticating: SCRAM-SHA-256 and -512 with the token's id as the
  user name, the base64 of its HMAC as the password and ``tokenauth=true``
  (``sasl_scram_tokenauth``): kwire produces and consumes with it, Kafka's
  Java client (``tokenauth="true"`` in its JAAS config) with the same token
  reads what kwire wrote and writes what kwire reads;
* the HMAC never in a token's repr, an error's text or the logs.

Brokers learn of a token from the metadata log shortly (~0.1 s) after the
controller made it: until then it neither authenticates nor renews, so each
test waits until the broker describes it (:func:`_known`).
"""

from __future__ import annotations

import base64
import logging
import time
import uuid

import pytest

from kwire.admin import Admin, DelegationToken, NewTopic
from kwire.consumer import Consumer
from kwire.errors import (DelegationTokenExpiredError, DelegationTokenNotFoundError,
                          DelegationTokenOwnerMismatchError, DelegationTokenRequestNotAllowedError)
from kwire.producer import Producer
from kwire.sasl import SaslAuthenticationError
from support.java_peer import java_consume, java_produce, send_op

pytestmark = pytest.mark.kafka

HOUR_MS = 3_600_000
WAIT = 10.0         # seconds for the broker to learn of a change


def _user(kafka, name="alice", mechanism="SCRAM-SHA-256", **extra):
    return kafka.client_config("sasl_plaintext", user=(name, kafka.users[name]), mechanism=mechanism, **extra)


def _with_token(kafka, token, mechanism="SCRAM-SHA-256", **extra):
    """A client authenticated by ``token`` (Kafka's JAAS ``tokenauth="true"``)."""
    return kafka.client_config("sasl_plaintext", user=(token.token_id, token.password), mechanism=mechanism,
                               **{"sasl.scram.tokenauth": "true", **extra})


def _known(admin, token_id, until=lambda t: True):
    """The token as the broker describes it, once it does and ``until`` holds
    (None: waited for it to be gone)."""
    deadline = time.monotonic() + WAIT
    while True:
        found = next((t for t in admin.describe_delegation_tokens() if t.token_id == token_id), None)
        if until(found):
            return found
        assert time.monotonic() < deadline, f"the broker did not describe token {token_id} as expected: {found}"
        time.sleep(0.02)


def _token(kafka, **kwargs):
    """A new token of alice's, once the broker knows it."""
    with Admin(_user(kafka)) as a:
        made = a.create_delegation_token(max_lifetime_ms=HOUR_MS, **kwargs)
        _known(a, made.token_id, lambda t: t is not None)
    return made


def test_a_token_never_shows_its_hmac():
    hmac = bytes(range(64))
    t = DelegationToken("tid", hmac, "User:alice", "User:alice", ("User:bob",), 1, 2, 3)
    assert t.password == base64.b64encode(hmac).decode() and t.hmac == hmac
    for shown in (repr(t), str(t), f"{t}", repr([t])):
        assert "tid" in shown and "User:bob" in shown
        assert t.password not in shown and repr(hmac) not in shown and hmac.hex() not in shown
        assert "hmac" not in shown and "password" not in shown


def test_create_describe_renew_expire(kw, kafka):
    with kw.Admin(_user(kafka)) as alice, kw.Admin(_user(kafka, "bob", "SCRAM-SHA-512")) as bob, \
            kw.Admin(kafka.client_config("sasl_plaintext", mechanism="SCRAM-SHA-256")) as admin:
        t0 = int(time.time() * 1000)
        made = alice.create_delegation_token(renewers=["User:bob"], max_lifetime_ms=HOUR_MS)
        assert (made.owner, made.requester, made.renewers) == ("User:alice", "User:alice", ("User:bob",))
        assert t0 - 5000 <= made.issue_timestamp_ms <= made.expiry_timestamp_ms <= made.max_timestamp_ms
        assert made.max_timestamp_ms == made.issue_timestamp_ms + HOUR_MS
        assert len(made.hmac) == 64 and made.token_id          # HmacSHA512

        described = _known(alice, made.token_id, lambda t: t is not None)
        assert described == made                                # the HMAC and every timestamp too
        assert made.token_id in {t.token_id for t in alice.describe_delegation_tokens(["User:alice"])}
        assert made.token_id not in {t.token_id for t in alice.describe_delegation_tokens(["User:nobody"])}
        assert alice.describe_delegation_tokens([]) == []       # no owner asked for: none (as Kafka)

        # a renewer renews it; the owner too; anyone else may not (not even a super user)
        before = int(time.time() * 1000)
        expiry = bob.renew_delegation_token(made.hmac, renew_period_ms=60_000)
        assert before + 60_000 - 5000 <= expiry <= int(time.time() * 1000) + 60_000
        assert _known(alice, made.token_id, lambda t: t.expiry_timestamp_ms == expiry).max_timestamp_ms == \
            made.max_timestamp_ms
        assert alice.renew_delegation_token(made.hmac) == made.max_timestamp_ms    # a day's default, capped
        with pytest.raises(DelegationTokenOwnerMismatchError):
            admin.renew_delegation_token(made.hmac)

        # expired at once: the broker forgets it
        alice.expire_delegation_token(made.hmac)
        assert _known(alice, made.token_id, lambda t: t is None) is None
        with pytest.raises(DelegationTokenNotFoundError):
            bob.renew_delegation_token(made.hmac)

        # alice's token made by bob (naming the owner, Kafka 3.3+)
        theirs = bob.create_delegation_token(owner="User:alice", max_lifetime_ms=HOUR_MS)
        assert (theirs.owner, theirs.requester) == ("User:alice", "User:bob")
        alice.expire_delegation_token(_known(bob, theirs.token_id, lambda t: t is not None).hmac)


def test_the_brokers_refusals(kw, kafka, caplog):
    caplog.set_level(logging.DEBUG)
    with kw.Admin(kafka.client_config("plaintext")) as anonymous:
        for call in (anonymous.create_delegation_token, anonymous.describe_delegation_tokens):
            with pytest.raises(DelegationTokenRequestNotAllowedError, match="not allowed on PLAINTEXT"):
                call()
    made = _token(kafka)
    with kw.Admin(_user(kafka)) as alice:
        with pytest.raises(DelegationTokenNotFoundError):
            alice.renew_delegation_token(b"\0" * 64)
        with pytest.raises(DelegationTokenNotFoundError):
            alice.expire_delegation_token(made.hmac[::-1])
        # expired (not forgotten yet): renewing it is refused
        expiry = alice.expire_delegation_token(made.hmac, expiry_period_ms=1)
        _known(alice, made.token_id, lambda t: t.expiry_timestamp_ms == expiry)
        with pytest.raises(DelegationTokenExpiredError):
            alice.renew_delegation_token(made.hmac)
        alice.expire_delegation_token(made.hmac)
    assert made.password not in caplog.text and made.hmac.hex() not in caplog.text


def test_an_expired_token_is_refused_at_authentication(kw, kafka, caplog):
    caplog.set_level(logging.DEBUG)
    made = _token(kafka)
    with Admin(_user(kafka)) as alice:
        expiry = alice.expire_delegation_token(made.hmac, expiry_period_ms=1)
        _known(alice, made.token_id, lambda t: t.expiry_timestamp_ms == expiry)
        try:
            t0 = time.monotonic()
            with pytest.raises(SaslAuthenticationError, match="expired") as info:
                with kw.Admin(_with_token(kafka, made, **{"request.timeout.ms": 10000})) as a:
                    a.describe_cluster(timeout=10)
            assert time.monotonic() - t0 < 5.0
            assert made.password not in str(info.value) and made.password not in caplog.text
        finally:
            alice.expire_delegation_token(made.hmac)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_kwire_authenticates_with_a_token(kw, kafka, mechanism, caplog):
    caplog.set_level(logging.DEBUG)
    made = _token(kafka)
    topic = f"dt-{uuid.uuid4().hex[:8]}"
    cfg = _with_token(kafka, made, mechanism)
    try:
        with kw.Admin(cfg) as a:
            a.create_topics([NewTopic(topic, 1)])
            # the broker knows the connection for a token's: no token may be asked for over it
            with pytest.raises(DelegationTokenRequestNotAllowedError, match="delegation token authenticated"):
                a.create_delegation_token()
        with kw.Producer(cfg) as p:
            meta = p.send(topic, b"by-token", key=b"k").get(20)
        with kw.Consumer(cfg, auto_offset_reset="earliest") as c:
            c.assign([(topic, 0)])
            assert _poll_values(c, topic, 1) == [b"by-token"] and meta.offset == 0
        # the same credentials without tokenauth are a SCRAM user's, and there is none of that name
        with pytest.raises(SaslAuthenticationError):
            with kw.Admin({**cfg, "sasl.scram.tokenauth": "false", "request.timeout.ms": 5000}) as a:
                a.describe_cluster(timeout=5)
        # a wrong HMAC is refused, and not shown
        wrong = base64.b64encode(made.hmac[::-1]).decode()
        with pytest.raises(SaslAuthenticationError) as info:
            with kw.Admin({**cfg, "sasl.password": wrong, "request.timeout.ms": 5000}) as a:
                a.describe_cluster(timeout=5)
        assert wrong not in str(info.value) and made.password not in repr(info.value)
    finally:
        with Admin(_user(kafka)) as alice:
            alice.expire_delegation_token(made.hmac)
    assert made.password not in caplog.text and made.hmac.hex() not in caplog.text


def _poll_values(consumer, topic, n):
    values, deadline = [], time.monotonic() + 20
    while len(values) < n and time.monotonic() < deadline:
        values += [r.value for r in consumer.poll(500).get((topic, 0), [])]
    return values


def test_the_java_client_authenticates_with_the_same_token(kafka):
    made = _token(kafka)
    topic = f"dt-java-{uuid.uuid4().hex[:8]}"
    java = {"bootstrap.servers": kafka.bootstrap("sasl_plaintext"), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                                f'username="{made.token_id}" password="{made.password}" tokenauth="true";'}
    cfg = _with_token(kafka, made, "SCRAM-SHA-512")
    try:
        with Admin(cfg) as a:
            a.create_topics([NewTopic(topic, 1)])
        # Java writes with the token, kwire reads with it; then the other way round
        sent = java_produce(java, [send_op(topic, b"from-java", partition=0)])
        assert "error" not in sent[0]
        with Consumer(cfg, auto_offset_reset="earliest") as c:
            c.assign([(topic, 0)])
            assert _poll_values(c, topic, 1) == [b"from-java"]
        with Producer(cfg) as p:
            p.send(topic, b"from-kwire", partition=0).get(20)
        got = java_consume(java, assign=[(topic, 0)], until_end=True)
        assert [r.value for r in got] == [b"from-java", b"from-kwire"]
    finally:
        with Admin(_user(kafka)) as alice:
            alice.expire_delegation_token(made.hmac)


def test_the_cli(kafka, capsys):
    from kwire.__main__ import main

    user, password = "alice", kafka.users["alice"]
    common = ["-b", kafka.bootstrap("sasl_plaintext"), "-X", "security.protocol=SASL_PLAINTEXT",
              "-X", "sasl.mechanism=SCRAM-SHA-256", "-X", f"sasl.username={user}", "-X", f"sasl.password={password}"]
    assert main(["delegation-token", "create", *common, "--renewer-principal", "User:bob",
                 "--max-life-time-period", str(HOUR_MS)]) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split("\t")[:4] == ["token_id", "hmac", "owner", "requester"]
    token_id, hmac_b64, owner, requester, renewers = row.split("\t")[:5]
    assert (owner, requester, renewers) == ("User:alice", "User:alice", "User:bob")
    with Admin(_user(kafka)) as a:
        assert _known(a, token_id, lambda t: t is not None).password == hmac_b64

    assert main(["delegation-token", "describe", *common, "--owner-principal", "User:alice"]) == 0
    out = capsys.readouterr().out
    assert token_id in out and hmac_b64 not in out          # the HMAC only with --show-hmac
    assert main(["delegation-token", "renew", *common, "--hmac", hmac_b64, "--renew-time-period", "60000"]) == 0
    assert capsys.readouterr().out.startswith("expires_ms\t")
    assert main(["delegation-token", "expire", *common, "--hmac", hmac_b64]) == 0
    with Admin(_user(kafka)) as a:
        assert _known(a, token_id, lambda t: t is None) is None
    assert main(["delegation-token", "renew", *common, "--hmac", hmac_b64]) == 1
    err = capsys.readouterr().err
    assert "DELEGATION_TOKEN_NOT_FOUND" in err and hmac_b64 not in err
