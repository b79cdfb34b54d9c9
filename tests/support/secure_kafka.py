"""Apache Kafka with every way into a managed or enterprise cluster: OAUTHBEARER
against a real OIDC provider, unsecured JWTs, Kerberos, SCRAM with delegation
tokens, and re-authentication (KIP-368).

:func:`start_secure_kafka` starts one KRaft node through
:func:`support.kafka.start_kafka` (the same assembly, storage format, SCRAM
users and launch) with its own listeners, all on 127.0.0.1:

======================  ==============  ===============================================
listener                protocol        mechanisms and validation
======================  ==============  ===============================================
``plaintext``           PLAINTEXT       also the inter-broker listener
``oauth``               SASL_PLAINTEXT  OAUTHBEARER: ``OAuthBearerValidatorCallbackHandler``
                                        with Keycloak's JWKS, its issuer, audience ``kafka``
``unsecured``           SASL_PLAINTEXT  OAUTHBEARER with Kafka's default validator of
                                        unsecured JWTs (``alg: none``)
``gssapi``              SASL_PLAINTEXT  GSSAPI, service ``kafka/127.0.0.1`` (the KDC's keytab)
``scram``               SASL_PLAINTEXT  SCRAM-SHA-256, SCRAM-SHA-512, PLAIN (the users of
                                        :mod:`support.kafka`); delegation tokens work
``<each of those>_reauth``              the same, with ``connections.max.reauth.ms`` =
                                        :data:`REAUTH_MS`
======================  ==============  ===============================================

A SASL exchange on a ``_reauth`` listener announces a session lifetime of at
most :data:`REAUTH_MS`; on ``scram`` and ``gssapi`` none (0); on ``oauth`` and
``unsecured`` Kafka announces the token's remaining life even without
``connections.max.reauth.ms``, so a client re-authenticates before its token
expires there too.

Principals: on the OAUTHBEARER listeners the token's ``azp`` (the client id:
``User:kwire-client``; ``sasl.oauthbearer.sub.claim.name``), on the unsecured
ones its ``sub``, on the GSSAPI ones the Kerberos name's first component
(``alice@KWIRE.TEST`` is ``User:alice``), on SCRAM and PLAIN the user name.
Super users: :data:`SUPER_USERS`; with no ACL anyone may act
(``allow.everyone.if.no.acl.found``). The broker's JVM gets
``-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls=<JWKS URL>`` (Kafka 4
refuses other URLs) and ``-Djava.security.krb5.conf=<the KDC's krb5.conf>``.

:class:`SecureKafka` exposes the facts a client needs (addresses; the token
endpoint, issuer, audience and clients of :class:`support.keycloak.Keycloak`;
keytabs, principals and ``krb5.conf`` of :class:`support.kdc.Kdc`), kwire
options for the SCRAM and PLAINTEXT listeners (:meth:`SecureKafka.client_config`)
and Java client properties for Kafka's own client as a peer
(:meth:`SecureKafka.java_config`, :meth:`SecureKafka.java_options`: these
include ``-Djdk.net.hosts.file`` with no names, as Kafka's Java client would
otherwise ask for ``kafka/localhost``, the reverse name of 127.0.0.1). kwire's
OAUTHBEARER and GSSAPI options are left to the tests of those clients.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from kwire.sasl.login import KRB5_MODULE, OAUTH_MODULE, OIDC_HANDLERS, PLAIN_MODULE, SCRAM_MODULE
from support.kafka import HOST, SUPER_USER, USERS, KafkaBroker, start_kafka
from support.kdc import Kdc
from support.keycloak import CLIENT, Keycloak, OidcClient
from support.maven import Progress

REAUTH_MS = 10000
KINDS = ("oauth", "unsecured", "gssapi", "scram")
SECURE_LISTENERS: Dict[str, Tuple[str, str]] = {
    "plaintext": ("PLAINTEXT", HOST),
    **{name: ("SASL_PLAINTEXT", HOST) for kind in KINDS for name in (kind, f"{kind}_reauth")},
}
SUPER_USERS = (SUPER_USER[0], "alice", CLIENT.client_id)
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")
# the client's login classes are the ones kwire translates (kwire.sasl.login); the broker's validator is its own
OAUTH_LOGIN, KRB5_LOGIN, SCRAM_LOGIN, PLAIN_LOGIN = OAUTH_MODULE, KRB5_MODULE, SCRAM_MODULE, PLAIN_MODULE
OAUTH_LOGIN_HANDLER = OIDC_HANDLERS[0]
OAUTH_VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
ALLOWED_URLS = "org.apache.kafka.sasl.oauthbearer.allowed.urls"
ALLOWED_FILES = "org.apache.kafka.sasl.oauthbearer.allowed.files"
SUB_CLAIM = "azp"


def kind(listener: str) -> str:
    """``oauth_reauth`` -> ``oauth``."""
    return listener[:-len("_reauth")] if listener.endswith("_reauth") else listener


def _oauth_props(name: str, keycloak: Keycloak) -> Dict[str, str]:
    p = f"listener.name.{name}."
    return {p + "sasl.enabled.mechanisms": "OAUTHBEARER",
            p + "oauthbearer.sasl.jaas.config": f"{OAUTH_LOGIN} required;",
            p + "oauthbearer.sasl.server.callback.handler.class": OAUTH_VALIDATOR,
            p + "sasl.oauthbearer.jwks.endpoint.url": keycloak.jwks_url,
            p + "sasl.oauthbearer.expected.issuer": keycloak.issuer,
            p + "sasl.oauthbearer.expected.audience": keycloak.audience,
            p + "sasl.oauthbearer.sub.claim.name": SUB_CLAIM}


def _unsecured_props(name: str) -> Dict[str, str]:
    p = f"listener.name.{name}."
    jaas = f'{OAUTH_LOGIN} required unsecuredLoginStringClaim_sub="{SUPER_USER[0]}";'
    return {p + "sasl.enabled.mechanisms": "OAUTHBEARER", p + "oauthbearer.sasl.jaas.config": jaas}


def _krb5_jaas(keytab: str, principal: str) -> str:
    return f'{KRB5_LOGIN} required useKeyTab=true storeKey=true keyTab="{keytab}" principal="{principal}";'


def _gssapi_props(name: str, kdc: Kdc) -> Dict[str, str]:
    p = f"listener.name.{name}."
    return {p + "sasl.enabled.mechanisms": "GSSAPI",
            p + "gssapi.sasl.jaas.config": _krb5_jaas(kdc.keytabs["kafka"], kdc.service_principal)}


def _scram_props(name: str, users: Dict[str, str]) -> Dict[str, str]:
    p = f"listener.name.{name}."
    plain_users = " ".join(f'user_{u}="{pw}"' for u, pw in users.items())
    return {p + "sasl.enabled.mechanisms": ",".join(SCRAM_MECHANISMS),
            p + "scram-sha-256.sasl.jaas.config": f"{SCRAM_LOGIN} required;",
            p + "scram-sha-512.sasl.jaas.config": f"{SCRAM_LOGIN} required;",
            p + "plain.sasl.jaas.config": f"{PLAIN_LOGIN} required {plain_users};"}


def server_overrides(keycloak: Keycloak, kdc: Kdc, users: Dict[str, str]) -> Dict[str, str]:
    """The server properties of the secure listeners (see the module doc)."""
    props = {"super.users": ";".join(f"User:{u}" for u in SUPER_USERS), "sasl.kerberos.service.name": kdc.service}
    for listener in SECURE_LISTENERS:
        k = kind(listener)
        if k == "oauth":
            props.update(_oauth_props(listener, keycloak))
        elif k == "unsecured":
            props.update(_unsecured_props(listener))
        elif k == "gssapi":
            props.update(_gssapi_props(listener, kdc))
        elif k == "scram":
            props.update(_scram_props(listener, users))
        if listener.endswith("_reauth"):
            props[f"listener.name.{listener}.connections.max.reauth.ms"] = str(REAUTH_MS)
    return props


@dataclass
class SecureKafka:
    """The running broker (``broker``, a :class:`support.kafka.KafkaBroker`) and the
    servers it trusts (``keycloak``, ``kdc``). ``addresses`` maps each name of
    :data:`SECURE_LISTENERS` to "host:port"; ``reauth_ms`` is the ``_reauth``
    listeners' session lifetime."""

    broker: KafkaBroker
    keycloak: Keycloak
    kdc: Kdc
    reauth_ms: int = REAUTH_MS

    listeners = SECURE_LISTENERS
    sub_claim = SUB_CLAIM
    super_users = SUPER_USERS

    @property
    def addresses(self) -> Dict[str, str]:
        return self.broker.addresses

    @property
    def users(self) -> Dict[str, str]:
        """SCRAM and PLAIN users (name -> password), the super user ``admin`` among them."""
        return {SUPER_USER[0]: SUPER_USER[1], **self.broker.users}

    @property
    def startup_seconds(self) -> float:
        return self.broker.startup_seconds

    # the OIDC provider's facts
    @property
    def token_endpoint(self) -> str:
        return self.keycloak.token_endpoint

    @property
    def issuer(self) -> str:
        return self.keycloak.issuer

    @property
    def jwks_url(self) -> str:
        return self.keycloak.jwks_url

    @property
    def audience(self) -> str:
        return self.keycloak.audience

    # the KDC's facts
    @property
    def krb5_conf(self) -> str:
        return self.kdc.krb5_conf

    @property
    def service_name(self) -> str:
        return self.kdc.service

    @property
    def keytabs(self) -> Dict[str, str]:
        return self.kdc.keytabs

    @property
    def principals(self) -> Dict[str, str]:
        return self.kdc.principals

    def bootstrap(self, listener: str = "scram") -> str:
        return self.addresses[listener]

    @property
    def alive(self) -> bool:
        return self.broker.alive

    def rss_bytes(self) -> int:
        return self.broker.rss_bytes()

    def log_tail(self, limit: int = 6000) -> str:
        return self.broker.log_tail(limit)

    def client_config(self, listener: str = "scram", *, user: Optional[Tuple[str, str]] = None,
                      mechanism: str = "SCRAM-SHA-256", **extra) -> dict:
        """kwire options (Kafka's names) for ``listener``: on the SCRAM listeners the
        mechanism and credentials (the super user unless ``user`` is given); on the
        others only the address and security protocol (plus ``extra``)."""
        if kind(listener) == "scram":
            return self.broker.client_config(listener, user=user, mechanism=mechanism, **extra)
        return {"bootstrap.servers": self.addresses[listener], "security.protocol": SECURE_LISTENERS[listener][0],
                **extra}

    def java_config(self, listener: str, *, client: OidcClient = CLIENT, principal: str = "alice",
                    user: Optional[Tuple[str, str]] = None, mechanism: str = "SCRAM-SHA-512",
                    unsecured_sub: str = SUPER_USER[0]) -> Dict[str, str]:
        """Kafka's Java client properties for ``listener``: OIDC client credentials of
        ``client`` (``oauth``; with its secret, or for ``kwire-jwt`` a client assertion
        signed with its key, KIP-1139), an unsecured JWT naming ``unsecured_sub``,
        ``principal``'s keytab (``gssapi``), or SCRAM/PLAIN ``user`` (the super user by default)."""
        cfg = {"bootstrap.servers": self.addresses[listener], "security.protocol": SECURE_LISTENERS[listener][0]}
        k = kind(listener)
        if k == "oauth":
            cfg.update(self._java_oidc(client))
        elif k == "unsecured":
            cfg.update({"sasl.mechanism": "OAUTHBEARER",
                        "sasl.jaas.config": f'{OAUTH_LOGIN} required unsecuredLoginStringClaim_sub="{unsecured_sub}";'})
        elif k == "gssapi":
            cfg.update({"sasl.mechanism": "GSSAPI", "sasl.kerberos.service.name": self.service_name,
                        "sasl.jaas.config": _krb5_jaas(self.keytabs[principal], self.principals[principal])})
        elif k == "scram":
            name, password = user or SUPER_USER
            login = PLAIN_LOGIN if mechanism == "PLAIN" else SCRAM_LOGIN
            cfg.update({"sasl.mechanism": mechanism,
                        "sasl.jaas.config": f'{login} required username="{name}" password="{password}";'})
        return cfg

    @property
    def java_hosts_file(self) -> str:
        """A hosts file with no names, for ``-Djdk.net.hosts.file`` (see :meth:`java_options`)."""
        return os.path.join(self.broker.workdir, "java-hosts")

    def _java_oidc(self, client: OidcClient) -> Dict[str, str]:
        cfg = {"sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.token.endpoint.url": self.token_endpoint,
               "sasl.login.callback.handler.class": OAUTH_LOGIN_HANDLER}
        if client.secret is not None:
            return {**cfg, "sasl.jaas.config": f'{OAUTH_LOGIN} required clientId="{client.client_id}" '
                                               f'clientSecret="{client.secret}";'}
        return {**cfg, "sasl.jaas.config": f'{OAUTH_LOGIN} required clientId="{client.client_id}";',
                "sasl.oauthbearer.assertion.private.key.file": self.keycloak.jwt_private_key,
                "sasl.oauthbearer.assertion.claim.iss": client.client_id,
                "sasl.oauthbearer.assertion.claim.sub": client.client_id,
                "sasl.oauthbearer.assertion.claim.aud": self.issuer,
                "sasl.oauthbearer.assertion.claim.jti.include": "true"}

    def java_options(self) -> List[str]:
        """The Java client's JVM options: the token endpoint allowed (Kafka 4), the KDC's
        krb5.conf, and a hosts file without names. Kafka's Java client names the
        Kerberos service's host by a reverse lookup of the address it connected to
        (``getHostName()``): 127.0.0.1 would become ``localhost``, a principal the
        KDC does not have; with no names, the lookup keeps ``127.0.0.1``. The key files
        of client assertions are allowed too (``...allowed.files``)."""
        keys = ",".join((self.keycloak.jwt_private_key, self.keycloak.assertion_private_key))
        return [f"-D{ALLOWED_URLS}={self.token_endpoint}", f"-D{ALLOWED_FILES}={keys}",
                f"-Djava.security.krb5.conf={self.krb5_conf}", f"-Djdk.net.hosts.file={self.java_hosts_file}"]

    def stop(self) -> None:
        """Stop the broker (not the Keycloak or KDC it trusts). Idempotent."""
        self.broker.stop()

    def __enter__(self) -> "SecureKafka":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def start_secure_kafka(keycloak: Keycloak, kdc: Kdc, *, progress: Progress = None, **kwargs) -> SecureKafka:
    """Start the broker (see the module doc) trusting ``keycloak`` and ``kdc``, both running;
    ``kwargs`` go to :func:`support.kafka.start_kafka` (``overrides`` among them, on top of these)."""
    users = {SUPER_USER[0]: SUPER_USER[1], **USERS}
    overrides = {**server_overrides(keycloak, kdc, users), **kwargs.pop("overrides", {})}
    jvm = [f"-D{ALLOWED_URLS}={keycloak.jwks_url}", f"-Djava.security.krb5.conf={kdc.krb5_conf}",
           *kwargs.pop("jvm_options", ())]
    broker = start_kafka(listeners=SECURE_LISTENERS, overrides=overrides, jvm_options=jvm, progress=progress,
                         **kwargs)
    secure = SecureKafka(broker, keycloak, kdc)
    Path(secure.java_hosts_file).write_text("# no names: a reverse lookup of 127.0.0.1 fails (see java_options)\n")
    return secure
