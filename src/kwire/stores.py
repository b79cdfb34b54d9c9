"""Kafka's TLS key and trust stores (``ssl.truststore.*``,
``ssl.keystore.*``, ``ssl.key.password``) as the PEM files Python's ``ssl``
takes; every client's TLS context is made from :func:`pem_files`, and
Spark's options (:mod:`kwire.spark.security`) go through it too.

A store of type PEM is used as it is (a trust store: CA certificates; a key
store: the private key, maybe encrypted with ``ssl.key.password``, and its
certificate chain in one file). PKCS12 stores are read with
``cryptography`` (the ``tls`` extra); JKS (and JCEKS) stores are first
converted to PKCS12 by the JDK's own ``keytool -importkeystore`` (no JKS
parser of ours); a JKS trust store without a password is listed by
``keytool -list -rfc``, its integrity not checked, as Java (and so Kafka)
reads it. The certificates and the key are written as PEM into a
private directory (mode 0700, files 0600, the key unencrypted there) made
once per process and removed at exit. The conversion happens in the
process that makes the client, when it is made (not per connection), and
is cached per process for an unchanged store (same options, same
modification time and size).

Java's PEM text options (``ssl.truststore.certificates``,
``ssl.keystore.certificate.chain`` and ``ssl.keystore.key``; librdkafka's
``ssl.ca.pem``, ``ssl.certificate.pem``, ``ssl.key.pem``) are written into
that directory too, once per process for the same text, each PEM block
given on one line wrapped as Python's ``ssl`` needs it; the text is never
quoted in an error.

The type of a store is read from its first bytes (JKS ``FEEDFEED``, JCEKS
``CECECECE``, PKCS12 a DER sequence), as Java's ``KeyStore`` with
``keystore.type.compat`` does for Kafka's default type JKS; ``PEM`` is taken
from ``ssl.*store.type`` only (a PEM file has no magic): a PEM file given
as another type is refused, saying so. Every refusal is a
:class:`~kwire.config.ConfigError` naming the option.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass, replace
from typing import Any, Dict, List, Mapping, Optional, Tuple

from kwire.config import ConfigError, check_stores, ssl_option_name

__all__ = ["PemFiles", "pem_files", "STORE_OPTIONS"]

#: kwire's names of Kafka's store options (``ssl.key.password`` is kwire's
#: ``ssl_password``, which a PEM key file takes too).
STORE_OPTIONS = ("ssl_truststore_location", "ssl_truststore_type", "ssl_truststore_password",
                 "ssl_keystore_location", "ssl_keystore_type", "ssl_keystore_password",
                 "ssl_truststore_certificates", "ssl_keystore_certificate_chain", "ssl_keystore_key")

_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.DOTALL)

#: How long one keytool run may take.
KEYTOOL_TIMEOUT = 60.0


@dataclass(frozen=True)
class PemFiles:
    """What a client's TLS context is made from: kwire's ``ssl_cafile``,
    ``ssl_certfile``, ``ssl_keyfile`` and ``ssl_password``."""

    cafile: Optional[str] = None      # trusted certificates (None: the system's)
    certfile: Optional[str] = None    # client certificate chain (a PEM key store: with its key)
    keyfile: Optional[str] = None     # client private key
    password: Optional[str] = None    # the private key's password (None: not encrypted)


_lock = threading.Lock()              # held while a store is converted
_converted: Dict[Tuple[Any, ...], PemFiles] = {}
_written: Dict[str, str] = {}         # PEM text options: the digest of what was written (and its kind) -> its file
_private_dir: Optional[str] = None
_owner_pid = 0                        # the process _converted and _private_dir belong to


def _this_process() -> None:
    """Forget a parent's conversions in a forked child: their files are
    the parent's, removed when it exits."""
    global _private_dir, _owner_pid
    if _owner_pid != os.getpid():
        _owner_pid, _private_dir = os.getpid(), None
        _converted.clear()
        _written.clear()


def _remove(path: str, pid: int) -> None:
    if os.getpid() == pid:            # a forked child exiting leaves its parent's directory alone
        shutil.rmtree(path, True)


def _directory() -> str:
    """This process's private directory for converted stores (0700),
    removed at exit."""
    global _private_dir
    if _private_dir is None:
        _private_dir = tempfile.mkdtemp(prefix="kwire-tls-")      # mkdtemp makes it 0700
        atexit.register(_remove, _private_dir, os.getpid())
    return _private_dir


def _write_private(data: bytes, suffix: str) -> str:
    fd, path = tempfile.mkstemp(suffix=suffix, dir=_directory())       # mkstemp makes it 0600
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path


@dataclass(frozen=True)
class _Store:
    """One store's options, and how errors name them."""

    what: str                         # "truststore" or "keystore"
    path: str
    declared: Optional[str]
    password: Optional[str]
    key_password: Optional[str]       # the key store's ssl.key.password
    prefix: str

    def name(self, field: str) -> str:
        return ssl_option_name(f"ssl_{self.what}_{field}", self.prefix)

    def fail(self, problem: str) -> ConfigError:
        return ConfigError(f"{self.name('location')} {self.path!r}: {problem}")


def _store_kind(store: _Store) -> str:
    """JKS, JCEKS, PKCS12 or PEM: what the file is, checked against what
    ``ssl.*store.type`` says."""
    try:
        with open(store.path, "rb") as f:
            head = f.read(64)
    except OSError as e:
        raise store.fail(f"cannot be read ({e.strerror or e})") from None
    is_pem = head.lstrip().startswith(b"-----BEGIN ")
    declared = None if store.declared is None else store.declared.strip().upper()
    if declared == "PEM":
        if not is_pem:
            raise store.fail(f"is not a PEM file ({store.name('type')} is PEM)")
        return "PEM"
    if is_pem:
        raise store.fail(f"is a PEM file: set {store.name('type')} to PEM (Kafka's default type is JKS)")
    if head[:4] == b"\xfe\xed\xfe\xed":
        return "JKS"
    if head[:4] == b"\xce\xce\xce\xce":
        return "JCEKS"
    if head[:1] == b"\x30":
        return "PKCS12"
    raise store.fail("is not a key store (neither JKS, JCEKS, PKCS12 nor, with "
                     f"{store.name('type')} PEM, a PEM file)")


def _keytool(store: _Store, kind: str) -> str:
    home = os.environ.get("JAVA_HOME")
    found = os.path.join(home, "bin", "keytool") if home else None
    if found is None or not os.path.exists(found):
        found = shutil.which("keytool")
    if found is None:
        where = f"not in $JAVA_HOME/bin ({home}) nor on PATH" if home else "not on PATH and JAVA_HOME is not set"
        raise store.fail(f"reading a {kind} store needs the JDK's keytool, which is {where} (set JAVA_HOME to a "
                         "JDK, or convert the store to PKCS12 or PEM)")
    return found


def _run_keytool(store: _Store, kind: str, args: List[str], env: Dict[str, str]) -> str:
    """Run keytool (passwords in ``env``, never on its command line); its
    output, or :class:`ConfigError` with what it said."""
    try:
        done = subprocess.run([_keytool(store, kind), *args], env={**os.environ, **env}, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=KEYTOOL_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise store.fail(f"keytool did not read the {kind} store within {KEYTOOL_TIMEOUT:.0f} s") from None
    except OSError as e:
        raise store.fail(f"keytool could not be run ({e})") from None
    if done.returncode != 0:
        said = [line.strip() for line in (done.stderr + "\n" + done.stdout).splitlines() if "error" in line.lower()]
        check = store.name("password") + (f" and {ssl_option_name('ssl_password', store.prefix)}"
                                          if store.key_password is not None else "")
        raise store.fail(f"keytool could not read the {kind} store: "
                         f"{said[0] if said else 'exit status ' + str(done.returncode)} (check {check})")
    return done.stdout


def _jks_to_pkcs12(store: _Store, kind: str) -> Tuple[bytes, str]:
    """The JKS/JCEKS store as PKCS12 bytes and the one-off password that
    protects them, converted by ``keytool -importkeystore``. A key with its
    own password (``ssl.key.password``) is imported by its alias, as
    keytool asks."""
    if store.password is None:
        raise ConfigError(f"{store.name('password')} is needed to read the {kind} store {store.path!r}")
    out = os.path.join(_directory(), f"convert-{os.getpid()}-{threading.get_ident()}.p12")
    dest_password = secrets.token_hex(16)     # keytool wants 6 characters or more; the store's may be fewer
    env = {"KWIRE_SRC_PASS": store.password, "KWIRE_DEST_PASS": dest_password}
    source = ["-srckeystore", store.path, "-srcstoretype", kind, "-srcstorepass:env", "KWIRE_SRC_PASS"]
    cmd = ["-importkeystore", "-noprompt", *source, "-destkeystore", out, "-deststoretype", "PKCS12",
           "-deststorepass:env", "KWIRE_DEST_PASS"]
    if store.key_password is not None and store.key_password != store.password:
        listing = _run_keytool(store, kind, ["-list", "-v", "-keystore", store.path, "-storetype", kind,
                                             "-storepass:env", "KWIRE_SRC_PASS"], env)
        aliases = re.findall(r"^Alias name: (.*)\n(?:.*\n)*?Entry type: PrivateKeyEntry", listing, re.MULTILINE)
        if len(aliases) != 1:
            raise store.fail(f"holds {len(aliases)} private keys; kwire needs exactly one")
        env["KWIRE_KEY_PASS"] = store.key_password
        cmd += ["-srcalias", aliases[0], "-srckeypass:env", "KWIRE_KEY_PASS", "-destkeypass:env", "KWIRE_DEST_PASS"]
    try:
        _run_keytool(store, kind, cmd, env)
        with open(out, "rb") as f:
            return f.read(), dest_password
    finally:
        if os.path.exists(out):
            os.unlink(out)


def _load_pkcs12(store: _Store, kind: str) -> Any:
    """The store as cryptography's PKCS12 object."""
    if importlib.util.find_spec("cryptography") is None:
        raise store.fail(f"reading a {kind} store needs the 'cryptography' package (pip install 'kwire[tls]'), "
                         f"or give the store as PEM ({store.name('type')} PEM)")
    from cryptography.hazmat.primitives.serialization import pkcs12

    password = store.password
    if kind in ("JKS", "JCEKS"):
        data, password = _jks_to_pkcs12(store, kind)
    else:
        with open(store.path, "rb") as f:
            data = f.read()
    try:
        return pkcs12.load_pkcs12(data, None if password is None else password.encode())
    except ValueError as e:
        raise store.fail(f"cannot read the PKCS12 store ({e}; wrong {store.name('password')}?)") from None


def _certs_pem(certs: List[Any]) -> bytes:
    from cryptography.hazmat.primitives.serialization import Encoding

    return b"".join(c.public_bytes(Encoding.PEM) for c in certs)


def _unverified_certificates(store: _Store, kind: str) -> bytes:
    """The certificates of a JKS/JCEKS trust store without a password, as
    PEM (``keytool -list -rfc``): Java reads such a store without checking
    its integrity, and so does Kafka when ``ssl.truststore.password`` is not
    set."""
    listing = _run_keytool(store, kind, ["-list", "-rfc", "-keystore", store.path, "-storetype", kind], {})
    return "".join(m + "\n" for m in re.findall(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", listing,
                                                 re.DOTALL)).encode()


def _truststore(store: _Store) -> PemFiles:
    """The trust store's CA file."""
    kind = _store_kind(store)
    if kind == "PEM":
        return PemFiles(cafile=store.path)
    if kind in ("JKS", "JCEKS") and store.password is None:
        pem = _unverified_certificates(store, kind)
        if not pem:
            raise store.fail("holds no certificate")
        return PemFiles(cafile=_write_private(pem, "-ca.pem"))
    p12 = _load_pkcs12(store, kind)
    certs = [c.certificate for c in p12.additional_certs] + ([p12.cert.certificate] if p12.cert else [])
    if not certs:
        raise store.fail("holds no certificate")
    return PemFiles(cafile=_write_private(_certs_pem(certs), "-ca.pem"))


def _keystore(store: _Store) -> PemFiles:
    """The key store's certificate file, key file and key password; a PEM
    store is one file holding both (its key maybe encrypted with
    ``ssl.key.password``), a converted key is not encrypted."""
    kind = _store_kind(store)
    if kind == "PEM":
        return PemFiles(certfile=store.path, password=store.key_password)
    p12 = _load_pkcs12(store, kind)
    if p12.key is None or p12.cert is None:
        raise store.fail("holds no private key with its certificate")
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

    chain = [p12.cert.certificate] + [c.certificate for c in p12.additional_certs]
    cert = _write_private(_certs_pem(chain), "-cert.pem")
    key = _write_private(p12.key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()), "-key.pem")
    return PemFiles(certfile=cert, keyfile=key)


def _converted_store(store: _Store) -> PemFiles:
    """The store's PEM files, converted once per process while the store
    is unchanged."""
    try:
        st = os.stat(store.path)
        stamp: Tuple[Any, ...] = (st.st_mtime_ns, st.st_size, st.st_ino)
    except OSError:
        stamp = ()                    # _store_kind says why it cannot be read
    key = (store.what, store.path, store.declared, store.password, store.key_password, stamp)
    with _lock:
        _this_process()
        files = _converted.get(key)
        if files is None:
            files = (_truststore if store.what == "truststore" else _keystore)(store)
            _converted[key] = files
        return files


def _pem_text(text: str, labels: Tuple[str, ...], option: str) -> bytes:
    """The PEM blocks of ``text`` whose label ends with one of ``labels``, as
    Python's ``ssl`` reads them: a block given on one line (as a Spark
    option or an environment variable holds it) is wrapped at 64 columns;
    a block with headers (a legacy encrypted key's ``DEK-Info``) is kept as
    it is. Refuses text without such a block, naming ``option`` only."""
    out = []
    for label, body in _PEM_BLOCK.findall(text):
        if not label.endswith(labels):
            continue
        if ":" not in body:
            b64 = "".join(body.split())
            body = "\n" + "".join(b64[i:i + 64] + "\n" for i in range(0, len(b64), 64))
        out.append(f"-----BEGIN {label}-----{body}-----END {label}-----\n")
    if not out:
        raise ConfigError(f"{option} holds no PEM {' or '.join(labels).strip()} block")
    return "".join(out).encode()


def _inline_file(text: str, labels: Tuple[str, ...], option: str, suffix: str) -> str:
    """A private file holding ``text``'s PEM blocks, written once per
    process for the same text."""
    data = _pem_text(text, labels, option)
    key = hashlib.sha256(data).hexdigest() + suffix
    with _lock:
        _this_process()
        path = _written.get(key)
        if path is None:
            path = _written[key] = _write_private(data, suffix)
        return path


def _inline_pem(options: Mapping[str, Any], out: PemFiles, prefix: str) -> PemFiles:
    """Java's PEM text options (librdkafka's ``ssl.*.pem``) as files."""
    certs = _str(options, "ssl_truststore_certificates")
    if certs is not None:
        out = replace(out, cafile=_inline_file(certs, ("CERTIFICATE",),
                                               ssl_option_name("ssl_truststore_certificates", prefix), "-ca.pem"))
    chain, key = _str(options, "ssl_keystore_certificate_chain"), _str(options, "ssl_keystore_key")
    if chain is not None and key is not None:
        out = replace(out, certfile=_inline_file(chain, ("CERTIFICATE",),
                                                 ssl_option_name("ssl_keystore_certificate_chain", prefix),
                                                 "-cert.pem"),
                      keyfile=_inline_file(key, ("PRIVATE KEY",), ssl_option_name("ssl_keystore_key", prefix),
                                           "-key.pem"))
    return out


def _str(options: Mapping[str, Any], name: str) -> Optional[str]:
    value = options.get(name)
    return None if value in (None, "") else str(value)


def pem_files(options: Mapping[str, Any], prefix: str = "") -> PemFiles:
    """The PEM files for ``options`` (kwire's snake names: the store options
    of :data:`STORE_OPTIONS`, ``ssl_password``, ``ssl_cafile``,
    ``ssl_certfile``, ``ssl_keyfile``): the stores' converted files, or the
    PEM options as they are. Raises :class:`ConfigError` naming the option
    (by Kafka's name after ``prefix``, e.g. ``kafka.`` for Spark)."""
    check_stores(options, prefix)
    out = PemFiles(_str(options, "ssl_cafile"), _str(options, "ssl_certfile"), _str(options, "ssl_keyfile"),
                   _str(options, "ssl_password"))
    trust = _str(options, "ssl_truststore_location")
    if trust is not None:
        out = replace(out, cafile=_converted_store(_Store(
            "truststore", trust, _str(options, "ssl_truststore_type"), _str(options, "ssl_truststore_password"),
            None, prefix)).cafile)
    keys = _str(options, "ssl_keystore_location")
    if keys is not None:
        client = _converted_store(_Store("keystore", keys, _str(options, "ssl_keystore_type"),
                                         _str(options, "ssl_keystore_password"), out.password, prefix))
        out = replace(out, certfile=client.certfile, keyfile=client.keyfile, password=client.password)
    return _inline_pem(options, out, prefix)
