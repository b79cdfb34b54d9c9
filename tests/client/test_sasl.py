"""kwire's SASL client mechanisms against scramp's server side (an
independent, well-kept SCRAM implementation)."""

from __future__ import annotations

import pytest
from scramp import ScramMechanism

from kwire.sasl import Plain, SaslAuthenticationError, Scram, mechanism_for, saslprep


@pytest.mark.parametrize("name", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("user,password", [("alice", "s3cret"), ("b=o,b", "pässwörd\u00a0x")])
def test_scram_against_scramp(name, user, password):
    mech = ScramMechanism(name)
    salt, stored, server_key, iterations = mech.make_auth_info(password, iteration_count=4096)
    server = mech.make_server(lambda u: (salt, stored, server_key, iterations))
    client = Scram(name, user, password)
    server.set_client_first(client.first().decode())
    final = client.step(server.get_server_first().encode())
    server.set_client_final(final.decode())
    assert client.step(server.get_server_final().encode()) is None
    # scramp reports the user name as sent: RFC 5802 escapes "=" and ","
    assert server.user == user.replace("=", "=3D").replace(",", "=2C")


@pytest.mark.parametrize("name", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_wrong_password_is_refused_by_the_server(name):
    from scramp import ScramException

    mech = ScramMechanism(name)
    auth = mech.make_auth_info("right", iteration_count=4096)
    server = mech.make_server(lambda u: auth)
    client = Scram(name, "alice", "wrong")
    server.set_client_first(client.first().decode())
    final = client.step(server.get_server_first().encode())
    with pytest.raises(ScramException):
        server.set_client_final(final.decode())


def test_scram_rejects_a_forged_server_signature_and_a_foreign_nonce():
    mech = ScramMechanism("SCRAM-SHA-256")
    auth = mech.make_auth_info("pw", iteration_count=4096)
    server = mech.make_server(lambda u: auth)
    client = Scram("SCRAM-SHA-256", "alice", "pw")
    server.set_client_first(client.first().decode())
    client.step(server.get_server_first().encode())
    with pytest.raises(SaslAuthenticationError, match="does not verify"):
        client.step(b"v=AAAA")
    other = Scram("SCRAM-SHA-256", "alice", "pw")
    other.first()
    with pytest.raises(SaslAuthenticationError, match="nonce"):
        other.step(b"r=someoneelse,s=QUJD,i=4096")
    with pytest.raises(SaslAuthenticationError, match="refused: other-error"):
        Scram("SCRAM-SHA-256", "a", "b").step(b"e=other-error")


def test_plain_and_secrets_stay_out_of_reprs():
    p = Plain("user", "hunter2")
    assert p.first() == b"\0user\0hunter2"
    assert p.step(b"") is None
    assert "hunter2" not in repr(p) and "hunter2" not in repr(mechanism_for("SCRAM-SHA-512", "u", "hunter2"))
    with pytest.raises(SaslAuthenticationError, match="needs"):
        mechanism_for("PLAIN", None, "x")


def test_saslprep():
    assert saslprep("I\u00adX") == "IX"          # soft hyphen maps to nothing
    assert saslprep("user") == "user"
    assert saslprep("\u00aa") == "a"             # NFKC
    assert saslprep("\u2168") == "IX"
    with pytest.raises(SaslAuthenticationError):
        saslprep("\u0007")                         # a control character
