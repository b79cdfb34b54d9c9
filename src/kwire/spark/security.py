"""Kafka's Java security options, as Spark's connector users write them,
turned into kwire's: ``kafka.sasl.jaas.config`` and the TLS key and trust
stores (``kafka.ssl.keystore.*``, ``kafka.ssl.truststore.*``,
``kafka.ssl.key.password``).

SASL: ``sasl.jaas.config`` holds one JAAS login module entry,
``<module class> <flag> key=value ...;``. The Plain and SCRAM modules
(``org.apache.kafka.common.security.plain.PlainLoginModule``,
``org.apache.kafka.common.security.scram.ScramLoginModule``) carry a
``username`` and a ``password``, which become kwire's
``sasl_plain_username`` / ``sasl_plain_password``; the mechanism is
``sasl.mechanism`` (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, required: Kafka's
default, GSSAPI, is Kerberos, which kwire does not speak). The syntax is
that of Kafka's ``JaasConfig``: words of letters, digits and ``_ $ - .``,
values in double or single quotes with backslash escapes, ``//`` and
``/* */`` comments, exactly one entry. Any other login module (OAuthBearer,
Kerberos' ``Krb5LoginModule``, SCRAM delegation tokens...) is refused,
naming the module.

TLS stores: read by kwire's core (:mod:`kwire.stores`, Kafka's semantics,
as for every kwire client: JKS and JCEKS converted by the JDK's
``keytool``, PKCS12 read by ``cryptography``, PEM as it is), here in the
process that translates the options, so that errors name the ``kafka.*``
option (as :class:`SparkOptionError`) and the options handed on are
kwire's PEM ones: ``ssl.ca.location``, ``ssl.certificate.location``,
``ssl.key.location`` (private files, converted once per process for an
unchanged store) and ``ssl.key.password`` for a PEM key. On a cluster each
executor needs the store at the configured path, as the JVM connector's
executors do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Tuple

from kwire.config import PEM_OPTION_NAMES, ConfigError, canonical_name
from kwire.spark.errors import SparkOptionError
from kwire.stores import STORE_OPTIONS, pem_files

__all__ = ["JaasEntry", "parse_jaas", "translate_security", "SECURITY_KEYS"]

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_FLAGS = ("required", "requisite", "sufficient", "optional")
_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

#: The Kafka (Java client) keys this module turns into kwire's options.
SECURITY_KEYS = frozenset({
    "sasl.jaas.config",
    "ssl.truststore.location", "ssl.truststore.type", "ssl.truststore.password",
    "ssl.keystore.location", "ssl.keystore.type", "ssl.keystore.password", "ssl.key.password",
})


@dataclass(frozen=True)
class JaasEntry:
    """One JAAS login module entry: class, control flag, options."""

    module: str
    flag: str
    options: Dict[str, str]


# ------------------------------------------------------------------ JAAS
_WORD = re.compile(r"[A-Za-z0-9_$.\-\u0080-\uffff]+")


def _tokens(text: str) -> List[Tuple[str, str]]:
    """``(kind, value)`` tokens: ``word``, ``string`` (quoted), or the
    punctuation ``=`` / ``;``; comments and white space dropped."""
    out: List[Tuple[str, str]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j + 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                raise SparkOptionError("kafka.sasl.jaas.config: unterminated /* comment")
            i = j + 2
        elif c in "=;":
            out.append((c, c))
            i += 1
        elif c in "\"'":
            value, i = _quoted(text, i)
            out.append(("string", value))
        else:
            m = _WORD.match(text, i)
            if m is None:
                raise SparkOptionError(f"kafka.sasl.jaas.config: unexpected character {c!r} at position {i} "
                                       "(a value with such characters must be quoted)")
            out.append(("word", m.group()))
            i = m.end()
    return out


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}


def _quoted(text: str, start: int) -> Tuple[str, int]:
    """The string quoted at ``start`` (Java StreamTokenizer's rules: a
    backslash escapes the next character, \\n \\t \\r \\b \\f as in Java)."""
    quote = text[start]
    out = []
    i = start + 1
    while i < len(text):
        c = text[i]
        if c == quote:
            return "".join(out), i + 1
        if c == "\n":
            break
        if c == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(c)
        i += 1
    raise SparkOptionError("kafka.sasl.jaas.config: unterminated quoted value")


def parse_jaas(text: str) -> JaasEntry:
    """The one login module entry of a ``sasl.jaas.config`` value."""
    toks = _tokens(text)
    if not toks:
        raise SparkOptionError("kafka.sasl.jaas.config is empty: it must hold one login module entry, e.g. "
                               f'{PLAIN_MODULE} required username="u" password="p";')
    entries: List[JaasEntry] = []
    i = 0
    while i < len(toks):
        if toks[i][0] != "word" or i + 1 >= len(toks) or toks[i + 1][0] != "word":
            raise SparkOptionError("kafka.sasl.jaas.config: expected '<LoginModule class> <flag> key=value ...;'")
        module, flag = toks[i][1], toks[i + 1][1]
        if flag.lower() not in _FLAGS:
            raise SparkOptionError(f"kafka.sasl.jaas.config: invalid control flag {flag!r} for {module} "
                                   f"(one of {', '.join(_FLAGS)})")
        i += 2
        options: Dict[str, str] = {}
        while i < len(toks) and toks[i][0] != ";":
            if (i + 2 >= len(toks) or toks[i][0] != "word" or toks[i + 1][0] != "="
                    or toks[i + 2][0] not in ("word", "string")):
                raise SparkOptionError(f"kafka.sasl.jaas.config: expected key=value in the options of {module}")
            options[toks[i][1]] = toks[i + 2][1]
            i += 3
        if i >= len(toks):
            raise SparkOptionError(f"kafka.sasl.jaas.config: the entry of {module} must end with ';'")
        i += 1
        entries.append(JaasEntry(module, flag.lower(), options))
    if len(entries) != 1:
        raise SparkOptionError(f"kafka.sasl.jaas.config must contain exactly one login module entry, found "
                               f"{len(entries)}")
    return entries[0]


def _sasl(params: Dict[str, Any]) -> Dict[str, Any]:
    """``sasl.jaas.config`` as kwire's user name and password."""
    entry = parse_jaas(str(params.pop("sasl.jaas.config")))
    if entry.module not in (PLAIN_MODULE, SCRAM_MODULE):
        raise SparkOptionError(f"kafka.sasl.jaas.config: login module {entry.module} is not supported by kwire "
                               f"(only {PLAIN_MODULE} and {SCRAM_MODULE}, for the SASL mechanisms "
                               f"{', '.join(_MECHANISMS)})")
    if entry.module == SCRAM_MODULE and entry.options.get("tokenauth", "false").lower() == "true":
        raise SparkOptionError("kafka.sasl.jaas.config: ScramLoginModule with tokenauth=true (delegation tokens) "
                               "is not supported by kwire")
    unknown = sorted(set(entry.options) - {"username", "password", "tokenauth"})
    if unknown:
        raise SparkOptionError(f"kafka.sasl.jaas.config: {entry.module} option(s) {', '.join(unknown)} are not "
                               "supported by kwire (only username and password)")
    missing = [k for k in ("username", "password") if k not in entry.options]
    if missing:
        raise SparkOptionError(f"kafka.sasl.jaas.config: {entry.module} needs {' and '.join(missing)}")
    mechanism = params.get("sasl.mechanism", params.get("sasl.mechanisms"))
    if mechanism is None or str(mechanism).strip().upper() not in _MECHANISMS:
        shown = "not set (Kafka's default is GSSAPI, Kerberos)" if mechanism is None else f"{mechanism!r}"
        raise SparkOptionError(f"kafka.sasl.jaas.config with {entry.module} needs kafka.sasl.mechanism "
                               f"{', '.join(_MECHANISMS)}; it is {shown}")
    for key, value in (("sasl.username", entry.options["username"]), ("sasl.password", entry.options["password"])):
        for given in (key, key.replace("sasl.", "sasl.plain.")):
            if given in params and params[given] != value:
                raise SparkOptionError(f"kafka.{given} contradicts kafka.sasl.jaas.config")
            params.pop(given, None)
    params["sasl.plain.username"] = entry.options["username"]
    params["sasl.plain.password"] = entry.options["password"]
    return params


# ------------------------------------------------------------ key stores
def _stores(params: Dict[str, Any]) -> Dict[str, Any]:
    """The store options as kwire's ``ssl.ca.location`` /
    ``ssl.certificate.location`` / ``ssl.key.location`` /
    ``ssl.key.password``, converted by :func:`kwire.stores.pem_files` in
    this process (once per process for an unchanged store)."""
    names = {key: canonical_name(key) for key in params}
    if not any(name in STORE_OPTIONS for name in names.values()):
        return params
    try:
        files = pem_files({names[key]: value for key, value in params.items()}, prefix="kafka.")
    except ConfigError as e:
        raise SparkOptionError(str(e)) from None
    out = {k: v for k, v in params.items() if names[k] not in STORE_OPTIONS and names[k] not in PEM_OPTION_NAMES}
    for name, key in PEM_OPTION_NAMES.items():
        value = getattr(files, name[len("ssl_"):])
        if value is not None:
            out[key] = value
    return out


def translate_security(params: Mapping[str, Any]) -> Dict[str, Any]:
    """``params`` (``kafka.*`` options, prefix removed, keys lower case)
    with the JAAS config and the key/trust store options replaced by
    kwire's options; raises :class:`SparkOptionError` naming the option."""
    out = dict(params)
    if "sasl.jaas.config" in out:
        out = _sasl(out)
    return _stores(out)
