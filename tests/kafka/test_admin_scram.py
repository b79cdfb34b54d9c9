"""SCRAM credentials (KIP-554) on Apache Kafka, with both drivers (``kw``):
a user added with AlterUserScramCredentials (the password salted by kwire
with PBKDF2, a random salt or a given one) then authenticates over SASL
SCRAM-SHA-256 and -512, which proves the salted password is the one the
broker checks; DescribeUserScramCredentials shows mechanisms and
iterations; deletion; the broker's refusals per user. Asked as the super
user over SASL (the suite's shared broker may hold ACLs on the cluster)."""

from __future__ import annotations

import time
import uuid

import pytest

from kwire.admin import (Admin, ScramCredentialInfo, UserScramCredentialDeletion, UserScramCredentialUpsertion)
from kwire.admin_ops.scram import salted_password
from kwire.errors import DuplicateResourceError, KwireError, ResourceNotFoundError, UnacceptableCredentialError

pytestmark = pytest.mark.kafka


def _logs_in(kafka, user: str, password: str, mechanism: str) -> None:
    """``user`` authenticates with ``mechanism`` (retried while the broker has not the credential yet)."""
    deadline = time.monotonic() + 15
    while True:
        try:
            with Admin(kafka.client_config("sasl_plaintext", user=(user, password), mechanism=mechanism),
                       request_timeout_ms=5000) as a:
                a.list_topics()
            return
        except KwireError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _described(admin, user: str) -> bool:
    try:
        admin.describe_user_scram_credentials([user])
    except ResourceNotFoundError as e:
        assert user in str(e)
        return False
    return True


def _eventually(check, seconds: float = 15.0) -> None:
    """``check()`` true within ``seconds``: an alteration is answered once
    the controller has it, and the broker that answers a describe has it a
    moment later."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "not seen in time"
        time.sleep(0.1)


def test_upsert_describe_delete(kw, kafka):
    user, password = f"scram-{uuid.uuid4().hex[:8]}", "pässword-1"
    with kw.Admin(kafka.client_config("sasl_plaintext", mechanism="SCRAM-SHA-256")) as a:
        sha256 = UserScramCredentialUpsertion(user, ScramCredentialInfo("SCRAM-SHA-256", 8192), password)
        sha512 = UserScramCredentialUpsertion(user, ScramCredentialInfo("SCRAM-SHA-512", 4096), password,
                                              salt=b"fixed-salt")
        # Kafka takes one alteration of a user per request
        with pytest.raises(DuplicateResourceError, match=user):
            a.alter_user_scram_credentials([sha256, sha512])
        a.alter_user_scram_credentials([sha256])
        a.alter_user_scram_credentials([sha512])
        got = a.describe_user_scram_credentials([user])
        assert set(got[user].credential_infos) == {("SCRAM-SHA-256", 8192), ("SCRAM-SHA-512", 4096)}
        assert user in a.describe_user_scram_credentials()
        _logs_in(kafka, user, password, "SCRAM-SHA-256")
        _logs_in(kafka, user, password, "SCRAM-SHA-512")
        a.alter_user_scram_credentials([UserScramCredentialDeletion(user, "SCRAM-SHA-256")])
        _eventually(lambda: a.describe_user_scram_credentials([user])[user].credential_infos
                    == (("SCRAM-SHA-512", 4096),))
        with pytest.raises(UnacceptableCredentialError, match=user):
            a.alter_user_scram_credentials([UserScramCredentialUpsertion(
                user, ScramCredentialInfo("SCRAM-SHA-256", 100), password)])
        a.alter_user_scram_credentials([UserScramCredentialDeletion(user, "SCRAM-SHA-512")])
        _eventually(lambda: not _described(a, user))       # a broker's metadata takes the deletion a moment later
        with pytest.raises(ResourceNotFoundError, match=user):
            a.alter_user_scram_credentials([UserScramCredentialDeletion(user, "SCRAM-SHA-512")])


def test_secrets_stay_out_of_sight():
    up = UserScramCredentialUpsertion("u", ScramCredentialInfo("SCRAM-SHA-256", 4096), "hunter2", salt=b"s4lt")
    assert "hunter2" not in repr(up) and "s4lt" not in repr(up)
    # RFC 7677's test vector: SaltedPassword of "pencil" for SCRAM-SHA-256
    import base64
    assert salted_password("SCRAM-SHA-256", "pencil", base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ=="), 4096).hex() == \
        "c4a49510323ab4f952cac1fa99441939e78ea74d6be81ddf7096e87513dc615d"
