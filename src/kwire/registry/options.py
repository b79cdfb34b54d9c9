"""The schema registry client's options, with Confluent's names, checked
once when a client is made (:func:`parse`).

=====================================  =========================================================
option                                 meaning (default)
=====================================  =========================================================
``url``                                the registry: one URL or a comma-separated list, tried in
                                       turn when one cannot be reached (required)
``basic.auth.credentials.source``      ``URL`` (the URL's user info), ``USER_INFO``
                                       (``basic.auth.user.info``) or ``SASL_INHERIT`` (the Kafka
                                       client's ``sasl.username``/``sasl.password``, or the
                                       username and password of its ``sasl.jaas.config``).
                                       Unset: ``basic.auth.user.info`` if given, else the URL's
``basic.auth.user.info``               ``user:password``
``bearer.auth.credentials.source``     ``STATIC_TOKEN`` (``bearer.auth.token``) or ``OAUTHBEARER``
                                       (client credentials at ``bearer.auth.issuer.endpoint.url``
                                       with ``bearer.auth.client.id``, ``bearer.auth.client.secret``
                                       and ``bearer.auth.scope``; needs ``kwire[oauth]`` too).
                                       Unset: ``STATIC_TOKEN`` if ``bearer.auth.token`` is given
``bearer.auth.logical.cluster``        sent as ``target-sr-cluster`` (Confluent Cloud)
``bearer.auth.identity.pool.id``       sent as ``Confluent-Identity-Pool-Id``
``ssl.ca.location``                    CA file or directory verifying the registry (default:
                                       httpx's, the certifi bundle)
``ssl.certificate.location``           the client's certificate (PEM), for mutual TLS
``ssl.key.location``                   its private key (PEM), ``ssl.key.password`` if encrypted
``proxy``                              an HTTP proxy's URL
``timeout``                            seconds one call may take, retries and token fetches
                                       included (30)
``cache.capacity``                     entries of each cache (1000)
``cache.latest.ttl.sec``               seconds a subject's latest version is cached (forever)
``max.retries``                        retries of a request after a retriable failure (3)
``retries.wait.ms``                    the first backoff's ceiling; it doubles per retry, with
                                       full jitter (1000)
``retries.max.wait.ms``                the backoff's ceiling (20000)
=====================================  =========================================================

Each option may also be given with the ``schema.registry.`` prefix (Kafka
serializers' and Spark's ``schema.registry.url``). Basic and bearer
credentials exclude each other. Errors (:class:`~kwire.config.ConfigError`)
name the option, never a secret's value; :class:`Options`' ``repr`` hides
them too.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple
from urllib.parse import unquote, urlsplit, urlunsplit

from kwire.config import ConfigError

__all__ = ["Options", "Bearer", "parse", "basic_header", "PREFIX"]

PREFIX = "schema.registry."
_SASL = ("sasl.username", "sasl.password", "sasl.mechanism", "sasl.jaas.config")
_NUMBERS: Dict[str, Tuple[type, Optional[float], float]] = {     # option: (type, default, minimum)
    "timeout": (float, 30.0, 0.001), "cache.capacity": (int, 1000, 1), "cache.latest.ttl.sec": (float, None, 0),
    "max.retries": (int, 3, 0),
    "retries.wait.ms": (int, 1000, 0), "retries.max.wait.ms": (int, 20000, 0),
}
KNOWN = frozenset({
    "url", "basic.auth.credentials.source", "basic.auth.user.info", "bearer.auth.credentials.source",
    "bearer.auth.token", "bearer.auth.logical.cluster", "bearer.auth.identity.pool.id",
    "bearer.auth.issuer.endpoint.url", "bearer.auth.client.id", "bearer.auth.client.secret", "bearer.auth.scope",
    "ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.key.password", "proxy",
    *_NUMBERS, *_SASL,
})


@dataclass(frozen=True)
class Bearer:
    """Bearer credentials: a static ``token``, or the OIDC client ``oidc``
    (the :class:`kwire.sasl.oauth.oidc.OidcTokens` options) fetching one."""

    token: Optional[str] = field(default=None, repr=False)
    oidc: Optional[Dict[str, Any]] = field(default=None, repr=False)
    logical_cluster: Optional[str] = None
    identity_pool: Optional[str] = None


@dataclass(frozen=True)
class Options:
    """A client's checked options (see the module doc)."""

    urls: Tuple[str, ...]                                     # without user info
    basic: Optional[str] = field(default=None, repr=False)    # the Authorization header's value
    bearer: Optional[Bearer] = None
    ca: Optional[str] = None
    certificate: Optional[str] = None
    key: Optional[str] = None
    key_password: Optional[str] = field(default=None, repr=False)
    proxy: Optional[str] = field(default=None, repr=False)
    timeout: float = 30.0
    cache_capacity: int = 1000
    cache_latest_ttl: Optional[float] = None
    max_retries: int = 3
    retries_wait_ms: int = 1000
    retries_max_wait_ms: int = 20000


def _normalized(conf: Mapping[str, Any]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for key, value in conf.items():
        name = key[len(PREFIX):] if key.startswith(PREFIX) else key
        if name not in KNOWN:
            raise ConfigError(f"unknown schema registry option {key!r}")
        if name in out:
            raise ConfigError(f"schema registry option {name!r} is given twice (with and without {PREFIX!r})")
        if value is not None:
            out[name] = value
    return out


def _number(conf: Dict[str, Any], name: str) -> Any:
    kind, default, least = _NUMBERS[name]
    value = conf.get(name, default)
    if value is None:
        return None
    try:
        number = kind(float(value)) if kind is int and not isinstance(value, bool) else kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"schema registry option {name!r} must be a number") from None
    if isinstance(value, bool) or number < least or (kind is int and number != float(value)):
        raise ConfigError(f"schema registry option {name!r} must be {'a whole number ' if kind is int else ''}"
                          f"of at least {least:g}")
    return number


def _urls(value: Any) -> Tuple[Tuple[str, ...], Optional[Tuple[str, str]]]:
    """The URLs without their user info, and the first URL's user info."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError("schema registry option 'url' is required: the registry's URL (or several, "
                          "comma-separated)")
    urls: List[str] = []
    userinfo: Optional[Tuple[str, str]] = None
    for raw in value.split(","):
        parts = urlsplit(raw.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError("schema registry option 'url' must list http:// or https:// URLs")
        if parts.username is not None and userinfo is None:
            userinfo = (unquote(parts.username), unquote(parts.password or ""))
        netloc = parts.netloc.rpartition("@")[2]
        urls.append(urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", "")))
    return tuple(urls), userinfo


def basic_header(user: str, password: str) -> str:
    """An HTTP Basic ``Authorization`` header's value."""
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


def _user_info(conf: Dict[str, Any]) -> Tuple[str, str]:
    value = conf.get("basic.auth.user.info")
    if not isinstance(value, str) or ":" not in value:
        raise ConfigError("schema registry option 'basic.auth.user.info' must be 'user:password'")
    user, _, password = value.partition(":")
    return user, password


def _sasl_inherit(conf: Dict[str, Any]) -> Tuple[str, str]:
    """The Kafka client's SASL user and password (``SASL_INHERIT``)."""
    if str(conf.get("sasl.mechanism", "")).upper() == "GSSAPI":
        raise ConfigError("basic.auth.credentials.source=SASL_INHERIT cannot inherit GSSAPI (Kerberos) credentials")
    if "sasl.jaas.config" in conf:
        from kwire.sasl.jaas import parse_jaas

        entry = parse_jaas(str(conf["sasl.jaas.config"]))
        user, password = entry.options.get("username"), entry.options.get("password")
    else:
        user, password = conf.get("sasl.username"), conf.get("sasl.password")
    if not isinstance(user, str) or not isinstance(password, str):
        raise ConfigError("basic.auth.credentials.source=SASL_INHERIT needs sasl.username and sasl.password "
                          "(or a sasl.jaas.config with a username and a password)")
    return user, password


def _basic(conf: Dict[str, Any], userinfo: Optional[Tuple[str, str]]) -> Optional[str]:
    """The Basic Authorization header, from the source the options name."""
    source = str(conf.get("basic.auth.credentials.source") or "").upper()
    if not source:
        if "basic.auth.user.info" in conf and userinfo is not None:
            raise ConfigError("schema registry credentials are given twice: in the URL and in basic.auth.user.info")
        source = "USER_INFO" if "basic.auth.user.info" in conf else "URL"
    if source == "URL":
        return basic_header(*userinfo) if userinfo is not None else None
    if source == "USER_INFO":
        return basic_header(*_user_info(conf))
    if source == "SASL_INHERIT":
        return basic_header(*_sasl_inherit(conf))
    raise ConfigError("basic.auth.credentials.source must be URL, USER_INFO or SASL_INHERIT")


def _bearer(conf: Dict[str, Any]) -> Optional[Bearer]:
    source = str(conf.get("bearer.auth.credentials.source") or "").upper()
    if not source:
        if "bearer.auth.token" not in conf:
            return None
        source = "STATIC_TOKEN"
    ids = dict(logical_cluster=conf.get("bearer.auth.logical.cluster"),
               identity_pool=conf.get("bearer.auth.identity.pool.id"))
    if source == "STATIC_TOKEN":
        token = conf.get("bearer.auth.token")
        if not isinstance(token, str) or not token:
            raise ConfigError("bearer.auth.credentials.source=STATIC_TOKEN needs bearer.auth.token")
        return Bearer(token=token, **ids)
    if source == "OAUTHBEARER":
        needed = ("bearer.auth.issuer.endpoint.url", "bearer.auth.client.id", "bearer.auth.client.secret")
        missing = [n for n in needed if not conf.get(n)]
        if missing:
            raise ConfigError(f"bearer.auth.credentials.source=OAUTHBEARER needs {', '.join(missing)}")
        oidc = {"sasl_oauthbearer_token_endpoint_url": conf[needed[0]], "sasl_oauthbearer_client_id": conf[needed[1]],
                "sasl_oauthbearer_client_secret": conf[needed[2]], "sasl_oauthbearer_scope": conf.get("bearer.auth.scope")}
        return Bearer(oidc=oidc, **ids)
    raise ConfigError("bearer.auth.credentials.source must be STATIC_TOKEN or OAUTHBEARER")


def parse(conf: Mapping[str, Any]) -> Options:
    """``conf`` (Confluent's option names; see the module doc) checked."""
    if not isinstance(conf, Mapping):
        raise ConfigError("the schema registry client takes a dict of options, e.g. {'url': 'http://...'}")
    c = _normalized(conf)
    urls, userinfo = _urls(c.get("url"))
    basic, bearer = _basic(c, userinfo), _bearer(c)
    if basic is not None and bearer is not None:
        raise ConfigError("schema registry credentials: basic and bearer authentication exclude each other")
    if ("ssl.key.location" in c or "ssl.key.password" in c) and "ssl.certificate.location" not in c:
        raise ConfigError("ssl.key.location and ssl.key.password need ssl.certificate.location")
    return Options(urls=urls, basic=basic, bearer=bearer, ca=c.get("ssl.ca.location"),
                   certificate=c.get("ssl.certificate.location"), key=c.get("ssl.key.location"),
                   key_password=c.get("ssl.key.password"), proxy=c.get("proxy"), timeout=_number(c, "timeout"),
                   cache_capacity=_number(c, "cache.capacity"), cache_latest_ttl=_number(c, "cache.latest.ttl.sec"),
                   max_retries=_number(c, "max.retries"), retries_wait_ms=_number(c, "retries.wait.ms"),
                   retries_max_wait_ms=_number(c, "retries.max.wait.ms"))
