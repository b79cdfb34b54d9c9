"""The security tests' shared pieces: Kerberos' configuration for this
process (kwire's GSSAPI clients read ``KRB5_CONFIG``) and a delegation token."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def krb5_env(kdc):
    """``KRB5_CONFIG`` naming the test KDC's krb5.conf, for this process's Kerberos library."""
    before = os.environ.get("KRB5_CONFIG")
    os.environ["KRB5_CONFIG"] = kdc.krb5_conf
    yield kdc
    if before is None:
        os.environ.pop("KRB5_CONFIG", None)
    else:
        os.environ["KRB5_CONFIG"] = before


@pytest.fixture(scope="session")
def token(secure_kafka):
    """A delegation token of admin's (made over SCRAM), expired at the end."""
    import time

    from kwire.admin import Admin

    with Admin(secure_kafka.client_config("scram")) as admin:
        made = admin.create_delegation_token()
        deadline = time.monotonic() + 10       # the brokers learn of it through the metadata log
        while not any(t.token_id == made.token_id for t in admin.describe_delegation_tokens()):
            assert time.monotonic() < deadline
            time.sleep(0.1)
    yield made
    with Admin(secure_kafka.client_config("scram")) as admin:
        admin.expire_delegation_token(made.hmac)
