"""Keycloak as the tests' OpenID Connect provider: a real token endpoint and JWKS.

:func:`ensure_keycloak` prepares the server once, in a cache outside the
repository (``~/.cache/kwire/keycloak-<version>`` or ``$KWIRE_KEYCLOAK_HOME``):
:func:`support.maven.assemble` fetches ``tests/support/keycloak/pom.xml``'s
zip (``org.keycloak:keycloak-quarkus-dist``) from Maven Central, it is
unpacked into ``dist/``, Keycloak's own ``kc.sh build`` runs there with
:data:`BUILD_OPTIONS` (an H2 file database, the JWT Authorization Grant
feature), and one training start with no realm leaves two things beside it:
``h2-template/`` (the database with its schema and master realm made, about
5 s of every later start) and ``kc.aot`` (a JDK 25 AOT cache, about a third of
the JVM's start-up CPU). The marker ``COMPLETE`` is written last; a lock file
serialises concurrent runs; a changed pom, version, build option or JDK
prepares it anew.

:func:`start_keycloak` runs ``bin/kc.sh start --optimized`` on the Temurin 25
JDK (:data:`JAVA_HOME`; ``$KWIRE_KEYCLOAK_JAVA_HOME`` chooses another, and
without either the newest JDK 21+ in ``/usr/lib/jvm`` runs it, without the AOT
cache below 25) with a 512 MB heap, on a free loopback port, with ``--hostname`` pinned to
``http://127.0.0.1:<port>`` (the issuer is the same whatever Host a client
sends). Each start gets its own Keycloak home in a temporary directory
(symbolic links to the cached ``lib``, ``conf``, ``themes``, ``providers``;
its own ``data/`` with a copy of the template database), so runs never share
state, and ``--import-realm`` imports the realm file :func:`realm` writes
there: realm :data:`REALM` with

====================  ===========================================================
client                what it is for
====================  ===========================================================
``kwire-client``      client credentials with a secret; tokens carry ``aud`` kafka
``kwire-short``       the same, but its access tokens live :data:`SHORT_LIFESPAN` s
``kwire-other``       client credentials; tokens carry another audience only
``kwire-jwt``         client credentials, authenticated by a JWT client assertion
                      signed with a key made at start (``client-jwt``)
``kwire-bearer``      the JWT-bearer grant (RFC 7523): trades an assertion signed
                      by the key of :data:`ASSERTION_ISSUER` (an identity provider
                      of type ``jwt-authorization-grant``) for a token of the user
                      :data:`ASSERTION_SUBJECT`; authenticates with its secret
====================  ===========================================================

Keycloak requires client authentication with the JWT-bearer grant (it refuses
public clients: "Public client not allowed to use authorization grant"), so a
grant request without ``client_id`` and a secret, as Kafka's Java
``JwtBearerJwtRetriever`` (KIP-1139) sends it, is refused (401
``invalid_client``): that Java path cannot be shown against Keycloak; kwire's
own must send the client's credentials with the assertion. Kafka's Java client
assertion (``sasl.oauthbearer.assertion.*`` with client credentials) works
with ``kwire-jwt``.

:class:`Keycloak` names the endpoints, clients and key files, and makes what a
test sends: :meth:`Keycloak.token` (client credentials, with a client
assertion for ``kwire-jwt``), :meth:`Keycloak.client_assertion`,
:meth:`Keycloak.grant_assertion` and :meth:`Keycloak.bearer_token`.

The server counts as started when its discovery document names the pinned
issuer (the log tail is quoted if it does not, within ``timeout``).
``stop()`` sends SIGTERM to ``kc.sh`` (which forwards it to the JVM), SIGKILL
to the process group after a bound, and deletes the directory. On Linux the
JVM dies with the test process (``setpriv --pdeathsig`` in the ``$JAVA`` that
``kc.sh`` runs, and ``kc.sh`` itself tied to its parent).
"""

from __future__ import annotations

import datetime
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
import weakref
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, NamedTuple, Optional

from kwire.devbroker import _tie_to_parent, free_port
from support.kafka import _rss, _stop_pid
from support.kafka import _stop as _stop_and_remove
from support.jdk import PREFERRED as JAVA_HOME
from support.jdk import find_jdk
from support.jdk import java_version as _java_version
from support.jdk import major as _major
from support.maven import Progress, assemble, cache_lock, finished, mark_finished, say, stamp

KEYCLOAK_VERSION = "26.7.0"
POM = Path(__file__).with_name("keycloak") / "pom.xml"
HOST = "127.0.0.1"
HEAP = "-Xms64m -Xmx512m"
BUILD_OPTIONS = ("--db=dev-file", "--features=jwt-authorization-grant")
BUILD_TIMEOUT = 300.0    # seconds for kc.sh build, and for the training start
READY_TIMEOUT = 180.0    # seconds for a started server to answer
STOP_TIMEOUT = 20.0      # seconds between SIGTERM and SIGKILL
LOG_TAIL = 6000          # characters of the server's output quoted in errors

REALM = "kwire"
AUDIENCE = "kafka"
OTHER_AUDIENCE = "not-kafka"
LIFESPAN = 300           # seconds an access token lives (the realm's default)
SHORT_LIFESPAN = 15      # seconds, for kwire-short
ASSERTION_ISSUER = "https://assertions.kwire.test"
ASSERTION_IDP = "kwire-assertions"
ASSERTION_SUBJECT = "kwire-user"


class KeycloakUnavailable(RuntimeError):
    """No Java 21+, Maven, or a distribution that could not be prepared."""


class KeycloakStartError(RuntimeError):
    """Keycloak was prepared but did not come up."""


class OidcClient(NamedTuple):
    """A client of the realm: ``secret`` is None for one that authenticates
    with a signed JWT; ``audience`` the ``aud`` its access tokens carry."""

    client_id: str
    secret: Optional[str]
    audience: str
    lifespan: int = LIFESPAN


CLIENT = OidcClient("kwire-client", "kwire-client-secret", AUDIENCE)
SHORT_CLIENT = OidcClient("kwire-short", "kwire-short-secret", AUDIENCE, SHORT_LIFESPAN)
OTHER_CLIENT = OidcClient("kwire-other", "kwire-other-secret", OTHER_AUDIENCE)
JWT_CLIENT = OidcClient("kwire-jwt", None, AUDIENCE)
BEARER_CLIENT = OidcClient("kwire-bearer", "kwire-bearer-secret", AUDIENCE)


def keycloak_home(version: str = KEYCLOAK_VERSION) -> Path:
    """Where the prepared server is cached: ``$KWIRE_KEYCLOAK_HOME`` or ``~/.cache/kwire/keycloak-<version>``."""
    env = os.environ.get("KWIRE_KEYCLOAK_HOME")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "kwire" / f"keycloak-{version}"


def java_home() -> Path:
    """The JDK that runs Keycloak: ``$KWIRE_KEYCLOAK_JAVA_HOME``, else :data:`JAVA_HOME`,
    else the newest JDK 21+ in ``/usr/lib/jvm`` (Keycloak needs Java 21+)."""
    return find_jdk("KWIRE_KEYCLOAK_JAVA_HOME", 21, KeycloakUnavailable, "Keycloak")


def _aot_flag(jdk: Path, option: str, path: Path) -> str:
    """``-XX:<option>=<path>`` (an AOT cache, JDK 25's one-step form), or "" on an older JDK."""
    return f"-XX:{option}={path}" if _major(jdk) >= 25 else ""


def _stamp(version: str, jdk: Path) -> str:
    return stamp(POM, {"keycloak.version": version, "build": " ".join(BUILD_OPTIONS), "java": _java_version(jdk)})


# ---- the realm ----

def _audience_mapper(audience: str) -> dict:
    return {"name": f"audience-{audience}", "protocol": "openid-connect", "protocolMapper": "oidc-audience-mapper",
            "config": {"included.custom.audience": audience, "access.token.claim": "true",
                       "id.token.claim": "false", "introspection.token.claim": "true"}}


def _client(c: OidcClient, **extra) -> dict:
    attributes = {"access.token.lifespan": str(c.lifespan)} if c.lifespan != LIFESPAN else {}
    attributes.update(extra.pop("attributes", {}))
    rep = {"clientId": c.client_id, "enabled": True, "protocol": "openid-connect", "publicClient": False,
           "serviceAccountsEnabled": True, "standardFlowEnabled": False, "directAccessGrantsEnabled": False,
           "clientAuthenticatorType": "client-secret", "attributes": attributes,
           "protocolMappers": [_audience_mapper(c.audience)]}
    if c.secret is not None:
        rep["secret"] = c.secret
    rep.update(extra)
    return rep


def _pem_body(pem: bytes) -> str:
    """The base64 of a PEM block, without its armour lines (as Keycloak's attributes hold keys)."""
    return "".join(line for line in pem.decode().splitlines() if not line.startswith("-----"))


def realm(jwt_certificate_pem: bytes, assertion_public_pem: bytes) -> dict:
    """The realm file :func:`start_keycloak` imports (see the module doc)."""
    return {
        "realm": REALM, "enabled": True, "sslRequired": "none", "accessTokenLifespan": LIFESPAN,
        "clients": [
            _client(CLIENT), _client(SHORT_CLIENT), _client(OTHER_CLIENT),
            _client(JWT_CLIENT, clientAuthenticatorType="client-jwt",
                    attributes={"use.jwks.url": "false", "jwt.credential.certificate": _pem_body(jwt_certificate_pem),
                                "token.endpoint.auth.signing.alg": "RS256"}),
            _client(BEARER_CLIENT, attributes={"oauth2.jwt.authorization.grant.enabled": "true",
                                               "oauth2.jwt.authorization.grant.idp": ASSERTION_IDP}),
        ],
        "identityProviders": [{
            "alias": ASSERTION_IDP, "providerId": "jwt-authorization-grant", "enabled": True, "hideOnLogin": True,
            "config": {"issuer": ASSERTION_ISSUER, "useJwksUrl": "false",
                       "publicKeySignatureVerifier": assertion_public_pem.decode(),
                       "jwtAuthorizationGrantEnabled": "true", "jwtAuthorizationGrantAssertionReuseAllowed": "true",
                       "jwtAuthorizationGrantMaxAllowedAssertionExpiration": "300",
                       "jwtAuthorizationGrantAllowedClockSkew": "10"},
        }],
        "users": [{
            "username": ASSERTION_SUBJECT, "enabled": True, "email": f"{ASSERTION_SUBJECT}@kwire.test",
            "emailVerified": True, "firstName": "kwire", "lastName": "user",
            "federatedIdentities": [{"identityProvider": ASSERTION_IDP, "userId": ASSERTION_SUBJECT,
                                     "userName": ASSERTION_SUBJECT}],
        }],
    }


class _Keys(NamedTuple):
    jwt_private_key: str        # PEM (PKCS#8) of kwire-jwt's client assertions
    jwt_certificate: str        # its self-signed certificate, registered with the client
    assertion_private_key: str  # PEM (PKCS#8) of ASSERTION_ISSUER's JWT-bearer assertions
    assertion_public_key: str   # its public key, registered with the identity provider


def _make_keys(directory: Path) -> _Keys:
    """Two RSA key pairs, written as PEM files into ``directory``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    def private(name: str, key) -> str:
        path = directory / name
        path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
        path.chmod(0o600)
        return str(path)

    now = datetime.datetime.now(datetime.timezone.utc)
    jwt_key, assertion_key = (rsa.generate_private_key(public_exponent=65537, key_size=2048) for _ in range(2))
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, JWT_CLIENT.client_id)])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(jwt_key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=2)).sign(jwt_key, hashes.SHA256()))
    (directory / "jwt-client.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / "assertion-issuer.pub").write_bytes(assertion_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return _Keys(private("jwt-client.key", jwt_key), str(directory / "jwt-client.crt"),
                 private("assertion-issuer.key", assertion_key), str(directory / "assertion-issuer.pub"))


# ---- preparing the distribution (once) ----

def _unpack(zip_path: Path, target: Path) -> None:
    """The zip's single top directory (``keycloak-<version>/``) becomes ``target``; modes kept (bin/*.sh)."""
    scratch = Path(tempfile.mkdtemp(prefix="unpack-", dir=target.parent))
    try:
        with zipfile.ZipFile(zip_path) as z:
            for info in z.infolist():
                z.extract(info, scratch)
                mode = info.external_attr >> 16
                if mode:
                    os.chmod(scratch / info.filename, mode & 0o777)
        (top,) = scratch.iterdir()
        top.rename(target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _build(dist: Path, jdk: Path) -> None:
    """Keycloak's own ``kc.sh build`` with :data:`BUILD_OPTIONS`, in ``dist``."""
    cmd = [str(dist / "bin" / "kc.sh"), "build", *BUILD_OPTIONS]
    try:
        done = subprocess.run(cmd, env=_env(jdk), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=BUILD_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise KeycloakUnavailable(f"kc.sh build did not finish within {BUILD_TIMEOUT:g} s") from None
    if done.returncode != 0:
        raise KeycloakUnavailable(f"kc.sh build failed (exit {done.returncode}):\n"
                                  f"{(done.stdout + done.stderr)[-LOG_TAIL:]}")


def _train(home: Path, jdk: Path) -> None:
    """One start without a realm: its database becomes ``h2-template/``, its exit writes ``kc.aot``."""
    aot = home / "kc.aot"
    run = _home_for_run(home)
    try:
        server = _launch(home, jdk, run, free_port(HOST), import_realm=False,
                         aot_flag=_aot_flag(jdk, "AOTCacheOutput", aot))
    except BaseException:
        shutil.rmtree(run, ignore_errors=True)
        raise
    try:
        _ready(server, "master", READY_TIMEOUT)
        _stop_group(server.pid, BUILD_TIMEOUT)       # a clean exit: the JVM assembles the AOT cache
        shutil.copytree(Path(server.workdir) / "data" / "h2", home / "h2-template",
                        ignore=shutil.ignore_patterns("*.trace.db"))
    finally:
        server.stop()
    if _major(jdk) >= 25 and not aot.is_file():
        raise KeycloakUnavailable(f"Keycloak's training start wrote no AOT cache ({aot}); output:\n"
                                  f"{server.log_tail()}")


def _prepare(home: Path, version: str, jdk: Path, progress: Progress) -> None:
    """Fetch, unpack, build and train in ``home`` (see the module doc); the caller holds the lock."""
    for old in ("dist", "h2-template", "download"):
        shutil.rmtree(home / old, ignore_errors=True)
    (home / "kc.aot").unlink(missing_ok=True)
    download = home / "download"
    libs = assemble(POM, {"keycloak.version": version}, download, f"keycloak-quarkus-dist-{version}.zip",
                    f"Keycloak {version}", KeycloakUnavailable, progress)
    t0 = time.monotonic()
    _unpack(libs / f"keycloak-quarkus-dist-{version}.zip", home / "dist")
    shutil.rmtree(download, ignore_errors=True)      # Maven's own repository (~/.m2) keeps the zip
    say(progress, f"kc.sh build {' '.join(BUILD_OPTIONS)}")
    _build(home / "dist", jdk)
    say(progress, "a training start: the template database and the AOT cache")
    _train(home, jdk)
    say(progress, f"Keycloak built and trained in {time.monotonic() - t0:.1f} s")


def ensure_keycloak(version: str = KEYCLOAK_VERSION, progress: Progress = None) -> Path:
    """The cache directory of the prepared server (``dist/``, ``h2-template/``, ``kc.aot``), made on first use."""
    jdk = java_home()
    home = keycloak_home(version)
    done_stamp = _stamp(version, jdk)
    if finished(home, done_stamp):
        return home
    with cache_lock(home, progress):
        if not finished(home, done_stamp):           # else another run finished it meanwhile
            (home / "COMPLETE").unlink(missing_ok=True)
            _prepare(home, version, jdk, progress)
            mark_finished(home, done_stamp)
    return home


# ---- running it ----

def _env(jdk: Path, java: Optional[Path] = None, aot_flag: str = "") -> Dict[str, str]:
    """``kc.sh``'s environment: this JDK, the heap, the AOT flag; no KC_* or JAVA_OPTS of the caller's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KC_", "JAVA_OPTS", "JAVA_ADD_OPENS"))}
    env.update(JAVA_HOME=str(jdk), JAVA_OPTS_KC_HEAP=HEAP, JAVA_OPTS_APPEND=aot_flag)
    env.pop("JAVA", None)
    if java is not None:
        env["JAVA"] = str(java)
    return env


def _java_tied(run: Path, jdk: Path) -> Optional[Path]:
    """A ``$JAVA`` for ``kc.sh`` that dies with ``kc.sh`` (Linux: ``setpriv --pdeathsig``), or None."""
    setpriv = shutil.which("setpriv")
    if not sys.platform.startswith("linux") or setpriv is None:
        return None
    wrapper = run / "java"
    wrapper.write_text(f"#!/bin/sh\nexec '{setpriv}' --pdeathsig KILL -- '{jdk / 'bin' / 'java'}' \"$@\"\n")
    wrapper.chmod(0o755)
    return wrapper


def _home_for_run(home: Path) -> Path:
    """A Keycloak home of its own: links to the cached distribution, a copy of the
    template database (when there is one)."""
    run = Path(tempfile.mkdtemp(prefix="kwire-keycloak-"))
    for name in ("lib", "conf", "providers", "themes"):
        (run / name).symlink_to(home / "dist" / name)
    (run / "data").mkdir()
    if (home / "h2-template").is_dir():
        shutil.copytree(home / "h2-template", run / "data" / "h2")
    return run


def _launch(home: Path, jdk: Path, run: Path, port: int, *, import_realm: bool, aot_flag: str,
            tie_to_parent: bool = True, version: str = KEYCLOAK_VERSION) -> "Keycloak":
    """``kc.sh start --optimized`` with ``run`` as its home (see the module doc), not yet waited for;
    ``import_realm``: the realm files in ``run/data/import``."""
    tie = functools.partial(_tie_to_parent, os.getpid()) if tie_to_parent and sys.platform.startswith("linux") \
        else None
    java = _java_tied(run, jdk) if tie_to_parent else None
    cmd = [str(home / "dist" / "bin" / "kc.sh"), f"-Dkc.home.dir={run}", "start", "--optimized",
           "--http-enabled=true", f"--http-host={HOST}", f"--http-port={port}",
           f"--hostname=http://{HOST}:{port}", "--cache=local"]
    if import_realm:
        cmd.append("--import-realm")
    with open(run / "keycloak.out", "ab") as out:
        proc = subprocess.Popen(cmd, env=_env(jdk, java, aot_flag), stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, cwd=run, start_new_session=True, preexec_fn=tie)
    return Keycloak(pid=proc.pid, workdir=str(run), version=version, port=port, process=proc)


def _discovery(base_url: str, realm_name: str) -> Optional[dict]:
    """The realm's OpenID discovery document, or None while the server does not answer."""
    try:
        with urllib.request.urlopen(f"{base_url}/realms/{realm_name}/.well-known/openid-configuration",
                                    timeout=2) as r:
            return json.load(r)
    except (OSError, ValueError):
        return None


def _ready(server: "Keycloak", realm_name: str, timeout: float) -> None:
    """Returns once ``realm_name``'s discovery document names the pinned issuer."""
    deadline = time.monotonic() + timeout
    expected = f"{server.base_url}/realms/{realm_name}"
    while True:
        if server.process is not None and server.process.poll() is not None:
            raise KeycloakStartError(f"Keycloak exited with status {server.process.returncode} before it answered; "
                                     f"output tail:\n{server.log_tail()}")
        doc = _discovery(server.base_url, realm_name)
        if doc is not None and doc.get("issuer") == expected:
            return
        if time.monotonic() > deadline:
            raise KeycloakStartError(f"Keycloak (pid {server.pid}) did not serve realm {realm_name!r} at "
                                     f"{server.base_url} within {timeout:g} s (last: {doc!r}); output tail:\n"
                                     f"{server.log_tail()}")
        time.sleep(0.2)


def _stop_group(pid: int, timeout: float) -> None:
    """SIGTERM ``kc.sh`` (it forwards the signal to the JVM and waits for it), SIGKILL after
    ``timeout`` s; then SIGKILL whatever is left of its process group (a JVM whose kc.sh was killed)."""
    _stop_pid(pid, timeout)
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _stop(proc: Optional[subprocess.Popen], pid: int, workdir: str, timeout: float) -> None:
    try:
        _stop_group(pid, timeout)
    finally:
        _stop_and_remove(proc, pid, workdir, timeout)     # reaps kc.sh, deletes the directory


def _jvm_pid(pid: int) -> int:
    """The JVM ``kc.sh`` (``pid``) runs: its child (Linux; ``pid`` itself elsewhere or when there is none)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            children = f.read().split()
    except OSError:
        return pid
    return int(children[0]) if children else pid


@dataclass
class Keycloak:
    """A running Keycloak with realm :data:`REALM` (see the module doc).

    ``issuer``, ``token_endpoint`` and ``jwks_url`` are the realm's; the
    clients are the module's :class:`OidcClient` constants (``client``,
    ``short_client``, ``other_client``, ``jwt_client``, ``bearer_client``);
    ``jwt_private_key`` / ``jwt_certificate`` are the PEM files of
    ``kwire-jwt``'s client assertions, ``assertion_private_key`` /
    ``assertion_public_key`` those of the JWT-bearer grant's issuer
    (``assertion_issuer``; its assertions name ``assertion_subject``).
    """

    pid: int
    workdir: str
    version: str
    port: int
    keys: Optional[_Keys] = None
    startup_seconds: float = 0.0
    process: Optional[subprocess.Popen] = field(default=None, repr=False)

    realm = REALM
    audience = AUDIENCE
    other_audience = OTHER_AUDIENCE
    client = CLIENT
    short_client = SHORT_CLIENT
    other_client = OTHER_CLIENT
    jwt_client = JWT_CLIENT
    bearer_client = BEARER_CLIENT
    assertion_issuer = ASSERTION_ISSUER
    assertion_subject = ASSERTION_SUBJECT

    def __post_init__(self) -> None:
        # Runs once: from stop(), when collected, or at interpreter exit.
        self._finalizer = weakref.finalize(self, _stop, self.process, self.pid, self.workdir, STOP_TIMEOUT)

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def issuer(self) -> str:
        return f"{self.base_url}/realms/{REALM}"

    @property
    def token_endpoint(self) -> str:
        return f"{self.issuer}/protocol/openid-connect/token"

    @property
    def jwks_url(self) -> str:
        return f"{self.issuer}/protocol/openid-connect/certs"

    @property
    def jwt_private_key(self) -> str:
        return self.keys.jwt_private_key

    @property
    def jwt_certificate(self) -> str:
        return self.keys.jwt_certificate

    @property
    def assertion_private_key(self) -> str:
        return self.keys.assertion_private_key

    @property
    def assertion_public_key(self) -> str:
        return self.keys.assertion_public_key

    @property
    def alive(self) -> bool:
        return self.process is None or self.process.poll() is None

    def rss_bytes(self) -> int:
        """The JVM's resident set size now (Linux; 0 elsewhere)."""
        return _rss(_jvm_pid(self.pid))

    def log_tail(self, limit: int = LOG_TAIL) -> str:
        try:
            with open(os.path.join(self.workdir, "keycloak.out"), "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - limit))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def _signed(self, key_path: str, claims: dict, lifetime: float) -> str:
        import jwt

        now = int(time.time())
        claims = {"aud": self.issuer, "iat": now, "exp": now + int(lifetime), "jti": str(uuid.uuid4()), **claims}
        return jwt.encode(claims, Path(key_path).read_bytes(), algorithm="RS256")

    def client_assertion(self, lifetime: float = 60) -> str:
        """A client assertion of ``kwire-jwt`` (iss = sub = its id, aud = the issuer), signed with its key."""
        cid = JWT_CLIENT.client_id
        return self._signed(self.jwt_private_key, {"iss": cid, "sub": cid}, lifetime)

    def grant_assertion(self, subject: str = ASSERTION_SUBJECT, lifetime: float = 60) -> str:
        """An assertion for the JWT-bearer grant (iss :data:`ASSERTION_ISSUER`, aud the issuer)."""
        return self._signed(self.assertion_private_key, {"iss": ASSERTION_ISSUER, "sub": subject}, lifetime)

    def token(self, client: OidcClient = CLIENT, **form: str) -> dict:
        """The token endpoint's answer to a client-credentials request of ``client``
        (with a client assertion for ``kwire-jwt``); raises on an HTTP error."""
        import requests

        data = {"grant_type": "client_credentials", "client_id": client.client_id, **form}
        if client.secret is not None:
            data["client_secret"] = client.secret
        else:
            data.update(client_assertion_type="urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
                        client_assertion=self.client_assertion())
        r = requests.post(self.token_endpoint, data=data, timeout=10)
        r.raise_for_status()
        return r.json()

    def bearer_token(self, assertion: Optional[str] = None) -> dict:
        """The answer to a JWT-bearer grant (RFC 7523) of ``kwire-bearer`` with ``assertion``
        (:meth:`grant_assertion` by default); raises on an HTTP error."""
        import requests

        data = {"grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer",
                "assertion": assertion or self.grant_assertion(),
                "client_id": BEARER_CLIENT.client_id, "client_secret": BEARER_CLIENT.secret}
        r = requests.post(self.token_endpoint, data=data, timeout=10)
        r.raise_for_status()
        return r.json()

    def state(self) -> dict:
        return {"pid": self.pid, "workdir": self.workdir, "version": self.version, "issuer": self.issuer,
                "token_endpoint": self.token_endpoint, "jwks_url": self.jwks_url}

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM kc.sh (SIGKILL to its group after ``timeout`` s) and delete its directory. Idempotent."""
        if self._finalizer.alive:
            self._finalizer.detach()
            _stop(self.process, self.pid, self.workdir, timeout)

    def __enter__(self) -> "Keycloak":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def start_keycloak(*, version: str = KEYCLOAK_VERSION, timeout: float = READY_TIMEOUT,
                   tie_to_parent: bool = True, progress: Progress = None) -> Keycloak:
    """Prepare (once) and start Keycloak with the test realm; see the module doc."""
    home = ensure_keycloak(version, progress)
    jdk = java_home()
    t0 = time.monotonic()
    run = _home_for_run(home)
    try:
        keys = _make_keys(run)
        (run / "data" / "import").mkdir()
        (run / "data" / "import" / f"{REALM}.json").write_text(json.dumps(
            realm(Path(keys.jwt_certificate).read_bytes(), Path(keys.assertion_public_key).read_bytes()), indent=1))
        aot = home / "kc.aot"
        server = _launch(home, jdk, run, free_port(HOST), import_realm=True,
                         aot_flag=_aot_flag(jdk, "AOTCache", aot) if aot.is_file() else "",
                         tie_to_parent=tie_to_parent, version=version)
    except BaseException:
        shutil.rmtree(run, ignore_errors=True)
        raise
    server.keys = keys
    try:
        _ready(server, REALM, timeout)
    except BaseException:
        server.stop()
        raise
    server.startup_seconds = time.monotonic() - t0
    say(progress, f"Keycloak {version} (pid {server.pid}) up in {server.startup_seconds:.1f} s at {server.issuer}, "
                  f"RSS {server.rss_bytes() / 2**20:.0f} MiB")
    return server
