"""Users' SCRAM credentials as Java's AdminClient describes and changes
them (KIP-554): :class:`ScramCredentialInfo` (a mechanism and its
iteration count), :class:`UserScramCredentialUpsertion` (a password, salted
here on the client with PBKDF2 as Java's ``ScramFormatter.hi`` does: the
password never goes on the wire), :class:`UserScramCredentialDeletion`,
and :class:`UserScramCredentialsDescription`. Passwords, salts and salted
passwords appear in no repr, log or error."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple, Union

from kwire import protocol

__all__ = ["ScramCredentialInfo", "UserScramCredentialUpsertion", "UserScramCredentialDeletion",
           "UserScramCredentialsDescription", "MECHANISMS", "salted_password", "alter_request", "describe_request",
           "descriptions"]

#: Kafka's ``ScramMechanism`` codes, and the hash of each.
MECHANISMS: Dict[str, Tuple[int, str]] = {"SCRAM-SHA-256": (1, "sha256"), "SCRAM-SHA-512": (2, "sha512")}
_NAMES = {code: name for name, (code, _) in MECHANISMS.items()}


class ScramCredentialInfo(NamedTuple):
    """A SCRAM credential's mechanism (``"SCRAM-SHA-256"`` or
    ``"SCRAM-SHA-512"``) and PBKDF2 iterations (the broker takes 4096 to 16384)."""

    mechanism: str
    iterations: int


@dataclass(frozen=True)
class UserScramCredentialUpsertion:
    """Set ``user``'s credential of ``credential_info.mechanism`` to
    ``password`` (Java's ``UserScramCredentialUpsertion``); ``salt`` None
    draws a random one as Java does (130 random bits in base 36)."""

    user: str
    credential_info: ScramCredentialInfo
    password: Union[str, bytes] = field(repr=False)
    salt: Optional[bytes] = field(default=None, repr=False)


@dataclass(frozen=True)
class UserScramCredentialDeletion:
    """Remove ``user``'s credential of ``mechanism`` (Java's ``UserScramCredentialDeletion``)."""

    user: str
    mechanism: str


@dataclass(frozen=True)
class UserScramCredentialsDescription:
    """A user's SCRAM credentials: their mechanisms and iterations, never their secrets."""

    name: str
    credential_infos: Tuple[ScramCredentialInfo, ...]


def _mechanism(name: str) -> Tuple[int, str]:
    try:
        return MECHANISMS[name]
    except KeyError:
        raise ValueError(f"a SCRAM mechanism is one of {sorted(MECHANISMS)}, not {name!r}") from None


def random_salt() -> bytes:
    """A salt as Java's admin client draws one: 130 secure random bits, in base 36, as UTF-8."""
    n, digits = secrets.randbits(130), []
    while n:
        n, d = divmod(n, 36)
        digits.append("0123456789abcdefghijklmnopqrstuvwxyz"[d])
    return ("".join(reversed(digits)) or "0").encode("ascii")


def salted_password(mechanism: str, password: Union[str, bytes], salt: bytes, iterations: int) -> bytes:
    """SCRAM's SaltedPassword, Hi(password, salt, i): PBKDF2 with the
    mechanism's HMAC over the password's UTF-8 bytes (as Java's
    ``ScramFormatter`` takes it, without SASLprep)."""
    raw = password.encode("utf-8") if isinstance(password, str) else bytes(password)
    return hashlib.pbkdf2_hmac(_mechanism(mechanism)[1], raw, salt, iterations)


def alter_request(alterations: Sequence[Union[UserScramCredentialUpsertion, UserScramCredentialDeletion]]) -> Any:
    """An AlterUserScramCredentialsRequest: deletions, and upsertions salted here."""
    cls = protocol.message("AlterUserScramCredentialsRequest")
    deletions, upsertions = [], []
    for a in alterations:
        if isinstance(a, UserScramCredentialDeletion):
            deletions.append(cls.ScramCredentialDeletion(name=a.user, mechanism=_mechanism(a.mechanism)[0]))
            continue
        info = a.credential_info
        salt = random_salt() if a.salt is None else bytes(a.salt)
        upsertions.append(cls.ScramCredentialUpsertion(
            name=a.user, mechanism=_mechanism(info.mechanism)[0], iterations=info.iterations, salt=salt,
            salted_password=salted_password(info.mechanism, a.password, salt, info.iterations)))
    return cls(deletions=deletions, upsertions=upsertions)


def alter_errors(resp: Any) -> List[BaseException]:
    """The failed users of an AlterUserScramCredentials answer (the broker's message, never a secret)."""
    return [protocol.error_for(r.error_code, api="AlterUserScramCredentials", message=r.error_message, user=r.user)
            for r in resp.results if r.error_code]


def describe_request(users: Optional[Iterable[str]]) -> Any:
    """DescribeUserScramCredentials of ``users`` (None: every user with a credential)."""
    cls = protocol.message("DescribeUserScramCredentialsRequest")
    return cls(users=None if users is None else [cls.UserName(name=u) for u in users])


def descriptions(resp: Any) -> Tuple[Dict[str, UserScramCredentialsDescription], List[BaseException]]:
    """The users' descriptions, and the errors of those that failed; the request's own error raises."""
    api = "DescribeUserScramCredentials"
    if resp.error_code:
        raise protocol.error_for(resp.error_code, api=api, message=resp.error_message)
    out, errors = {}, []
    for r in resp.results:
        if r.error_code:
            errors.append(protocol.error_for(r.error_code, api=api, message=r.error_message, user=r.user))
            continue
        out[r.user] = UserScramCredentialsDescription(r.user, tuple(
            ScramCredentialInfo(_NAMES.get(c.mechanism, "UNKNOWN"), c.iterations) for c in r.credential_infos))
    return out, errors
