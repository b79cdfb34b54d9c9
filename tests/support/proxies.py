"""Local TCP proxies that tests put in front of the real broker.

* :class:`FaultProxy` relays bytes both ways and, when told, cuts live
  connections after a random number of bytes (mid-frame), so a client's
  reconnect and retry paths run against the real broker; or black-holes
  them (:meth:`FaultProxy.black_hole`: nothing relayed, nothing closed)
  until :meth:`FaultProxy.heal`, a network partition.
* :class:`TlsProxy` terminates TLS (``ssl`` module; the certificates come
  from :func:`make_pki`) and relays plaintext to the broker; it can require
  a client certificate (mutual TLS).

Both listen on a free loopback port; start the broker with
``advertised_port=proxy.port`` so the metadata sends clients back through the
proxy. Each connection is served by two relay threads.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import random
import socket
import ssl
import threading
from dataclasses import dataclass
from typing import List, Optional, Tuple


class _Relay:
    """Accepts on a free loopback port and relays each connection to
    ``target``; subclasses wrap the accepted socket or interfere."""

    def __init__(self, target: Tuple[str, int], host: str = "127.0.0.1", port: int = 0) -> None:
        self.target = target
        self._srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._srv.bind((host, port))
        self._srv.listen(64)
        self.host, self.port = self._srv.getsockname()[:2]
        self._lock = threading.Lock()
        self._pairs: List[Tuple[socket.socket, socket.socket]] = []
        self._stopped = False
        self.accepted = 0            # connections relayed (the target answered)
        self.connections = 0         # connections accepted, relayed or not (every attempt a client made)
        self.errors: List[str] = []
        self._thread = threading.Thread(target=self._accept_loop, daemon=True, name=f"{type(self).__name__}:{self.port}")
        self._thread.start()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def wrap(self, conn: socket.socket) -> Optional[socket.socket]:
        return conn

    def on_bytes(self, pair_index: int, direction: str, data: bytes) -> bool:
        """Called for each chunk relayed; False cuts the connection."""
        return True

    def _accept_loop(self) -> None:
        while not self._stopped:
            try:
                conn, _ = self._srv.accept()
            except OSError:
                return
            if self._stopped:        # accepted as stop() closed the socket: refused, as later ones are
                conn.close()
                return
            with self._lock:
                self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            wrapped = self.wrap(conn)
        except (ssl.SSLError, OSError) as e:
            self.errors.append(f"{type(e).__name__}: {e}")
            conn.close()
            return
        if wrapped is None:
            conn.close()
            return
        try:
            upstream = socket.create_connection(self.target, timeout=10)
        except OSError as e:
            self.errors.append(f"upstream: {e}")
            wrapped.close()
            return
        upstream.settimeout(None)
        with self._lock:
            self.accepted += 1
            index = len(self._pairs)
            self._pairs.append((wrapped, upstream))
        threading.Thread(target=self._pump, args=(index, wrapped, upstream, "up"), daemon=True).start()
        self._pump(index, upstream, wrapped, "down")

    def _pump(self, index: int, src: socket.socket, dst: socket.socket, direction: str) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if not self.on_bytes(index, direction, data):
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                try:
                    s.close()
                except OSError:
                    pass

    def cut_all(self) -> None:
        """Close every live connection now."""
        with self._lock:
            pairs = list(self._pairs)
        for a, b in pairs:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def stop(self) -> None:
        self._stopped = True
        try:
            # close() alone leaves a thread blocked in accept() on the listening socket (Linux), which
            # then took one more connection and relayed it: shutdown() wakes it first
            self._srv.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self._srv.close()
        except OSError:
            pass
        self.cut_all()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class FaultProxy(_Relay):
    """Relays; while ``cutting`` is on, each connection is cut after a random
    number of relayed bytes in [``min_bytes``, ``max_bytes``) (so mid-frame
    almost always). ``cuts`` counts the connections cut."""

    def __init__(self, target: Tuple[str, int], *, seed: int = 1, min_bytes: int = 1, max_bytes: int = 2_000_000) -> None:
        self._rng = random.Random(seed)
        self.min_bytes, self.max_bytes = min_bytes, max_bytes
        self.cutting = False
        self.cuts = 0
        self._budget: dict = {}
        self._flowing = threading.Event()
        self._flowing.set()
        super().__init__(target)

    @property
    def holing(self) -> bool:
        """True between :meth:`black_hole` and :meth:`heal`."""
        return not self._flowing.is_set()

    def black_hole(self) -> None:
        """A network partition: connections stay open and new ones are accepted, but
        no byte is relayed either way (each relay thread holds its chunk) until
        :meth:`heal`, when the held bytes go on, as TCP would retransmit them to a
        peer that had not given up. A client that gives up closes its side."""
        self._flowing.clear()

    def heal(self) -> None:
        self._flowing.set()

    def stop(self) -> None:
        super().stop()
        self.heal()                  # the held relay threads end on their closed sockets

    def on_bytes(self, pair_index: int, direction: str, data: bytes) -> bool:
        while not self._flowing.wait(0.5):
            if self._stopped:
                return False
        if not self.cutting:
            return True
        with self._lock:
            left = self._budget.get(pair_index)
            if left is None:
                left = self._rng.randrange(self.min_bytes, self.max_bytes)
            left -= len(data)
            self._budget[pair_index] = left
            if left <= 0:
                self.cuts += 1
                return False
        return True


@dataclass
class Pki:
    """Files of a throwaway CA and the certificates it signed."""

    ca: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str
    other_ca: str          # a CA that signed nothing of ours
    ca_key: str = ""       # the CA's key (revocation lists: make_crl)


def make_pki(directory: str, server_names: Tuple[str, ...] = ("localhost", "127.0.0.1")) -> Pki:
    """A CA, a server certificate for ``server_names`` and a client
    certificate, written as PEM files into ``directory``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def key():
        return ec.generate_private_key(ec.SECP256R1())

    def name(cn: str):
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def ca_cert(k, cn):
        return (x509.CertificateBuilder().subject_name(name(cn)).issuer_name(name(cn)).public_key(k.public_key())
                .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
                .not_valid_after(now + datetime.timedelta(days=2))
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                             content_commitment=False, key_encipherment=False, data_encipherment=False,
                                             key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
                .add_extension(x509.SubjectKeyIdentifier.from_public_key(k.public_key()), critical=False)
                .sign(k, hashes.SHA256()))

    def leaf(k, cn, ca_k, ca_c, sans, usage):
        b = (x509.CertificateBuilder().subject_name(name(cn)).issuer_name(ca_c.subject).public_key(k.public_key())
             .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
             .not_valid_after(now + datetime.timedelta(days=2))
             .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
             .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
             .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_k.public_key()), critical=False))
        if sans:
            entries = []
            for s in sans:
                try:
                    entries.append(x509.IPAddress(ipaddress.ip_address(s)))
                except ValueError:
                    entries.append(x509.DNSName(s))
            b = b.add_extension(x509.SubjectAlternativeName(entries), critical=False)
        return b.sign(ca_k, hashes.SHA256())

    def write(path, *objs):
        with open(path, "wb") as f:
            for o in objs:
                if isinstance(o, x509.Certificate):
                    f.write(o.public_bytes(serialization.Encoding.PEM))
                else:
                    f.write(o.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                            serialization.NoEncryption()))
        return path

    ca_k = key()
    ca = ca_cert(ca_k, "kwire test CA")
    other_k = key()
    other = ca_cert(other_k, "unrelated CA")
    srv_k, cli_k = key(), key()
    srv = leaf(srv_k, server_names[0], ca_k, ca, server_names, ExtendedKeyUsageOID.SERVER_AUTH)
    cli = leaf(cli_k, "kwire-client", ca_k, ca, (), ExtendedKeyUsageOID.CLIENT_AUTH)
    d = directory
    return Pki(write(os.path.join(d, "ca.pem"), ca), write(os.path.join(d, "server.pem"), srv),
               write(os.path.join(d, "server.key"), srv_k), write(os.path.join(d, "client.pem"), cli),
               write(os.path.join(d, "client.key"), cli_k), write(os.path.join(d, "other-ca.pem"), other),
               write(os.path.join(d, "ca.key"), ca_k))


def make_crl(pki: Pki, path: str, revoke: Tuple[str, ...] = ()) -> str:
    """A revocation list of ``pki``'s CA, revoking the certificates in the
    PEM files ``revoke``, written to ``path``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization

    with open(pki.ca, "rb") as f:
        ca = x509.load_pem_x509_certificate(f.read())
    with open(pki.ca_key, "rb") as f:
        ca_key = serialization.load_pem_private_key(f.read(), None)
    now = datetime.datetime.now(datetime.timezone.utc)
    b = (x509.CertificateRevocationListBuilder().issuer_name(ca.subject).last_update(now - datetime.timedelta(hours=1))
         .next_update(now + datetime.timedelta(days=1)))
    for cert_path in revoke:
        with open(cert_path, "rb") as f:
            serial = x509.load_pem_x509_certificate(f.read()).serial_number
        b = b.add_revoked_certificate(x509.RevokedCertificateBuilder().serial_number(serial)
                                      .revocation_date(now - datetime.timedelta(minutes=5)).build())
    with open(path, "wb") as f:
        f.write(b.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM))
    return path


class TlsProxy(_Relay):
    """Terminates TLS with ``pki``'s server certificate; with
    ``require_client_cert`` the client must present one signed by the CA."""

    def __init__(self, target: Tuple[str, int], pki: Pki, *, require_client_cert: bool = False) -> None:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(pki.server_cert, pki.server_key)
        if require_client_cert:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(pki.ca)
        self._ctx = ctx
        super().__init__(target)

    def wrap(self, conn: socket.socket) -> Optional[socket.socket]:
        conn.settimeout(10)
        tls = self._ctx.wrap_socket(conn, server_side=True)
        tls.settimeout(None)
        return tls


class SaslProxy(_Relay):
    """Terminates SASL in front of the plain broker: answers SaslHandshake and
    SaslAuthenticate itself (PLAIN, and SCRAM-SHA-256/512 with scramp's
    server side), forwards ApiVersions, refuses anything else before
    authentication, and relays bytes once the client is in.

    ``users`` maps user name to password; ``mechanisms`` are those offered.
    ``authenticated`` lists the users that got in."""

    def __init__(self, target: Tuple[str, int], users: dict, mechanisms=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")):
        from scramp import ScramMechanism

        self.users = dict(users)
        self.mechanisms = list(mechanisms)
        self.authenticated: List[str] = []
        self._scram = {}
        for name in self.mechanisms:
            if name.startswith("SCRAM"):
                mech = ScramMechanism(name)
                self._scram[name] = (mech, {u: mech.make_auth_info(p, iteration_count=4096) for u, p in users.items()})
        super().__init__(target)

    @staticmethod
    def _read_frame(sock: socket.socket) -> Optional[bytes]:
        head = b""
        while len(head) < 4:
            chunk = sock.recv(4 - len(head))
            if not chunk:
                return None
            head += chunk
        size = int.from_bytes(head, "big")
        body = bytearray()
        while len(body) < size:
            chunk = sock.recv(size - len(body))
            if not chunk:
                return None
            body += chunk
        return bytes(body)

    def wrap(self, conn: socket.socket) -> Optional[socket.socket]:
        import struct as _struct

        from kwire.protocol import messages as m

        conn.settimeout(20)
        upstream = None
        mechanism = None
        server = None
        try:
            while True:
                frame = self._read_frame(conn)
                if frame is None:
                    return None
                api_key, version, corr, cid_len = _struct.unpack_from(">hhih", frame, 0)
                pos = 10 + max(cid_len, 0)
                if api_key == 18:                      # ApiVersions: the broker's answer
                    if upstream is None:
                        upstream = socket.create_connection(self.target, timeout=10)
                    upstream.sendall(len(frame).to_bytes(4, "big") + frame)
                    answer = self._read_frame(upstream)
                    if answer is None:
                        return None
                    conn.sendall(len(answer).to_bytes(4, "big") + answer)
                    continue
                if api_key == 17:                      # SaslHandshake (never flexible)
                    req = m.SaslHandshakeRequest.decode(frame, version, pos)
                    ok = req.mechanism in self.mechanisms
                    mechanism = req.mechanism if ok else None
                    body = m.SaslHandshakeResponse.encode_bytes(
                        m.SaslHandshakeResponse(error_code=0 if ok else 33, mechanisms=self.mechanisms), version)
                    self._send(conn, corr, body, flexible=False)
                    if ok and mechanism.startswith("SCRAM"):
                        mech, infos = self._scram[mechanism]
                        server = mech.make_server(lambda user: infos[user])
                    continue
                if api_key == 36 and mechanism is not None:
                    flexible = version >= 2
                    if flexible:
                        pos += 1                      # the header's empty tagged-field section
                    token = bytes(m.SaslAuthenticateRequest.decode(frame, version, pos).auth_bytes)
                    error, reply, done, user = self._step(mechanism, server, token)
                    body = m.SaslAuthenticateResponse.encode_bytes(m.SaslAuthenticateResponse(
                        error_code=error, error_message=None if not error else reply.decode(),
                        auth_bytes=b"" if error else reply, session_lifetime_ms=0), version)
                    self._send(conn, corr, body, flexible=flexible)
                    if error:
                        return None
                    if done:
                        self.authenticated.append(user)
                        break
                    continue
                return None                            # anything else before authentication: hang up
        except Exception as e:  # noqa: BLE001 - a test proxy reports and hangs up
            self.errors.append(f"{type(e).__name__}: {e}")
            return None
        finally:
            if upstream is not None:
                upstream.close()
        conn.settimeout(None)
        return conn

    def _step(self, mechanism, server, token):
        """(error code, reply bytes, finished, user)."""
        if mechanism == "PLAIN":
            parts = token.split(b"\0")
            if len(parts) != 3:
                return 58, b"malformed PLAIN message", False, None
            user, password = parts[1].decode(), parts[2].decode()
            if self.users.get(user) != password:
                return 58, b"Authentication failed: Invalid username or password", False, None
            return 0, b"", True, user
        from scramp import ScramException

        try:
            if server.stage is None:
                try:
                    server.set_client_first(token.decode())
                except KeyError:
                    return 58, b"Authentication failed: unknown user", False, None
                return 0, server.get_server_first().encode(), False, None
            server.set_client_final(token.decode())
            return 0, server.get_server_final().encode(), True, server.user
        except ScramException as e:
            return 58, f"Authentication failed: {e}".encode(), False, None

    @staticmethod
    def _send(conn: socket.socket, corr: int, body: bytes, flexible: bool) -> None:
        head = corr.to_bytes(4, "big", signed=True) + (b"\0" if flexible else b"")
        conn.sendall((len(head) + len(body)).to_bytes(4, "big") + head + body)
