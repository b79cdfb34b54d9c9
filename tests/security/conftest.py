"""The security tests' shared pieces: Kerberos' configuration for this
process and its children (kwire's GSSAPI clients read ``KRB5_CONFIG``) and a
delegation token."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def krb5_env(kdc):
    """The test KDC's krb5.conf at the path ``KRB5_CONFIG`` names for this
    process and the processes it starts (tests/conftest.py): kwire's GSSAPI
    clients here, and the Python workers of a Spark session started before."""
    path = os.environ["KRB5_CONFIG"]
    with open(kdc.krb5_conf, "rb") as src, open(path + ".partial", "wb") as dst:
        dst.write(src.read())
    os.replace(path + ".partial", path)
    yield kdc
    os.unlink(path)


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
