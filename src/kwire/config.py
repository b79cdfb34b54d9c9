"""Client configuration: Kafka's option names, their defaults and checks.

Every client takes its options as keyword arguments with Kafka's names in
snake case (``bootstrap_servers``, ``linger_ms``) and, optionally, a mapping
with Kafka's dotted names (``{"bootstrap.servers": ...}``), which is what
Spark passes on from its ``kafka.*`` options; both spellings work in both
places. Values given as strings (``"true"``, ``"100"``) are converted, so a
dict of strings from a properties file or Spark works as it is. An unknown
name is an error that suggests the closest known one.
"""

from __future__ import annotations

import difflib
import importlib
import re
import ssl
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Set, Tuple

from kwire.errors import KwireError
from kwire.partitioners import NAMES, resolve_partitioner

__all__ = [
    "ConfigError",
    "Option",
    "COMMON",
    "PRODUCER",
    "CONSUMER",
    "ADMIN",
    "resolve",
    "check_group_protocol",
    "parse_bootstrap",
    "redact",
    "canonical_name",
    "PEM_OPTION_NAMES",
    "check_stores",
    "ssl_option_name",
    "parse_duration_ms",
    "rebalance_timeout_ms",
]

#: Options whose values are never shown (errors, logs, :func:`redact`): passwords,
#: secrets, keys, and the paths of keytabs and private keys.
SECRET_OPTIONS = frozenset({"sasl_plain_password", "ssl_password", "ssl_truststore_password",
                            "ssl_keystore_password", "sasl_oauthbearer_client_secret",
                            "sasl_oauthbearer_assertion_private_key_passphrase",
                            "sasl_oauthbearer_assertion_private_key_pem", "sasl_oauthbearer_assertion_private_key_file",
                            "sasl_oauthbearer_assertion_file", "sasl_oauthbearer_config", "sasl_kerberos_keytab",
                            "ssl_keystore_key"})


class ConfigError(KwireError, ValueError):
    """An option kwire does not know, or a value it cannot use."""


def _bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().lower() in ("true", "false"):
        return v.strip().lower() == "true"
    if isinstance(v, int) and v in (0, 1):
        return bool(v)
    raise ValueError("expected true or false")


def _int(lo: Optional[int] = None, hi: Optional[int] = None) -> Callable[[Any], int]:
    def conv(v: Any) -> int:
        if isinstance(v, bool):
            raise ValueError("expected an integer")
        n = int(v.strip()) if isinstance(v, str) else int(v)
        if n != v and not isinstance(v, str):
            raise ValueError("expected an integer")
        if lo is not None and n < lo:
            raise ValueError(f"must be at least {lo}")
        if hi is not None and n > hi:
            raise ValueError(f"must be at most {hi}")
        return n

    return conv


def _choice(*names: str, upper: bool = False, aliases: Optional[Mapping[str, str]] = None) -> Callable[[Any], str]:
    """One of ``names`` (case folded); ``aliases`` maps other clients' values
    onto them (each taken as the name it maps to)."""
    also = f" (or {', '.join(aliases)})" if aliases else ""

    def conv(v: Any) -> str:
        s = str(v).strip()
        s = s.upper() if upper else s.lower()
        s = aliases.get(s, s) if aliases else s
        if s not in names:
            raise ValueError(f"expected one of {', '.join(names)}{also}")
        return s

    return conv


_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?=\d)(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)(?:[.,](\d{1,9}))?S)?)?", re.I)


def parse_duration_ms(text: str) -> int:
    """An ISO 8601 duration as Java's ``Duration.parse`` takes it
    (``PnDTnHnMn.nS``: ``P1D``, ``PT1H30M``, ``PT0.5S``), in milliseconds.
    Signs are refused: Java's ``by_duration`` refuses negative durations."""
    m = _DURATION.fullmatch(text.strip())
    if m is None or not any(m.groups()):
        raise ValueError(f"expected an ISO 8601 duration such as PT1H or P1DT12H, not {text.strip()!r}")
    days, hours, minutes, seconds = (int(g or 0) for g in m.groups()[:4])
    millis = int(((m.group(5) or "") + "000")[:3])
    return (((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000 + millis


_RESET = _choice("earliest", "latest", "none", aliases={
    # librdkafka's other values (kafka-python's smallest and largest too)
    "smallest": "earliest", "beginning": "earliest", "largest": "latest", "end": "latest", "error": "none"})


def _offset_reset(v: Any) -> str:
    """``auto_offset_reset``: earliest, latest or none (or another client's
    name for one), or Java's ``by_duration:<ISO 8601 duration>`` (KIP-1106:
    from the first record written at most that long before the reset)."""
    s = str(v).strip()
    if s.lower().startswith("by_duration:"):
        duration = s.split(":", 1)[1].strip().upper()
        parse_duration_ms(duration)
        return f"by_duration:{duration}"
    return _RESET(s)


TLS_VERSIONS = ("TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3")


def _tls_protocols(v: Any) -> Optional[Tuple[str, ...]]:
    """Java's ``ssl.enabled.protocols``: TLS versions, as a list or a comma
    separated string (None: the default)."""
    if v is None:
        return None
    names = [n.strip() for n in (v.split(",") if isinstance(v, str) else v) if n and n.strip()]
    by_lower = {n.lower(): n for n in TLS_VERSIONS}
    unknown = [n for n in names if n.lower() not in by_lower]
    if unknown or not names:
        raise ValueError(f"expected TLS versions among {', '.join(TLS_VERSIONS)}, not {unknown or v!r}")
    return tuple(sorted({by_lower[n.lower()] for n in names}, key=TLS_VERSIONS.index))


def _opt_str(v: Any) -> Optional[str]:
    return None if v is None else str(v)


def _opt_int(lo: int) -> Callable[[Any], Optional[int]]:
    """An integer of at least ``lo``, or None."""
    def conv(v: Any) -> Optional[int]:
        return None if v is None else _int(lo)(v)

    return conv


def _opt_timeout_ms(v: Any) -> Optional[int]:
    """Milliseconds, or None (also kafka-python's ``float('inf')``): no limit."""
    if v is None or (isinstance(v, float) and v == float("inf")) or str(v).strip().lower() in ("inf", "none", ""):
        return None
    return _int(0)(v)


def _opt_assignor(v: Any) -> Optional[str]:
    if v is None or not str(v).strip():
        return None
    return str(v).strip()


def _str(v: Any) -> str:
    return str(v)


def _acks(v: Any) -> int:
    s = str(v).strip().lower()
    if s in ("all", "-1"):
        return -1
    if s in ("0", "1"):
        return int(s)
    raise ValueError("expected all, -1, 0 or 1")


def _compression(v: Any) -> str:
    s = "none" if v is None else str(v).strip().lower()
    if s not in ("none", "gzip", "snappy", "lz4", "zstd"):
        raise ValueError("expected none, gzip, snappy, lz4 or zstd")
    return s


def _partitioner(v: Any) -> Any:
    """A partitioner's name (checked) or a callable (see :mod:`kwire.partitioners`)."""
    if isinstance(v, str) and ":" in v and v.strip() not in NAMES:
        return named_callback(v, "partitioner")
    resolve_partitioner(v)
    return v.strip() if isinstance(v, str) else v


def _level(lo: int, hi: int, default: int) -> Callable[[Any], int]:
    """A compression level: ``lo`` to ``hi``, or the codec's ``default``
    (as Java's ``CompressionType``'s level validator)."""
    check = _int()

    def conv(v: Any) -> int:
        n = check(v)
        if n != default and not lo <= n <= hi:
            raise ValueError(f"must be between {lo} and {hi} (or {default}, the codec's default)")
        return n

    return conv


def _servers(v: Any) -> List[Tuple[str, int]]:
    return parse_bootstrap(v)


def _ssl_context(v: Any) -> Optional[ssl.SSLContext]:
    if v is None or isinstance(v, ssl.SSLContext):
        return v
    raise ValueError("expected an ssl.SSLContext")


#: The key/trust store types kwire reads (Kafka's ``ssl.*store.type``).
STORE_TYPES = ("JKS", "PKCS12", "PEM", "JCEKS")


def _store_type(v: Any) -> Optional[str]:
    if v is None or not str(v).strip():
        return None
    s = str(v).strip().upper()
    if s not in STORE_TYPES:
        raise ValueError("expected JKS, PKCS12 or PEM (or JCEKS)")
    return s


def _any(v: Any) -> Any:
    return v


def _float(lo: float, hi: float) -> Callable[[Any], float]:
    def conv(v: Any) -> float:
        if isinstance(v, bool):
            raise ValueError("expected a number")
        x = float(v.strip()) if isinstance(v, str) else float(v)
        if not lo <= x <= hi:
            raise ValueError(f"must be between {lo} and {hi}")
        return x

    return conv


def named_callback(spec: str, option: str) -> Any:
    """The object ``module:attribute[.attribute...]`` names: a token
    callback (or provider) imported in this process; errors name ``option``."""
    obj = import_named(spec, option, "module:function (e.g. mypackage.tokens:get_token)")
    if not callable(obj) and not callable(getattr(obj, "token", None)):
        raise ConfigError(f"{option}: {spec} is neither callable nor an object with a token() method")
    return obj


def import_named(spec: str, option: str, expected: str) -> Any:
    """The object ``module:attribute[.attribute...]`` names, imported in
    this process; errors name ``option`` and what was ``expected``."""
    module, sep, attr = str(spec).strip().partition(":")
    if not sep or not module or not attr:
        raise ConfigError(f"{option}: expected {expected}, got {spec!r}")
    try:
        obj: Any = importlib.import_module(module)
    except Exception as e:
        raise ConfigError(f"{option}: cannot import {module} ({type(e).__name__}: {e}); every process that makes a "
                          "client needs it (Spark: ship it with --py-files)") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"{option}: {module} has no {attr}")
        obj = getattr(obj, part)
    return obj


def _interceptors(v: Any) -> Optional[Tuple[Any, ...]]:
    """``interceptor_classes``: None, or objects, classes and ``module:Class``
    names (a list, or a string of names separated by commas, as Java's
    option and Spark's ``kafka.*`` options give them), names imported."""
    if v is None:
        return None
    items = v.split(",") if isinstance(v, str) else list(v)
    out = []
    for item in items:
        if isinstance(item, str):
            if not item.strip():
                continue
            item = import_named(item, "interceptor_classes", "module:Class (a Python class; Java class names "
                                "do not apply)")
        if item is None:
            raise ValueError("an interceptor cannot be None")
        out.append(item)
    return tuple(out)


def _callable(v: Any) -> Any:
    """A callable, or an object with a ``token()`` method (kafka-python's and
    aiokafka's token providers), or ``"module:function"`` naming one; None for none."""
    if isinstance(v, str):
        return named_callback(v, "oauth_cb")
    if v is None or callable(v) or callable(getattr(v, "token", None)):
        return v
    raise ValueError("expected a callable, an object with a token() method, or module:function")


def _tracer_provider(v: Any) -> Any:
    """None or False (off), True (OpenTelemetry's global provider), or an object with ``get_tracer``."""
    if isinstance(v, str):
        v = _bool(v)
    if v is None or isinstance(v, bool) or callable(getattr(v, "get_tracer", None)):
        return v or None
    raise ValueError("expected True, False, None or an OpenTelemetry TracerProvider")


def _function(v: Any, option: str) -> Any:
    """A callable, or ``"module:function"`` naming one; None for none."""
    if isinstance(v, str):
        v = import_named(v, option, "module:function")
    if v is None or callable(v):
        return v
    raise ValueError("expected a callable or module:function")


def _callback(option: str) -> Callable[[Any], Any]:
    """The converter of a callback option (:func:`_function`)."""
    def conv(v: Any) -> Any:
        return _function(v, option)

    return conv


def _extensions(v: Any) -> Optional[Dict[str, str]]:
    """SASL extensions (KIP-342): a mapping, or librdkafka's
    ``key=value,key=value``."""
    if v is None or v == "":
        return None
    if isinstance(v, Mapping):
        return {str(k): str(x) for k, x in v.items()}
    out = {}
    for part in str(v).split(","):
        key, sep, value = part.strip().partition("=")
        if not sep or not key:
            raise ValueError("expected key=value[,key=value...]")
        out[key.strip()] = value.strip()
    return out


@dataclass(frozen=True)
class Option:
    """One option: its default (already converted) and its converter."""

    default: Any
    convert: Callable[[Any], Any]
    doc: str = ""


COMMON: Dict[str, Option] = {
    "bootstrap_servers": Option(None, _servers, "host:port[,host:port...] or a list of them"),
    "client_id": Option("kwire", _str, "sent with every request"),
    "request_timeout_ms": Option(30000, _int(1), "how long a request may wait for its response"),
    "socket_connection_setup_timeout_ms": Option(10000, _int(1), "connect + TLS + SASL time limit"),
    "client_dns_lookup": Option("use_all_dns_ips", _choice("use_all_dns_ips", "resolve_canonical_bootstrap_servers_only"),
                                "Kafka's client.dns.lookup. use_all_dns_ips: a connection attempt tries every address "
                                "the broker's name resolves to, in turn (one that refuses, or gives no answer within "
                                "its share of socket_connection_setup_timeout_ms, hands on to the next; the whole "
                                "attempt stays within that timeout). resolve_canonical_bootstrap_servers_only: the "
                                "same, and each bootstrap name is first replaced by the canonical names (reverse "
                                "lookup) of its addresses, for Kerberos or TLS host names behind an alias"),
    "reconnect_backoff_ms": Option(50, _int(0), "first wait before reconnecting to a broker"),
    "reconnect_backoff_max_ms": Option(1000, _int(0), "longest wait (the backoff doubles up to it)"),
    "retry_backoff_ms": Option(100, _int(0), "wait before retrying a failed request"),
    "retry_backoff_max_ms": Option(1000, _int(0), "longest wait between retries (the backoff doubles up to it)"),
    "metadata_max_age_ms": Option(300000, _int(0), "refresh cluster metadata at least this often"),
    "metadata_recovery_strategy": Option("rebootstrap", _choice("rebootstrap", "none"),
                                         "Kafka's metadata.recovery.strategy (KIP-899): rebootstrap: when no "
                                         "broker the client knows can be reached, when no metadata came for "
                                         "metadata_recovery_rebootstrap_trigger_ms, or when a broker answers "
                                         "REBOOTSTRAP_REQUIRED, forget the brokers learned and start again from "
                                         "bootstrap_servers (names resolved afresh); none: keep to the brokers "
                                         "learned"),
    "metadata_recovery_rebootstrap_trigger_ms": Option(300000, _int(0),
                                                       "rebootstrap when no metadata refresh succeeded for this "
                                                       "long while one was wanted (KIP-1102)"),
    "metadata_cluster_check_enable": Option(True, _bool,
                                            "send the cluster id and node id a connection is meant for, so that "
                                            "a Kafka 4.4+ broker that is another node or of another cluster "
                                            "answers REBOOTSTRAP_REQUIRED (KIP-1242); only with rebootstrap"),
    "security_protocol": Option("PLAINTEXT", _choice("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL", upper=True)),
    "ssl_cafile": Option(None, _opt_str, "CA bundle to verify brokers (default: the system's)"),
    "ssl_certfile": Option(None, _opt_str, "client certificate (mutual TLS)"),
    "ssl_keyfile": Option(None, _opt_str, "client private key (mutual TLS)"),
    "ssl_password": Option(None, _opt_str, "password of the client private key (Kafka's ssl.key.password: of "
                           "ssl_keyfile, of a PEM key store's key, or of a JKS key store's key)"),
    "ssl_truststore_location": Option(None, _opt_str, "Kafka's trust store: the CAs that verify brokers, as a JKS, "
                                      "PKCS12 or PEM file (instead of ssl_cafile; kwire.stores)"),
    "ssl_truststore_type": Option(None, _store_type, "JKS (Kafka's default), PKCS12 or PEM; JKS, JCEKS and "
                                  "PKCS12 are told apart by the store's first bytes, PEM must be named"),
    "ssl_truststore_password": Option(None, _opt_str, "the trust store's password (none for PEM; without it, as "
                                      "in Kafka, a JKS trust store's integrity is not checked)"),
    "ssl_keystore_location": Option(None, _opt_str, "Kafka's key store: the client's key and certificate chain "
                                    "(mutual TLS), as a JKS, PKCS12 or PEM file (instead of ssl_certfile / "
                                    "ssl_keyfile; kwire.stores)"),
    "ssl_keystore_type": Option(None, _store_type, "JKS (Kafka's default), PKCS12 or PEM, as ssl_truststore_type"),
    "ssl_keystore_password": Option(None, _opt_str, "the key store's password (none for PEM: its key's password "
                                    "is ssl_password)"),
    "ssl_truststore_certificates": Option(None, _opt_str, "the CAs that verify brokers as PEM text, not a file "
                                          "(Java's, with ssl_truststore_type PEM or unset; librdkafka's ssl.ca.pem)"),
    "ssl_keystore_certificate_chain": Option(None, _opt_str, "the client's certificate chain as PEM text (Java's; "
                                             "librdkafka's ssl.certificate.pem), with ssl_keystore_key"),
    "ssl_keystore_key": Option(None, _opt_str, "the client's private key as PEM text, maybe encrypted with "
                               "ssl_password (Java's; librdkafka's ssl.key.pem); never shown"),
    "ssl_check_hostname": Option(True, _bool, "verify the broker's name against its certificate"),
    "ssl_crlfile": Option(None, _opt_str, "a PEM certificate revocation list: a broker certificate it revokes "
                          "is refused (kafka-python's; librdkafka's ssl.crl.location)"),
    "ssl_enabled_protocols": Option(None, _tls_protocols, "the TLS versions a connection may use (Java's; "
                                    "None: TLSv1.2 and TLSv1.3, Java's default)"),
    "ssl_context": Option(None, _ssl_context, "a ready ssl.SSLContext (overrides the ssl_* options)"),
    "socket_send_buffer_bytes": Option(None, _opt_int(-1)),
    "socket_receive_buffer_bytes": Option(None, _opt_int(-1)),
    "connections_max_idle_ms": Option(540000, _int(-1),
                                      "close connections idle this long (nothing in flight); -1: never"),
    "receive_message_max_bytes": Option(100_000_000, _int(1000, 2**31 - 1),
                                        "largest response accepted (a Fetch may be up to its max_bytes)"),
    "statistics_interval_ms": Option(0, _int(0, 86_400_000),
                                     "librdkafka's statistics.interval.ms: call stats_cb with the client's "
                                     "statistics (JSON, kwire.metrics.report) this often; 0: never"),
    "stats_cb": Option(None, _callback("stats_cb"),
                       "librdkafka's stats_cb: called with the statistics JSON every statistics_interval_ms, where "
                       "the client's I/O runs (a consumer's poll(), a producer's I/O thread, kwire.aio's loop); "
                       "a callable or module:function"),
    "error_cb": Option(None, _callback("error_cb"),
                       "librdkafka's error_cb: called with a kwire error when every broker is unreachable (once "
                       "until one connects) or one refuses the client for good (kwire.metrics.events)"),
    "throttle_cb": Option(None, _callback("throttle_cb"),
                          "librdkafka's throttle_cb: called with a ThrottleEvent (broker_name, broker_id, "
                          "throttle_time in seconds) when a broker's quota delays the client"),
    "enable_metrics_push": Option(True, _bool,
                                  "Java's enable.metrics.push (KIP-714): push this client's metrics to the "
                                  "brokers whose client metrics subscriptions ask for them "
                                  "(kwire.metrics.telemetry)"),
    "tracer_provider": Option(None, _tracer_provider,
                              "OpenTelemetry tracing (kwire.tracing, kwire[otel]): True for the global tracer "
                              "provider, or a TracerProvider; send, poll and rebalance spans, trace context in "
                              "the records' headers (W3C traceparent); None: off, at no cost"),
    "metrics_sample_window_ms": Option(30000, _int(1),
                                       "Java's metrics.sample.window.ms: a metric's -avg, -max and -rate cover "
                                       "the last two windows of this length (Java's 2 samples)"),
}

#: SASL (:mod:`kwire.sasl`): Kafka's names, and librdkafka's where Kafka's
#: come from a JAAS file (``sasl.oauthbearer.*``, ``sasl.kerberos.*``).
SASL: Dict[str, Option] = {
    "sasl_mechanism": Option("PLAIN", _choice("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI",
                                              upper=True)),
    "sasl_plain_username": Option(None, _opt_str, "SASL user name (PLAIN, SCRAM; a delegation token's id)"),
    "sasl_plain_password": Option(None, _opt_str, "SASL password (never logged; a delegation token's HMAC, base64)"),
    "sasl_scram_tokenauth": Option(False, _bool, "SCRAM with a delegation token (Kafka's JAAS tokenauth=true): "
                                   "the user name is the token's id, the password the base64 of its HMAC"),
    # OAUTHBEARER (kwire.sasl.oauth)
    "sasl_oauthbearer_method": Option("default", _choice("default", "oidc", "aws_msk_iam"),
                                      "where OAUTHBEARER tokens come from: default (oauth_cb, or an unsecured JWT "
                                      "with enable_sasl_oauthbearer_unsecure_jwt), oidc (a token endpoint), "
                                      "aws_msk_iam (AWS's signer, kwire[aws])"),
    "oauth_cb": Option(None, _callable, "OAUTHBEARER's token callback: returns (token, expiry in epoch seconds"
                       "[, principal[, extensions]]), a JWT whose exp says its expiry, or kwire.sasl.oauth.OAuthToken; "
                       "a coroutine function for kwire.aio; an object with token() as kafka-python's"),
    "sasl_oauthbearer_config": Option(None, _opt_str, "passed to oauth_cb when it takes an argument; for unsecured "
                                      "JWTs, librdkafka's 'principal=... scope=... lifeSeconds=... extension_K=V'"),
    "enable_sasl_oauthbearer_unsecure_jwt": Option(False, _bool, "development only: make unsigned JWTs "
                                                   "(Kafka's unsecuredLoginStringClaim_sub)"),
    "sasl_oauthbearer_token_endpoint_url": Option(None, _opt_str, "OIDC: the token endpoint"),
    "sasl_oauthbearer_client_id": Option(None, _opt_str, "OIDC: the client id"),
    "sasl_oauthbearer_client_secret": Option(None, _opt_str, "OIDC: the client secret (never logged)"),
    "sasl_oauthbearer_scope": Option(None, _opt_str, "OIDC: the scope asked for"),
    "sasl_oauthbearer_extensions": Option(None, _extensions, "SASL extensions sent with the token (KIP-342): "
                                          "key=value[,key=value] or a mapping"),
    "sasl_oauthbearer_grant_type": Option("client_credentials",
                                          _choice("client_credentials", "urn:ietf:params:oauth:grant-type:jwt-bearer"),
                                          "OIDC grant: client_credentials (KIP-768) or the JWT bearer grant (KIP-1139)"),
    "sasl_oauthbearer_assertion_file": Option(None, _opt_str, "OIDC: a ready JWT assertion, read at each fetch"),
    "sasl_oauthbearer_assertion_private_key_file": Option(None, _opt_str, "OIDC: the PEM private key that signs "
                                                          "the assertion kwire makes (never logged)"),
    "sasl_oauthbearer_assertion_private_key_pem": Option(None, _opt_str, "OIDC: that key, inline"),
    "sasl_oauthbearer_assertion_private_key_passphrase": Option(None, _opt_str, "OIDC: the key's passphrase"),
    "sasl_oauthbearer_assertion_algorithm": Option("RS256", _choice("RS256", "ES256", upper=True)),
    "sasl_oauthbearer_assertion_claim_iss": Option(None, _opt_str, "the assertion's issuer (default: client id)"),
    "sasl_oauthbearer_assertion_claim_sub": Option(None, _opt_str, "the assertion's subject (default: client id)"),
    "sasl_oauthbearer_assertion_claim_aud": Option(None, _opt_str, "the assertion's audience (default: the "
                                                   "token endpoint)"),
    "sasl_oauthbearer_assertion_claim_exp_seconds": Option(300, _int(1), "the assertion's lifetime"),
    "sasl_oauthbearer_assertion_claim_nbf_seconds": Option(60, _int(0), "the assertion's not-before, back from now"),
    "sasl_oauthbearer_assertion_claim_jti_include": Option(True, _bool, "a unique jti in each assertion"),
    "sasl_oauthbearer_aws_region": Option(None, _opt_str, "aws_msk_iam: the cluster's AWS region"),
    "sasl_oauthbearer_aws_profile": Option(None, _opt_str, "aws_msk_iam: a named AWS profile"),
    "sasl_oauthbearer_aws_role_arn": Option(None, _opt_str, "aws_msk_iam: a role to assume"),
    "sasl_oauthbearer_aws_role_session_name": Option("kwire", _str, "aws_msk_iam: the assumed role's session name"),
    "https_ca_location": Option(None, _opt_str, "CA bundle that verifies the token endpoint (default: the system's)"),
    "sasl_login_connect_timeout_ms": Option(10000, _int(1), "token endpoint: connect timeout"),
    "sasl_login_read_timeout_ms": Option(10000, _int(1), "token endpoint: read timeout"),
    "sasl_login_refresh_window_factor": Option(0.8, _float(0.5, 1.0), "refresh a token at this fraction of its "
                                               "lifetime"),
    "sasl_login_refresh_window_jitter": Option(0.05, _float(0.0, 0.25), "plus up to this fraction, at random"),
    "sasl_login_refresh_min_period_seconds": Option(60, _int(0, 900), "refresh no sooner than this after the last "
                                                    "(when the token's lifetime leaves room for it)"),
    "sasl_login_refresh_buffer_seconds": Option(300, _int(0, 3600), "refresh at least this long before expiry "
                                                "(when the token's lifetime leaves room for it)"),
    "sasl_login_retry_backoff_ms": Option(100, _int(1), "first wait after a failed token fetch"),
    "sasl_login_retry_backoff_max_ms": Option(10000, _int(1), "longest wait (it doubles up to this)"),
    # GSSAPI (kwire.sasl.kerberos)
    "sasl_kerberos_service_name": Option("kafka", _str, "the brokers' Kerberos service (their principal's first part)"),
    "sasl_kerberos_principal": Option(None, _opt_str, "the client's principal (default: the keytab's or the "
                                      "ticket cache's)"),
    "sasl_kerberos_keytab": Option(None, _opt_str, "the client's keytab (never logged); without it, the ticket cache"),
    "sasl_kerberos_ccache": Option(None, _opt_str, "the ticket cache to use (default: KRB5CCNAME's, the system's)"),
    "sasl_kerberos_kinit_cmd": Option("kinit -R", _str, "renews a ticket cache's TGT (not used with a keytab, "
                                      "whose tickets GSSAPI gets anew itself)"),
    "sasl_kerberos_min_time_before_relogin": Option(60000, _int(0), "ms between two renewals at least; 0: never"),
    "sasl_kerberos_domain_name": Option(None, _opt_str, "the host name in the brokers' principal (default: each "
                                        "broker's host)"),
}

COMMON.update(SASL)

#: Java's ``interceptor.classes``, the producer's and the consumer's (kwire.interceptors).
INTERCEPTORS = Option(None, _interceptors, "interceptors (kwire.interceptors): objects, classes or module:Class "
                      "names, called in order")

PRODUCER: Dict[str, Option] = {
    **COMMON,
    "acks": Option(-1, _acks, "all (-1), 1 or 0"),
    "linger_ms": Option(5, _int(0), "wait this long for more records before sending a batch"),
    "batch_size": Option(16384, _int(1), "bytes of records per partition batch"),
    "compression_type": Option("none", _compression),
    # KIP-390: Java's level per codec; librdkafka's one compression.level (-1: each codec's default)
    "compression_gzip_level": Option(-1, _level(1, 9, -1), "gzip: 1 (fastest) to 9 (smallest); -1: zlib's default"),
    "compression_lz4_level": Option(9, _level(1, 17, 9), "lz4: 9 (Java's default) is lz4's fast mode; any other "
                                    "level lz4's high-compression mode at that level"),
    "compression_zstd_level": Option(3, _level(-131072, 22, 3), "zstd: -131072 (fastest) to 22 (smallest)"),
    "compression_level": Option(-1, _level(0, 12, -1), "librdkafka's: the compression_type codec's level "
                                "(gzip 0-9, lz4 0-12, zstd 0-12; snappy has none); -1: the per-codec options'"),
    "partitioner": Option(None, _partitioner, "records sent without a partition: None (Java's built-in: murmur2 "
                          "of the key, else sticky), a name (Java's RoundRobinPartitioner..., librdkafka's "
                          "murmur2, consistent_random...) or a callable partitioner(topic, key, value, "
                          "num_partitions) -> int (see kwire.partitioners)"),
    "partitioner_ignore_keys": Option(False, _bool, "keyed records are partitioned as keyless ones (sticky)"),
    "partitioner_adaptive_partitioning_enable": Option(True, _bool, "the next sticky partition is chosen "
                                                       "against the partitions' queues (KIP-794)"),
    "partitioner_availability_timeout_ms": Option(0, _int(0), "with adaptive partitioning, keyless records avoid "
                                                  "partitions whose leader took no batch for this long; 0: never"),
    "interceptor_classes": INTERCEPTORS,
    "enable_idempotence": Option(True, _bool, "exactly-once per partition (needs acks=all)"),
    "max_in_flight_requests_per_connection": Option(5, _int(1)),
    "retries": Option(2147483647, _int(0)),
    "delivery_timeout_ms": Option(120000, _int(1), "a record fails if not acknowledged by then"),
    "buffer_memory": Option(33554432, _int(1), "bytes of records waiting to be sent"),
    "max_block_ms": Option(60000, _int(0), "how long send() blocks when the buffer is full"),
    "max_request_size": Option(1048576, _int(1)),
    "transactional_id": Option(None, _opt_str),
    "transaction_timeout_ms": Option(60000, _int(1)),
    "transaction_two_phase_commit_enable": Option(False, _bool, "KIP-939: the transactions take part in a "
                                                  "two-phase commit and never time out (InitProducerId v6; "
                                                  "the brokers' transaction.two.phase.commit.enable)"),
}

CONSUMER: Dict[str, Option] = {
    **COMMON,
    "group_id": Option(None, _opt_str),
    "group_instance_id": Option(None, _opt_str),
    "auto_offset_reset": Option("latest", _offset_reset),
    "enable_auto_commit": Option(True, _bool),
    "auto_commit_interval_ms": Option(5000, _int(1)),
    "enable_auto_offset_store": Option(True, _bool, "librdkafka's: a commit without offsets (the auto commit's "
                                       "too) takes each partition's position; off: only what store_offsets() "
                                       "stored, so records handed to other threads commit once processed"),
    "isolation_level": Option("read_uncommitted", _choice("read_uncommitted", "read_committed")),
    "fetch_min_bytes": Option(1, _int(1)),
    "fetch_max_wait_ms": Option(500, _int(0)),
    "fetch_max_bytes": Option(52428800, _int(1)),
    "max_partition_fetch_bytes": Option(1048576, _int(1)),
    "max_poll_records": Option(500, _int(1)),
    "max_in_flight_fetches": Option(4, _int(1, 16)),
    "enable_fetch_sessions": Option(True, _bool, "incremental fetch sessions (KIP-227): after a full Fetch, a "
                                    "broker's Fetches name only the partitions that changed (off: every Fetch "
                                    "names every partition, for comparison; a broker may refuse sessions anyway)"),
    "max_poll_bytes": Option(32 * 1024 * 1024, _int(1)),
    "check_crcs": Option(True, _bool),
    "max_decompressed_bytes": Option(256 * 1024 * 1024, _int(1, 2**31 - 1)),
    "session_timeout_ms": Option(45000, _int(1)),
    "heartbeat_interval_ms": Option(3000, _int(1)),
    "max_poll_interval_ms": Option(300000, _int(1)),
    "rebalance_timeout_ms": Option(None, _opt_int(1),
                                   "aiokafka's: how long the coordinator waits for the members to rejoin a "
                                   "rebalance; None: max_poll_interval_ms (Java's, which has no option of its own)"),
    "partition_assignment_strategy": Option(None, _any, "assignor names or objects (group_protocol 'classic' "
                                            "only: a 'consumer' group's coordinator assigns)"),
    "group_protocol": Option("classic", _choice("classic", "consumer"),
                             "the group membership protocol: 'classic' (JoinGroup / SyncGroup, the members' "
                             "assignors) or 'consumer' (KIP-848's ConsumerGroupHeartbeat, the coordinator "
                             "assigns; Kafka 4.0+)"),
    "group_remote_assignor": Option(None, _opt_assignor,
                                    "group_protocol 'consumer': the coordinator's assignor ('uniform', 'range'); "
                                    "None: the broker's default (group.consumer.assignors' first)"),
    "client_rack": Option(None, _opt_str),
    "interceptor_classes": INTERCEPTORS,
    "exclude_internal_topics": Option(True, _bool),
    "consumer_timeout_ms": Option(None, _opt_timeout_ms, "kafka-python's: iterating over the consumer (for record "
                                  "in consumer) ends after this long without a record; None: it never ends"),
    "allow_auto_create_topics": Option(True, _bool, "ask the broker to create a subscribed or assigned topic that "
                                       "does not exist (it does if its auto.create.topics.enable is on)"),
}

#: A share group member's options (kwire.share.ShareConsumer): Java's KafkaShareConsumer refuses the
#: consumer options a share group decides itself (offset reset, commits, isolation, assignment, the
#: session and heartbeat times: the group's configs), and so does this table by leaving them out.
SHARE_CONSUMER: Dict[str, Option] = {
    **COMMON,
    "group_id": Option(None, _opt_str),
    **{name: CONSUMER[name] for name in ("fetch_min_bytes", "fetch_max_wait_ms", "fetch_max_bytes", "max_poll_records",
                                         "check_crcs", "max_decompressed_bytes", "max_poll_interval_ms",
                                         "client_rack")},
    "default_api_timeout_ms": Option(60000, _int(0), "how long commit_sync waits when given no timeout"),
    "share_acknowledgement_mode": Option("implicit", _choice("implicit", "explicit"),
                                         "implicit: the next poll, commit_sync, commit_async accept what the last "
                                         "poll returned; explicit: each record is acknowledged with acknowledge()"),
    "share_acquire_mode": Option("batch_optimized", _choice("batch_optimized", "record_limit"),
                                 "how the broker counts the records a ShareFetch asks for (ShareFetch v2): "
                                 "batch_optimized rounds to whole batches; record_limit acquires at most that "
                                 "many"),
    "share_fetch_max_records": Option(4000, _int(1), "most records one ShareFetch asks the broker to acquire "
                                      "(kwire's): the member buffers them for its next polls (each returns "
                                      "max_poll_records at most); it asks for fewer, down to max_poll_records, "
                                      "while the application is slow to take them (what it buffers is handed "
                                      "out within a quarter of the record lock duration)"),
}

ADMIN: Dict[str, Option] = dict(COMMON)


def _canonical(name: str) -> str:
    return name.strip().replace(".", "_").replace("-", "_").lower()


# Kafka and librdkafka names that mean one of ours.
ALIASES = {
    "sasl_username": "sasl_plain_username",
    "sasl_password": "sasl_plain_password",
    "sasl_mechanisms": "sasl_mechanism",
    "compression_codec": "compression_type",
    "partitioner_class": "partitioner",              # Java's (and Spark's kafka.partitioner.class)
    "ssl_ca_location": "ssl_cafile",
    "ssl_certificate_location": "ssl_certfile",
    "ssl_key_location": "ssl_keyfile",
    "ssl_crl_location": "ssl_crlfile",
    "ssl_ca_pem": "ssl_truststore_certificates",     # librdkafka's inline PEM
    "ssl_certificate_pem": "ssl_keystore_certificate_chain",
    "ssl_key_pem": "ssl_keystore_key",
    "ssl_key_password": "ssl_password",
    "sasl_oauth_token_provider": "oauth_cb",          # kafka-python's and aiokafka's token provider
    # librdkafka's own aliases of Java's names (its CONFIGURATION.md)
    "metadata_broker_list": "bootstrap_servers",
    "queue_buffering_max_ms": "linger_ms",
    "request_required_acks": "acks",
    "message_send_max_retries": "retries",
    "message_timeout_ms": "delivery_timeout_ms",
    "fetch_wait_max_ms": "fetch_max_wait_ms",
    "fetch_message_max_bytes": "max_partition_fetch_bytes",
}


def canonical_name(raw: str) -> str:
    """kwire's name of option ``raw`` (snake case, Kafka's and librdkafka's
    other names for the same option mapped by :data:`ALIASES`)."""
    name = _canonical(raw)
    return ALIASES.get(name, name)


def resolve(
    table: Mapping[str, Option],
    config: Optional[Mapping[str, Any]] = None,
    kwargs: Optional[Mapping[str, Any]] = None,
    *,
    what: str = "client",
    check: Optional[Callable[[Dict[str, Any], Set[str]], None]] = None,
) -> Dict[str, Any]:
    """Every option of ``table``: its default, overridden by ``config``
    (dotted or snake names), overridden by ``kwargs``; values converted;
    then ``check(options, names given)`` (it raises :class:`ConfigError`)."""
    out = {name: opt.default for name, opt in table.items()}
    given: Dict[str, Tuple[str, Any]] = {}
    for source in (config or {}, kwargs or {}):
        for raw, value in source.items():
            name = canonical_name(raw)
            if name == "ssl_endpoint_identification_algorithm":
                name, value = "ssl_check_hostname", _endpoint_identification(raw, value, what)
            if name not in table:
                close = difflib.get_close_matches(name, list(table), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ConfigError(f"unknown {what} option {raw!r}{hint}")
            given[name] = (raw, value)
    for name, (raw, value) in given.items():
        try:
            out[name] = table[name].convert(value)
        except (TypeError, ValueError) as e:
            shown = "***" if name in SECRET_OPTIONS else repr(value)
            raise ConfigError(f"{what} option {raw!r}={shown}: {e}") from None
    if out.get("bootstrap_servers") is None and "bootstrap_servers" in table:
        raise ConfigError(f"{what} needs bootstrap_servers (host:port[,host:port...])")
    if "ssl_truststore_location" in table:
        try:
            check_stores(out)
        except ConfigError as e:
            raise ConfigError(f"{what} options: {e}") from None
    if check is not None:
        check(out, {name for name, (_, value) in given.items() if value is not None and value != ""})
    return out


#: The options each group protocol refuses when they are given, as Kafka's
#: client (4.0) does: the other protocol's.
_NOT_WITH_PROTOCOL = {
    "consumer": ("partition_assignment_strategy", "heartbeat_interval_ms", "session_timeout_ms"),
    "classic": ("group_remote_assignor",),
}


def check_group_protocol(options: Mapping[str, Any], given: Set[str]) -> None:
    """Refuse the options of the group protocol not chosen: with
    ``group_protocol="consumer"`` the coordinator assigns and sets the
    heartbeat interval and session timeout (``group.consumer.*`` on the
    broker), so ``partition_assignment_strategy``, ``heartbeat_interval_ms``
    and ``session_timeout_ms`` are errors; with ``"classic"``,
    ``group_remote_assignor`` is."""
    protocol = options["group_protocol"]
    wrong = [name for name in _NOT_WITH_PROTOCOL[protocol] if name in given]
    if wrong:
        where = ("the broker's group.consumer.* settings and group_remote_assignor decide these"
                 if protocol == "consumer" else "it belongs to group_protocol='consumer'")
        raise ConfigError(f"consumer option {', '.join(wrong)} cannot be set when group_protocol={protocol!r} "
                          f"({where})")


#: librdkafka's dotted names of kwire's PEM options (Kafka's, for
#: ``ssl.key.password``), as errors show them and Spark's options hand them on.
PEM_OPTION_NAMES = {
    "ssl_cafile": "ssl.ca.location",
    "ssl_certfile": "ssl.certificate.location",
    "ssl_keyfile": "ssl.key.location",
    "ssl_password": "ssl.key.password",
}


def ssl_option_name(name: str, prefix: str = "") -> str:
    """How an error names the TLS option ``name`` (kwire's snake name):
    Kafka's dotted name after ``prefix`` (``kafka.`` for Spark); kwire's
    own PEM options also by their snake name when there is no prefix."""
    dotted = PEM_OPTION_NAMES.get(name, name.replace("_", "."))
    return f"{prefix}{dotted}" if prefix or name not in PEM_OPTION_NAMES else f"{name} ({dotted})"


def _set(options: Mapping[str, Any], name: str) -> bool:
    return options.get(name) not in (None, "")


def check_stores(options: Mapping[str, Any], prefix: str = "") -> None:
    """Refuse TLS file options that contradict each other or describe
    nothing (``options`` by kwire's snake names, values as given or
    converted; errors name them by Kafka's names after ``prefix``): a store
    type or password without the store's location, a store together with
    the PEM option for the same thing (a trust store and ``ssl_cafile``; a
    key store and ``ssl_certfile`` / ``ssl_keyfile``), a type kwire does not
    read, a password on a PEM store (as Kafka: a PEM key store's key has
    ``ssl.key.password``), a key or key password without a certificate.
    Reading the stores is :mod:`kwire.stores`'."""
    def name(n: str) -> str:
        return ssl_option_name(n, prefix)

    _check_inline_pem(options, name)
    for store, pem, what in (("truststore", ("ssl_cafile",), "the trusted CAs"),
                             ("keystore", ("ssl_certfile", "ssl_keyfile"), "the client certificate and key")):
        location = f"ssl_{store}_location"
        inline = INLINE_PEM[store]
        for n in (f"ssl_{store}_type", f"ssl_{store}_password"):
            if _set(options, n) and not _set(options, location) and not (n.endswith("_type") and _set(options, inline)):
                raise ConfigError(f"{name(n)} is set without {name(location)}")
        if not _set(options, location):
            continue
        both = [n for n in (*pem, inline) if _set(options, n)]
        if both:
            raise ConfigError(f"{name(location)} and {name(both[0])} both give {what}: set one")
        type_name = f"ssl_{store}_type"
        try:
            kind = _store_type(options.get(type_name))
        except ValueError as e:
            raise ConfigError(f"{name(type_name)} {options.get(type_name)!r} is not supported: {e}") from None
        if kind == "PEM" and _set(options, f"ssl_{store}_password"):
            key = f": its key's password is {name('ssl_password')}" if store == "keystore" else ""
            raise ConfigError(f"{name(f'ssl_{store}_password')} is not supported for a PEM {store}, as in "
                              f"Kafka{key}")
    if not any(_set(options, n) for n in ("ssl_keystore_location", "ssl_certfile", "ssl_keystore_certificate_chain")):
        for n in ("ssl_keyfile", "ssl_password"):
            if _set(options, n):
                raise ConfigError(f"{name(n)} is set without a client certificate: set {name('ssl_certfile')} "
                                  f"or {name('ssl_keystore_location')}")


#: Per store, the option giving its contents as PEM text (Java's) rather than a file.
INLINE_PEM = {"truststore": "ssl_truststore_certificates", "keystore": "ssl_keystore_certificate_chain"}


def _check_inline_pem(options: Mapping[str, Any], name: Callable[[str], str]) -> None:
    """Java's PEM text options: the chain and the key together, never beside
    the files giving the same thing, and with the store's type PEM or unset."""
    chain, key = "ssl_keystore_certificate_chain", "ssl_keystore_key"
    if _set(options, chain) != _set(options, key):
        given, missing = (chain, key) if _set(options, chain) else (key, chain)
        raise ConfigError(f"{name(given)} is set without {name(missing)}: a client certificate needs both")
    for store, files in (("truststore", ("ssl_cafile",)), ("keystore", ("ssl_certfile", "ssl_keyfile"))):
        inline = INLINE_PEM[store]
        if not _set(options, inline):
            continue
        both = [n for n in files if _set(options, n)]
        if both:
            raise ConfigError(f"{name(inline)} and {name(both[0])} both give the {store}'s contents: set one")
        declared = options.get(f"ssl_{store}_type")
        if declared not in (None, "") and str(declared).strip().upper() != "PEM":
            raise ConfigError(f"{name(inline)} is PEM text, but {name(f'ssl_{store}_type')} is {declared!r}: "
                              "leave it unset or PEM")


def rebalance_timeout_ms(cfg: Mapping[str, Any]) -> int:
    """The rebalance timeout a member sends: ``rebalance_timeout_ms``, or
    ``max_poll_interval_ms`` as Java's consumer sends."""
    given = cfg.get("rebalance_timeout_ms")
    return cfg["max_poll_interval_ms"] if given is None else given


def _endpoint_identification(raw: str, value: Any, what: str) -> bool:
    """Kafka's ``ssl.endpoint.identification.algorithm`` as
    ``ssl_check_hostname``: ``https`` verifies the broker's host name
    against its certificate, the empty string (or None) does not. Anything
    else is refused: a typo must not turn the check off."""
    s = "" if value is None else str(value).strip().lower()
    if s not in ("https", ""):
        raise ConfigError(f"{what} option {raw!r}={value!r}: expected 'https' (verify the broker's host name) or "
                          "'' (do not verify it; librdkafka's 'none')")
    return s == "https"


def parse_bootstrap(value: Any) -> List[Tuple[str, int]]:
    """``"h1:9092,h2"`` or ``["h1:9092", ("h2", 9093)]`` as (host, port)
    pairs; the port defaults to 9092; ``[v6::addr]:port`` is understood."""
    if value is None:
        raise ValueError("no servers")
    items: Iterable[Any] = value.split(",") if isinstance(value, str) else value
    out = []
    for item in items:
        if isinstance(item, tuple):
            host, port = item
            out.append((str(host), int(port)))
            continue
        s = str(item).strip()
        if not s:
            continue
        if "://" in s:
            s = s.split("://", 1)[1]
        if s.startswith("["):
            host, _, rest = s[1:].partition("]")
            port = int(rest[1:]) if rest.startswith(":") else 9092
        elif s.count(":") == 1:
            host, p = s.split(":")
            port = int(p)
        else:
            host, port = s, 9092
        if not 0 < port < 65536:
            raise ValueError(f"bad port in {item!r}")
        out.append((host, port))
    if not out:
        raise ValueError("no servers")
    return out


def redact(config: Mapping[str, Any]) -> Dict[str, Any]:
    """A copy safe to log or show: secrets replaced by ``***``."""
    return {k: ("***" if k in SECRET_OPTIONS and v is not None else v) for k, v in config.items()}
