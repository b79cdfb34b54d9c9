"""SASL: the mechanisms kwire authenticates with, one subpackage or module each.

=================  =============================================  ==========================
mechanism          credentials                                    where
=================  =============================================  ==========================
PLAIN, SCRAM-*     a user name and password; a delegation token   :mod:`kwire.sasl.password`
                   (SCRAM with ``sasl_scram_tokenauth``)
OAUTHBEARER        a token callback, OIDC (client credentials,    :mod:`kwire.sasl.oauth`
                   JWT bearer), AWS MSK IAM, unsecured JWTs
GSSAPI             Kerberos: a keytab or a ticket cache           :mod:`kwire.sasl.kerberos`
=================  =============================================  ==========================

:func:`authenticator` makes, from a client's resolved options, the
:class:`~kwire.sasl.base.Authenticator` its connections share (None without
SASL); the channel (:mod:`kwire.channel`) asks it for a fresh
:class:`~kwire.sasl.base.Mechanism` at each handshake and re-authentication
(KIP-368). The OAUTHBEARER and GSSAPI modules are imported only when asked
for: they need the ``kwire[oauth]``, ``kwire[aws]`` or ``kwire[kerberos]``
extras, and name the one missing.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from kwire.sasl.base import Authenticator, Mechanism, SaslAuthenticationError
from kwire.sasl.password import PasswordAuthenticator, Plain, Scram, mechanism_for, saslprep

__all__ = ["SaslAuthenticationError", "Mechanism", "Authenticator", "Plain", "Scram", "mechanism_for", "saslprep",
           "authenticator", "SASL_PROTOCOLS"]

SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")


def authenticator(cfg: Mapping[str, Any]) -> Optional[Authenticator]:
    """The authenticator a client's connections share, from its resolved
    options; None when its ``security_protocol`` has no SASL. Raises
    :class:`SaslAuthenticationError` (or :class:`kwire.config.ConfigError`)
    at once for credentials that are missing or cannot work."""
    if cfg.get("security_protocol", "PLAINTEXT") not in SASL_PROTOCOLS:
        return None
    name = cfg.get("sasl_mechanism", "PLAIN")
    if name == "OAUTHBEARER":
        from kwire.sasl.oauth import oauth_authenticator

        return oauth_authenticator(cfg)
    if name == "GSSAPI":
        from kwire.sasl.kerberos import KerberosAuthenticator

        return KerberosAuthenticator(cfg)
    return PasswordAuthenticator(name, cfg.get("sasl_plain_username"), cfg.get("sasl_plain_password"),
                                 bool(cfg.get("sasl_scram_tokenauth", False)))
