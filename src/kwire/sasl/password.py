"""The password mechanisms: PLAIN (RFC 4616) and SCRAM-SHA-256 /
SCRAM-SHA-512 (RFC 5802, RFC 7677), with SCRAM's ``tokenauth`` extension for
Kafka's delegation tokens (KIP-48: the token's id as the user name, the
base64 of its HMAC as the password). Passwords live only inside the
mechanism objects and never appear in a repr or an error.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import stringprep
import unicodedata
from typing import Optional

from kwire.sasl.base import Authenticator, Mechanism, SaslAuthenticationError

__all__ = ["Plain", "Scram", "PasswordAuthenticator", "mechanism_for", "saslprep"]


def saslprep(text: str) -> str:
    """SASLprep (RFC 4013) of a user name or password."""
    out = []
    for ch in text:
        if stringprep.in_table_c12(ch):      # non-ASCII spaces map to a space
            out.append(" ")
        elif not stringprep.in_table_b1(ch):  # "commonly mapped to nothing"
            out.append(ch)
    s = unicodedata.normalize("NFKC", "".join(out))
    if not s:
        return s
    prohibited = (
        stringprep.in_table_c12, stringprep.in_table_c21_c22, stringprep.in_table_c3, stringprep.in_table_c4,
        stringprep.in_table_c5, stringprep.in_table_c6, stringprep.in_table_c7, stringprep.in_table_c8,
        stringprep.in_table_c9,
    )
    for ch in s:
        if any(t(ch) for t in prohibited):
            raise SaslAuthenticationError("SASLprep: the name or password holds a prohibited character")
    if any(stringprep.in_table_d1(ch) for ch in s):
        if not (stringprep.in_table_d1(s[0]) and stringprep.in_table_d1(s[-1])) or any(
            stringprep.in_table_d2(ch) for ch in s
        ):
            raise SaslAuthenticationError("SASLprep: invalid bidirectional text")
    return s


class Plain(Mechanism):
    """PLAIN: one message, authzid empty, then the broker's verdict."""

    name = "PLAIN"

    def __init__(self, username: str, password: str) -> None:
        self._msg = b"\0" + username.encode("utf-8") + b"\0" + password.encode("utf-8")

    def first(self) -> bytes:
        return self._msg

    def step(self, server: bytes) -> Optional[bytes]:
        return None


class Scram(Mechanism):
    """SCRAM-SHA-256 or SCRAM-SHA-512, without channel binding; with
    ``tokenauth``, the client-first message carries Kafka's
    ``tokenauth=true`` extension (a delegation token)."""

    def __init__(self, name: str, username: str, password: str, nonce: Optional[str] = None,
                 tokenauth: bool = False) -> None:
        if name not in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            raise ValueError(f"unknown SCRAM mechanism {name!r}")
        self.name = name
        self._hash = hashlib.sha256 if name.endswith("256") else hashlib.sha512
        self._hname = "sha256" if name.endswith("256") else "sha512"
        user = saslprep(username).replace("=", "=3D").replace(",", "=2C")
        self._password = saslprep(password).encode("utf-8")
        self._nonce = nonce or base64.b64encode(os.urandom(24)).decode("ascii")
        self._first_bare = f"n={user},r={self._nonce}"
        self._extensions = ",tokenauth=true" if tokenauth else ""
        self.expiring = tokenauth
        self.credential = "delegation token"
        self._server_signature: Optional[bytes] = None

    def first(self) -> bytes:
        return ("n,," + self._first_bare + self._extensions).encode("utf-8")

    def _hmac(self, key: bytes, msg: bytes) -> bytes:
        return hmac.new(key, msg, self._hash).digest()

    def step(self, server: bytes) -> Optional[bytes]:
        if self._server_signature is None:
            return self._final(server)
        fields = _attributes(server, self.name)
        if "e" in fields:
            raise SaslAuthenticationError(f"{self.name}: the broker refused: {fields['e']}")
        got = base64.b64decode(fields.get("v", ""), validate=False)
        if not hmac.compare_digest(got, self._server_signature):
            raise SaslAuthenticationError(f"{self.name}: the broker's signature does not verify")
        return None

    def _final(self, server_first: bytes) -> bytes:
        fields = _attributes(server_first, self.name)
        if "e" in fields:
            raise SaslAuthenticationError(f"{self.name}: the broker refused: {fields['e']}")
        try:
            nonce, salt, iterations = fields["r"], base64.b64decode(fields["s"]), int(fields["i"])
        except (KeyError, ValueError) as e:
            raise SaslAuthenticationError(f"{self.name}: malformed server-first message") from e
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise SaslAuthenticationError(f"{self.name}: the broker's nonce does not extend ours")
        if not 1 <= iterations <= 10_000_000:
            raise SaslAuthenticationError(f"{self.name}: unreasonable iteration count {iterations}")
        salted = hashlib.pbkdf2_hmac(self._hname, self._password, salt, iterations)
        client_key = self._hmac(salted, b"Client Key")
        stored_key = self._hash(client_key).digest()
        final_bare = f"c=biws,r={nonce}"
        auth_message = f"{self._first_bare}{self._extensions},{server_first.decode('utf-8')},{final_bare}".encode("utf-8")
        signature = self._hmac(stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        self._server_signature = self._hmac(self._hmac(salted, b"Server Key"), auth_message)
        return f"{final_bare},p={base64.b64encode(proof).decode('ascii')}".encode("utf-8")


def _attributes(msg: bytes, name: str) -> dict:
    try:
        text = msg.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SaslAuthenticationError(f"{name}: the broker's message is not UTF-8") from e
    out = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if sep and len(key) == 1:
            out.setdefault(key, value)
    return out


def mechanism_for(name: str, username: Optional[str], password: Optional[str],
                  tokenauth: bool = False) -> Mechanism:
    """The client mechanism ``name`` (PLAIN, SCRAM-SHA-256 or -512) for these credentials."""
    if username is None or password is None:
        raise SaslAuthenticationError(f"SASL {name} needs sasl_plain_username and sasl_plain_password")
    if name == "PLAIN":
        if tokenauth:
            raise SaslAuthenticationError("a delegation token (sasl_scram_tokenauth) needs SCRAM-SHA-256 or -512")
        return Plain(username, password)
    return Scram(name, username, password, tokenauth=tokenauth)


class PasswordAuthenticator(Authenticator):
    """PLAIN or SCRAM with a user name and password (or a delegation token)."""

    def __init__(self, name: str, username: Optional[str], password: Optional[str], tokenauth: bool = False) -> None:
        self.name = name
        self._args = (name, username, password, tokenauth)
        mechanism_for(*self._args)      # refuse missing credentials before anything connects

    def mechanism(self, host: str) -> Mechanism:
        return mechanism_for(*self._args)
