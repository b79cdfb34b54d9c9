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

TLS stores: kwire's TLS (Python's ``ssl``) takes PEM files. A store of type
PEM is used as it is. PKCS12 stores are read with ``cryptography``; JKS (and
JCEKS) stores are first converted to PKCS12 by the JDK's own ``keytool
-importkeystore`` (Spark runs on a JDK, so it is there; no JKS parser of
ours). The certificates and the key are written as PEM into a private
directory (mode 0700, files 0600, the key unencrypted there) made once per
process and removed at exit. The conversion happens in the process that
makes the client, from the store at the configured location (on a cluster
each executor needs the store at that path, as the JVM connector's
executors do), and is cached per process for an unchanged store.

The type of a store is read from its first bytes (JKS ``FEEDFEED``, JCEKS
``CECECECE``, else PKCS12 DER), as Java's ``KeyStore`` with
``keystore.type.compat`` does for Kafka's default type JKS; ``PEM`` is taken
from ``ssl.*store.type`` (a PEM file has no magic).
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

from kwire.spark.errors import SparkOptionError

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
@dataclass(frozen=True)
class _PemFiles:
    ca: Optional[str] = None          # trusted certificates
    cert: Optional[str] = None        # client certificate chain
    key: Optional[str] = None         # client private key (unencrypted, 0600)


_lock = threading.Lock()
_converted: Dict[Tuple[Any, ...], _PemFiles] = {}
_private_dir: Optional[str] = None


def _directory() -> str:
    """This process's private directory for converted stores (0700)."""
    global _private_dir
    if _private_dir is None:
        _private_dir = tempfile.mkdtemp(prefix="kwire-spark-tls-")      # mkdtemp makes it 0700
        atexit.register(shutil.rmtree, _private_dir, True)
    return _private_dir


def _write_private(data: bytes, suffix: str) -> str:
    fd, path = tempfile.mkstemp(suffix=suffix, dir=_directory())       # mkstemp makes it 0600
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path


def _store_kind(path: str, declared: Optional[str], what: str) -> str:
    if declared is not None and declared.strip().upper() == "PEM":
        return "PEM"
    if declared is not None and declared.strip().upper() not in ("JKS", "PKCS12", "JCEKS"):
        raise SparkOptionError(f"kafka.ssl.{what}.type {declared!r} is not supported by kwire (JKS, PKCS12 or PEM)")
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as e:
        raise SparkOptionError(f"kafka.ssl.{what}.location {path!r} cannot be read: {e}") from None
    if head == b"\xfe\xed\xfe\xed":
        return "JKS"
    if head == b"\xce\xce\xce\xce":
        return "JCEKS"
    return "PKCS12"


def _keytool() -> str:
    home = os.environ.get("JAVA_HOME")
    found = os.path.join(home, "bin", "keytool") if home else None
    if found is None or not os.path.exists(found):
        found = shutil.which("keytool")
    if found is None:
        raise SparkOptionError("reading a JKS store needs the JDK's keytool (on PATH or in $JAVA_HOME/bin)")
    return found


def _run_keytool(args: List[str], env: Dict[str, str], path: str, kind: str, what: str) -> str:
    """Run keytool (passwords in ``env``, never on its command line);
    its output, or :class:`SparkOptionError` with what it said."""
    done = subprocess.run([_keytool(), *args], env={**os.environ, **env}, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        said = [line for line in (done.stderr + "\n" + done.stdout).splitlines() if "error" in line.lower()]
        raise SparkOptionError(f"kafka.ssl.{what}.location {path!r}: keytool could not read the {kind} store: "
                               f"{said[0].strip() if said else 'exit status ' + str(done.returncode)}")
    return done.stdout


def _jks_to_pkcs12(path: str, kind: str, store_password: str, key_password: Optional[str], what: str) -> bytes:
    """The JKS/JCEKS store at ``path`` as PKCS12 bytes (protected by
    ``store_password``), converted by ``keytool -importkeystore``. A key
    with its own password (``ssl.key.password``) is imported by its alias,
    as keytool asks."""
    out = os.path.join(_directory(), f"convert-{os.getpid()}-{threading.get_ident()}.p12")
    env = {"KWIRE_SRC_PASS": store_password, "KWIRE_DEST_PASS": store_password}
    source = ["-srckeystore", path, "-srcstoretype", kind, "-srcstorepass:env", "KWIRE_SRC_PASS"]
    cmd = ["-importkeystore", "-noprompt", *source, "-destkeystore", out, "-deststoretype", "PKCS12",
           "-deststorepass:env", "KWIRE_DEST_PASS"]
    if key_password is not None and key_password != store_password:
        listing = _run_keytool(["-list", "-v", "-keystore", path, "-storetype", kind, "-storepass:env",
                                "KWIRE_SRC_PASS"], env, path, kind, what)
        aliases = re.findall(r"^Alias name: (.*)\n(?:.*\n)*?Entry type: PrivateKeyEntry", listing, re.MULTILINE)
        if len(aliases) != 1:
            raise SparkOptionError(f"kafka.ssl.{what}.location {path!r} holds {len(aliases)} private keys; kwire "
                                   "needs exactly one")
        env["KWIRE_KEY_PASS"] = key_password
        cmd += ["-srcalias", aliases[0], "-srckeypass:env", "KWIRE_KEY_PASS", "-destkeypass:env", "KWIRE_DEST_PASS"]
    try:
        _run_keytool(cmd, env, path, kind, what)
        with open(out, "rb") as f:
            return f.read()
    finally:
        if os.path.exists(out):
            os.unlink(out)


def _pkcs12(data: bytes, password: Optional[str], path: str, what: str) -> Any:
    from cryptography.hazmat.primitives.serialization import pkcs12

    try:
        return pkcs12.load_pkcs12(data, None if password is None else password.encode())
    except ValueError as e:
        raise SparkOptionError(f"kafka.ssl.{what}.location {path!r}: cannot read the PKCS12 store ({e}; wrong "
                               f"kafka.ssl.{what}.password?)") from None


def _certs_pem(certs: List[Any]) -> bytes:
    from cryptography.hazmat.primitives.serialization import Encoding

    return b"".join(c.public_bytes(Encoding.PEM) for c in certs)


def _load_store(path: str, declared: Optional[str], password: Optional[str], key_password: Optional[str],
                what: str) -> Any:
    """The store at ``path`` as cryptography's PKCS12 object, or ``None``
    for a PEM store (used as it is)."""
    if importlib.util.find_spec("cryptography") is None:
        raise SparkOptionError(f"kafka.ssl.{what}.location: reading JKS or PKCS12 stores needs the 'cryptography' "
                               "package (pip install 'kwire[spark]')")
    kind = _store_kind(path, declared, what)
    if kind == "PEM":
        return None
    if kind in ("JKS", "JCEKS"):
        if password is None:
            raise SparkOptionError(f"kafka.ssl.{what}.password is needed to read the {kind} store {path!r}")
        data = _jks_to_pkcs12(path, kind, password, key_password, what)
    else:
        with open(path, "rb") as f:
            data = f.read()
    return _pkcs12(data, password, path, what)


def _truststore(params: Dict[str, Any]) -> Optional[str]:
    path = params.get("ssl.truststore.location")
    if path is None:
        for key in ("ssl.truststore.type", "ssl.truststore.password"):
            if key in params:
                raise SparkOptionError(f"kafka.{key} is set without kafka.ssl.truststore.location")
        return None
    store = _load_store(path, params.get("ssl.truststore.type"), params.get("ssl.truststore.password"), None,
                        "truststore")
    if store is None:
        if "ssl.truststore.password" in params:
            raise SparkOptionError("kafka.ssl.truststore.password is not supported for a PEM truststore (as in Kafka)")
        return path
    certs = [c.certificate for c in store.additional_certs] + ([store.cert.certificate] if store.cert else [])
    if not certs:
        raise SparkOptionError(f"kafka.ssl.truststore.location {path!r} holds no certificate")
    return _write_private(_certs_pem(certs), "-ca.pem")


def _keystore(params: Dict[str, Any]) -> Tuple[Optional[str], Optional[str]]:
    """(certificate file, key file) of the key store; a PEM store is one
    file holding both (its key maybe encrypted with ``ssl.key.password``)."""
    path = params.get("ssl.keystore.location")
    if path is None:
        for key in ("ssl.keystore.type", "ssl.keystore.password", "ssl.key.password"):
            if key in params:
                raise SparkOptionError(f"kafka.{key} is set without kafka.ssl.keystore.location")
        return None, None
    store_password = params.get("ssl.keystore.password")
    key_password = params.get("ssl.key.password")
    store = _load_store(path, params.get("ssl.keystore.type"), store_password, key_password, "keystore")
    if store is None:
        return path, None
    if store.key is None or store.cert is None:
        raise SparkOptionError(f"kafka.ssl.keystore.location {path!r} holds no private key with its certificate")
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

    chain = [store.cert.certificate] + [c.certificate for c in store.additional_certs]
    cert = _write_private(_certs_pem(chain), "-cert.pem")
    key = _write_private(store.key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()), "-key.pem")
    return cert, key


def _stores(params: Dict[str, Any]) -> Dict[str, Any]:
    """The store options as kwire's ``ssl_cafile`` / ``ssl_certfile`` /
    ``ssl_keyfile`` / ``ssl_password``, converted once per process for an
    unchanged store."""
    keys = sorted(k for k in params if k.startswith(("ssl.truststore.", "ssl.keystore.")) or k == "ssl.key.password")
    if not keys:
        return params
    stamp = []
    for k in ("ssl.truststore.location", "ssl.keystore.location"):
        p = params.get(k)
        try:
            stamp.append(os.stat(p).st_mtime_ns if p else None)
        except OSError:
            stamp.append(None)
    cache_key = (tuple((k, str(params[k])) for k in keys), tuple(stamp))
    with _lock:
        files = _converted.get(cache_key)
        if files is None:
            files = _converted[cache_key] = _PemFiles(_truststore(params), *_keystore(params))
    out = {k: v for k, v in params.items() if k not in keys}
    for given, name in (("ssl.ca.location", "ca"), ("ssl.certificate.location", "cert"),
                        ("ssl.key.location", "key")):
        value = getattr(files, name)
        if value is not None:
            if given in out:
                raise SparkOptionError(f"kafka.{given} and the kafka.ssl.*store.* options both name a "
                                       f"{'CA' if name == 'ca' else 'client ' + name}: set one")
            out[given] = value
    if files.cert is not None and files.key is None and params.get("ssl.key.password") is not None:
        out["ssl.key.password"] = params["ssl.key.password"]      # a PEM key store's encrypted key
    return out


def translate_security(params: Mapping[str, Any]) -> Dict[str, Any]:
    """``params`` (``kafka.*`` options, prefix removed, keys lower case)
    with the JAAS config and the key/trust store options replaced by
    kwire's options; raises :class:`SparkOptionError` naming the option."""
    out = dict(params)
    if "sasl.jaas.config" in out:
        out = _sasl(out)
    return _stores(out)
