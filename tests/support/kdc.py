"""An MIT Kerberos KDC for the tests: a throwaway realm on loopback.

:func:`start_kdc` makes realm :data:`REALM` in a temporary directory, with its
own ``krb5.conf`` and ``kdc.conf`` (``KRB5_CONFIG``, ``KRB5_KDC_PROFILE``: the
machine's are never read): ``dns_canonicalize_hostname = false`` and
``rdns = false`` (a service on 127.0.0.1 is ``<service>/127.0.0.1``, never a
name from DNS), TCP preferred (``udp_preference_limit = 1``), AES keys only
(what every JDK and MIT client accepts), a default ticket cache inside the
directory. ``kdb5_util create -s`` makes the database; ``kadmin.local`` adds
the principals (``addprinc``) and writes keytabs (``ktadd``):

=============================  ==========================================
principal                      credentials
=============================  ==========================================
``kafka/127.0.0.1``            ``broker.keytab`` (the broker's service)
``alice``                      ``alice.keytab`` (the broker's super user)
``bob``                        the password :data:`BOB_PASSWORD` (kinit)
``carol``                      ``carol.keytab``; tickets live at most
                               :data:`SHORT_LIFE` s (renewal tests)
=============================  ==========================================

Then ``krb5kdc -n`` (in the foreground) serves the realm on a free loopback
port, UDP and TCP. It counts as started when ``kinit`` with alice's keytab
gets a ticket (within ``timeout``; the KDC's log is quoted if not); this all
takes well under a second. ``stop()`` sends SIGTERM (SIGKILL after a bound)
and deletes the directory; on Linux the KDC dies with the test process.

The tools come from Debian's ``krb5-kdc``, ``krb5-admin-server`` and
``krb5-user`` (``scripts/_setup.sh`` installs them for the ``test`` extra);
without them :func:`start_kdc` raises :class:`KdcUnavailable` naming them.
"""

from __future__ import annotations

import functools
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from kwire.devbroker import _tie_to_parent
from support.kafka import _rss, _stop

REALM = "KWIRE.TEST"
HOST = "127.0.0.1"
SERVICE = "kafka"
BOB_PASSWORD = "bob-kerberos-secret"
SHORT_LIFE = 20          # seconds a ticket of carol's lives at most
SHORT_RENEW = 120        # seconds carol's tickets stay renewable
READY_TIMEOUT = 20.0     # seconds for a started KDC to issue a ticket
STOP_TIMEOUT = 5.0       # seconds between SIGTERM and SIGKILL
TOOL_TIMEOUT = 30.0      # seconds for one kdb5_util, kadmin.local or kinit
LOG_TAIL = 4000          # characters of the KDC's log quoted in errors
ENCTYPES = "aes256-cts-hmac-sha1-96 aes128-cts-hmac-sha1-96"
PACKAGES = "krb5-kdc krb5-admin-server krb5-user"

_KRB5_CONF = """\
[libdefaults]
    default_realm = {realm}
    dns_lookup_realm = false
    dns_lookup_kdc = false
    dns_canonicalize_hostname = false
    rdns = false
    udp_preference_limit = 1
    clockskew = 60
    ticket_lifetime = 10h
    renew_lifetime = 1d
    forwardable = true
    default_ccache_name = FILE:{dir}/ccache-default
    default_tkt_enctypes = {enctypes}
    default_tgs_enctypes = {enctypes}
    permitted_enctypes = {enctypes}

[realms]
    {realm} = {{
        kdc = {host}:{port}
    }}

[domain_realm]
    {host} = {realm}
"""

_KDC_CONF = """\
[kdcdefaults]
    kdc_tcp_listen = {host}:{port}
    kdc_listen = {host}:{port}

[realms]
    {realm} = {{
        database_name = {dir}/principal
        key_stash_file = {dir}/stash
        acl_file = {dir}/kadm5.acl
        max_life = 10h
        max_renewable_life = 1d
        master_key_type = aes256-cts-hmac-sha1-96
        supported_enctypes = {supported}
    }}

[logging]
    kdc = FILE:{dir}/kdc.log
    admin_server = FILE:{dir}/kadmin.log
    default = FILE:{dir}/krb5.log
"""


class KdcUnavailable(RuntimeError):
    """MIT Kerberos's KDC tools are not installed."""


class KdcStartError(RuntimeError):
    """The realm could not be made, or the KDC did not serve it."""


def _tool(name: str) -> str:
    """The path of one of MIT Kerberos's tools (``/usr/sbin`` may be off a user's PATH)."""
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/local/sbin:/sbin")
    if path is None:
        raise KdcUnavailable(f"the tests' Kerberos KDC needs {name} (not found): install MIT Kerberos "
                             f"(Debian: apt-get install {PACKAGES})")
    return path


def _free_port() -> int:
    """A loopback port free for both TCP and UDP (the KDC listens on both)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as t:
            t.bind((HOST, 0))
            port = t.getsockname()[1]
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
                try:
                    u.bind((HOST, port))
                except OSError:
                    continue
                return port


def principal(name: str) -> str:
    """``name`` in the test realm: ``alice`` -> ``alice@KWIRE.TEST``."""
    return name if "@" in name else f"{name}@{REALM}"


@dataclass
class Kdc:
    """A running KDC serving :data:`REALM` (see the module doc).

    ``krb5_conf`` is the client configuration (``KRB5_CONFIG``, Java's
    ``-Djava.security.krb5.conf``); ``keytabs`` maps ``kafka`` (the broker),
    ``alice`` and ``carol`` to their keytab files; ``principals`` maps the same
    names (and ``bob``) to full principal names; ``port`` is the KDC's
    (UDP and TCP on 127.0.0.1).
    """

    pid: int
    workdir: str
    port: int
    realm: str = REALM
    keytabs: Dict[str, str] = field(default_factory=dict)
    principals: Dict[str, str] = field(default_factory=dict)
    startup_seconds: float = 0.0
    process: Optional[subprocess.Popen] = field(default=None, repr=False)

    service = SERVICE
    host = HOST
    bob_password = BOB_PASSWORD
    short_life = SHORT_LIFE

    def __post_init__(self) -> None:
        self._finalizer = weakref.finalize(self, _stop, self.process, self.pid, self.workdir, STOP_TIMEOUT)

    @property
    def krb5_conf(self) -> str:
        return os.path.join(self.workdir, "krb5.conf")

    @property
    def kdc_conf(self) -> str:
        return os.path.join(self.workdir, "kdc.conf")

    @property
    def service_principal(self) -> str:
        """The broker's: ``kafka/127.0.0.1@KWIRE.TEST``."""
        return self.principals["kafka"]

    @property
    def log_path(self) -> str:
        return os.path.join(self.workdir, "kdc.log")

    @property
    def alive(self) -> bool:
        return self.process is None or self.process.poll() is None

    def rss_bytes(self) -> int:
        """krb5kdc's resident set size now (Linux; 0 elsewhere)."""
        return _rss(self.pid)

    def env(self, ccache: Optional[str] = None) -> Dict[str, str]:
        """The environment of a Kerberos client of this realm (``KRB5_CONFIG``;
        ``KRB5CCNAME`` when ``ccache`` is given), on top of this process's."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("KRB5")}
        env["KRB5_CONFIG"] = self.krb5_conf
        if ccache is not None:
            env["KRB5CCNAME"] = ccache if ":" in ccache else f"FILE:{ccache}"
        return env

    def kinit(self, name: str, ccache: str, *, keytab: Optional[str] = None, password: Optional[str] = None,
              lifetime: Optional[str] = None, renewable: Optional[str] = None) -> str:
        """Get a ticket for ``name`` into the ticket cache ``ccache`` (a path or
        ``TYPE:residual``), with ``keytab`` (default: the principal's own, if it has one)
        or ``password`` (default for bob: :data:`BOB_PASSWORD`); ``lifetime`` and
        ``renewable`` are kinit's ``-l`` / ``-r`` (e.g. ``"30s"``). Returns ``ccache``."""
        short = name.split("@")[0]
        keytab = keytab or (None if password else self.keytabs.get(short))
        if keytab is None and password is None and short == "bob":
            password = BOB_PASSWORD
        args = ["-c", ccache if ":" in ccache else f"FILE:{ccache}"]
        if lifetime:
            args += ["-l", lifetime]
        if renewable:
            args += ["-r", renewable]
        args += ["-k", "-t", keytab] if keytab else []
        _run([_tool("kinit"), *args, principal(name)], self.env(), password + "\n" if password else None)
        return ccache

    def log_tail(self, limit: int = LOG_TAIL) -> str:
        try:
            return Path(self.log_path).read_text(errors="replace")[-limit:]
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM the KDC (SIGKILL after a bound) and delete its directory. Idempotent."""
        if self._finalizer.alive:
            self._finalizer.detach()
            _stop(self.process, self.pid, self.workdir, STOP_TIMEOUT)

    def __enter__(self) -> "Kdc":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _run(cmd: List[str], env: Dict[str, str], stdin: Optional[str] = None) -> str:
    try:
        done = subprocess.run(cmd, env=env, input=stdin, capture_output=True, text=True, timeout=TOOL_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise KdcStartError(f"{cmd[0]} did not finish within {TOOL_TIMEOUT:g} s: {cmd[1:]}") from None
    if done.returncode != 0:
        raise KdcStartError(f"{os.path.basename(cmd[0])} failed (exit {done.returncode}): {cmd[1:]}\n"
                            f"{done.stdout}{done.stderr}")
    return done.stdout


def _write_configs(workdir: Path, port: int) -> Dict[str, str]:
    """``krb5.conf``, ``kdc.conf`` and the (empty) ACL; the environment of the KDC's tools."""
    values = dict(realm=REALM, dir=workdir, host=HOST, port=port, enctypes=ENCTYPES,
                  supported=" ".join(f"{e}:normal" for e in ENCTYPES.split()))
    (workdir / "krb5.conf").write_text(_KRB5_CONF.format(**values))
    (workdir / "kdc.conf").write_text(_KDC_CONF.format(**values))
    (workdir / "kadm5.acl").write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KRB5")}
    env.update(KRB5_CONFIG=str(workdir / "krb5.conf"), KRB5_KDC_PROFILE=str(workdir / "kdc.conf"))
    return env


def _make_realm(workdir: Path, env: Dict[str, str]) -> Dict[str, str]:
    """The database and the principals (see the module doc); returns the keytabs by short name."""
    _run([_tool("kdb5_util"), "create", "-s", "-r", REALM, "-P", os.urandom(12).hex()], env)
    keytabs = {name: str(workdir / f"{'broker' if name == 'kafka' else name}.keytab")
               for name in ("kafka", "alice", "carol")}
    commands = [
        f"addprinc -randkey {SERVICE}/{HOST}",
        "addprinc -randkey alice",
        f"addprinc -pw {BOB_PASSWORD} bob",
        f'addprinc -randkey -maxlife "{SHORT_LIFE} seconds" -maxrenewlife "{SHORT_RENEW} seconds" carol',
        f"ktadd -k {keytabs['kafka']} {SERVICE}/{HOST}",
        f"ktadd -k {keytabs['alice']} alice",
        f"ktadd -k {keytabs['carol']} carol",
    ]
    kadmin = _tool("kadmin.local")
    for command in commands:
        _run([kadmin, "-r", REALM, "-q", command], env)
    return keytabs


def _ready(kdc: Kdc, timeout: float) -> None:
    """Returns once kinit with alice's keytab gets a ticket from the KDC."""
    deadline = time.monotonic() + timeout
    probe = os.path.join(kdc.workdir, "ccache-probe")
    while True:
        if kdc.process is not None and kdc.process.poll() is not None:
            raise KdcStartError(f"krb5kdc exited with status {kdc.process.returncode}; log tail:\n{kdc.log_tail()}")
        try:
            kdc.kinit("alice", probe)
            return
        except KdcStartError as e:
            if time.monotonic() > deadline:
                raise KdcStartError(f"the KDC (pid {kdc.pid}) issued no ticket within {timeout:g} s: {e}; "
                                    f"log tail:\n{kdc.log_tail()}") from None
        time.sleep(0.05)


def start_kdc(*, timeout: float = READY_TIMEOUT, tie_to_parent: bool = True) -> Kdc:
    """Make the realm and start ``krb5kdc``; see the module doc."""
    krb5kdc = _tool("krb5kdc")
    t0 = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="kwire-kdc-"))
    try:
        port = _free_port()
        env = _write_configs(workdir, port)
        keytabs = _make_realm(workdir, env)
        tie = functools.partial(_tie_to_parent, os.getpid()) if tie_to_parent and sys.platform.startswith("linux") \
            else None
        with open(workdir / "krb5kdc.out", "ab") as out:
            proc = subprocess.Popen([krb5kdc, "-n", "-r", REALM], env=env, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, cwd=workdir, start_new_session=True, preexec_fn=tie)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    principals = {"kafka": f"{SERVICE}/{HOST}@{REALM}", **{n: principal(n) for n in ("alice", "bob", "carol")}}
    kdc = Kdc(pid=proc.pid, workdir=str(workdir), port=port, keytabs=keytabs, principals=principals, process=proc)
    try:
        _ready(kdc, timeout)
    except BaseException:
        kdc.stop()
        raise
    kdc.startup_seconds = time.monotonic() - t0
    return kdc
