"""GSSAPI: Kerberos authentication (RFC 4752) with MIT's or Heimdal's
library through the ``gssapi`` package (``pip install 'kwire[kerberos]'``;
it builds against the system's Kerberos, e.g. Debian's ``libkrb5-dev``).

Credentials, as Kafka's ``Krb5LoginModule`` and librdkafka take them:

- **A keytab** (``sasl_kerberos_keytab``, with ``sasl_kerberos_principal``
  or the keytab's first): tickets are got from it into a private in-memory
  cache; each handshake acquires the credentials again, and the Kerberos
  library then gets a new TGT from the keytab once the cached one is near
  its end, so a long-lived client needs nothing else.
- **A ticket cache** (``sasl_kerberos_ccache``, else ``KRB5CCNAME``'s or the
  system's default), filled by ``kinit``: while the client lives, a thread
  runs ``sasl_kerberos_kinit_cmd`` (``kinit -R``, renewing the TGT) once
  the ticket is past 80% of its life, at most every
  ``sasl_kerberos_min_time_before_relogin`` ms, as Kafka's Java client does.

Each handshake (and KIP-368 re-authentication) makes a new security context
for ``<sasl_kerberos_service_name>@<broker host>`` (or
``sasl_kerberos_domain_name``): a fresh service ticket. After the context
is established the client takes the broker's security-layer offer and
answers "no security layer", with its principal as authorization id.

Errors name the principal and the Kerberos library's words, never the
keytab's or the cache's path.
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
import threading
import uuid
from typing import Any, Callable, Mapping, Optional

from kwire.config import ConfigError
from kwire.sasl.base import Authenticator, Mechanism, SaslAuthenticationError

__all__ = ["KerberosAuthenticator", "Gssapi"]

log = logging.getLogger(__name__)

NO_SECURITY_LAYER = 1
KINIT_TIMEOUT = 30.0
RENEW_AT = 0.8            # of a ticket's life seen at start


def _gssapi() -> Any:
    try:
        import gssapi
    except ImportError:
        raise ConfigError("SASL GSSAPI (Kerberos) needs the gssapi package: pip install 'kwire[kerberos]' "
                          "(it builds against the system's Kerberos: Debian's libkrb5-dev)") from None
    return gssapi


class KerberosAuthenticator(Authenticator):
    """GSSAPI credentials of one client (see the module doc)."""

    name = "GSSAPI"

    def __init__(self, cfg: Mapping[str, Any]) -> None:
        self._gssapi = _gssapi()
        self.service = cfg.get("sasl_kerberos_service_name") or "kafka"
        self.principal = cfg.get("sasl_kerberos_principal")
        self._domain = cfg.get("sasl_kerberos_domain_name")
        self._keytab = cfg.get("sasl_kerberos_keytab")
        self._ccache = cfg.get("sasl_kerberos_ccache")
        self._private = [p for p in (self._keytab, self._ccache) if p]
        if self._keytab is not None and not os.path.isfile(self._keytab):
            raise ConfigError("sasl_kerberos_keytab: the keytab file does not exist or is not a file")
        self._store = ({"client_keytab": self._keytab, "ccache": f"MEMORY:kwire-{uuid.uuid4().hex}"}
                       if self._keytab else ({"ccache": self._ccache} if self._ccache else None))
        self._renewer: Optional[_Renewer] = None
        if self._keytab is None and cfg.get("sasl_kerberos_min_time_before_relogin", 60000) > 0:
            self._renewer = _Renewer(self, cfg.get("sasl_kerberos_kinit_cmd") or "kinit -R",
                                     cfg["sasl_kerberos_min_time_before_relogin"] / 1000.0)

    def __repr__(self) -> str:
        return f"<KerberosAuthenticator {self.principal or '(default principal)'} for {self.service}>"

    def start(self, wake: Callable[[], None], loop: Any = None) -> None:
        if self._renewer is not None:
            self._renewer.start()

    def close(self) -> None:
        if self._renewer is not None:
            self._renewer.stop()

    def credentials(self) -> Any:
        """The client's initiator credentials, acquired anew for each
        handshake: from a keytab, the library reuses the private cache's
        TGT while it is valid and gets a new one once it is not (a
        credentials object kept across that would go on presenting the
        expired one); from a ticket cache, what ``kinit`` last put there."""
        g = self._gssapi
        name = g.Name(self.principal, g.NameType.kerberos_principal) if self.principal else None
        try:
            creds = g.Credentials(name=name, usage="initiate", store=self._store)
            creds.lifetime            # a cache without a valid TGT fails here, not in the exchange
        except g.exceptions.GSSError as e:
            raise self.error(f"no Kerberos credentials for {self.principal or 'the default principal'}", e) \
                from None
        return creds

    def mechanism(self, host: str) -> "Gssapi":
        return Gssapi(self, self._domain or host)

    def error(self, what: str, e: BaseException) -> SaslAuthenticationError:
        """``what`` failed with the library's error ``e``, the paths of the keytab and cache left out."""
        text = str(e)
        for secret in self._private:
            text = text.replace(secret, "<private>")
        return SaslAuthenticationError(f"GSSAPI: {what}: {text}")


class Gssapi(Mechanism):
    """One GSSAPI exchange with the broker at ``host`` (see the module doc)."""

    name = "GSSAPI"

    def __init__(self, auth: KerberosAuthenticator, host: str) -> None:
        self._auth = auth
        self._target = f"{auth.service}@{host}"
        self._ctx: Any = None
        self._layer_sent = False

    def first(self) -> bytes:
        g = self._auth._gssapi
        creds = self._auth.credentials()
        try:
            target = g.Name(self._target, g.NameType.hostbased_service)
            self._ctx = g.SecurityContext(name=target, creds=creds, usage="initiate")
            return self._ctx.step(None) or b""
        except g.exceptions.GSSError as e:
            raise self._auth.error(f"cannot get a ticket for {self._target} as "
                                   f"{self._auth.principal or 'the default principal'}", e) from None

    def step(self, server: bytes) -> Optional[bytes]:
        g = self._auth._gssapi
        try:
            if not self._ctx.complete:
                return self._ctx.step(server) or b""
            if self._layer_sent:
                return None
            return self._security_layer(server)
        except g.exceptions.GSSError as e:
            raise self._auth.error(f"the exchange with {self._target} failed", e) from None

    def _security_layer(self, server: bytes) -> bytes:
        """RFC 4752 section 3.1: the broker offers security layers (a
        wrapped byte of flags and a buffer size); the client picks none and
        names itself."""
        offer = self._ctx.unwrap(server).message
        if len(offer) != 4 or not offer[0] & NO_SECURITY_LAYER:
            raise SaslAuthenticationError(f"GSSAPI: {self._target} does not offer to go without a security layer")
        authz = str(self._ctx.initiator_name).encode("utf-8")
        self._layer_sent = True
        return self._ctx.wrap(bytes([NO_SECURITY_LAYER]) + b"\0\0\0" + authz, False).message


class _Renewer:
    """Renews a ticket cache's TGT with ``kinit -R`` (see the module doc)."""

    def __init__(self, auth: KerberosAuthenticator, cmd: str, min_period: float) -> None:
        self._auth = auth
        self._cmd = shlex.split(cmd)
        self._min_period = min_period
        self._stop = threading.Event()
        self._life: Optional[float] = None      # the ticket's life left when first seen
        self._failing = False                    # the last renewal failed (said once)

    def start(self) -> None:
        threading.Thread(target=self._run, name="kwire-kinit", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _left(self) -> Optional[float]:
        try:
            return float(self._auth.credentials().lifetime)
        except SaslAuthenticationError:
            return None

    def _run(self) -> None:
        while not self._stop.is_set():
            left = self._left()
            if left is None:
                return                              # nothing to renew: handshakes say why
            if self._life is None:
                self._life = left
            due = left - (1 - RENEW_AT) * self._life
            if due > 0:
                self._stop.wait(due)
                continue
            self._renew()
            self._life = self._left()
            self._stop.wait(self._min_period)

    def _renew(self) -> None:
        """Run the renewal command; a failure is a warning once, until a renewal succeeds again."""
        env = dict(os.environ)
        if self._auth._ccache:
            env["KRB5CCNAME"] = self._auth._ccache
        try:
            done = subprocess.run(self._cmd, env=env, capture_output=True, text=True, timeout=KINIT_TIMEOUT,
                                  stdin=subprocess.DEVNULL)
            failure = f"exit {done.returncode}" if done.returncode != 0 else None
        except (OSError, subprocess.TimeoutExpired) as e:
            failure = type(e).__name__
        if failure is None:
            self._failing = False
            log.info("GSSAPI: renewed the ticket cache's TGT (%s)", self._cmd[0])
            return
        (log.debug if self._failing else log.warning)(
            "GSSAPI: renewing the ticket with %s failed (%s); the ticket expires unless renewed", self._cmd[0], failure)
        self._failing = True
