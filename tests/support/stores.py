"""Java key and trust stores of a test PKI (``support.proxies.make_pki``),
made by the JDK's keytool, as Kafka's ``ssl.*store.*`` options: for the
core's store tests and the Spark security tests."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Dict


def _keytool(*args: str) -> None:
    subprocess.run(["keytool", *args], check=True, capture_output=True, timeout=120)


def make_stores(pki, directory: Path) -> Dict[str, Dict[str, str]]:
    """Trust and key stores of ``pki`` as Kafka's options, per kind: JKS
    and PKCS12 made by keytool (the client's key enters through a PKCS12
    file cryptography writes, as keytool cannot import a PEM key; the JKS
    key has its own password), PEM as Kafka's PEM key store (the key,
    encrypted with ``ssl.key.password``, and the certificate in one file)."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import (BestAvailableEncryption, Encoding, PrivateFormat,
                                                              load_pem_private_key, pkcs12)

    key = load_pem_private_key(open(pki.client_key, "rb").read(), None)
    cert = x509.load_pem_x509_certificate(open(pki.client_cert, "rb").read())
    ca = x509.load_pem_x509_certificate(open(pki.ca, "rb").read())
    seed = directory / "seed.p12"
    seed.write_bytes(pkcs12.serialize_key_and_certificates(b"client", key, cert, [ca],
                                                           BestAvailableEncryption(b"seed-pass")))
    out = {}
    for kind in ("JKS", "PKCS12"):
        trust, keys = directory / f"trust.{kind.lower()}", directory / f"keys.{kind.lower()}"
        _keytool("-importcert", "-noprompt", "-alias", "ca", "-file", pki.ca, "-keystore", str(trust),
                 "-storetype", kind, "-storepass", "trust-pass")
        key_pass = "key-pass" if kind == "JKS" else "store-pass"      # PKCS12: one password for both
        _keytool("-importkeystore", "-noprompt", "-srckeystore", str(seed), "-srcstoretype", "PKCS12",
                 "-srcstorepass", "seed-pass", "-destkeystore", str(keys), "-deststoretype", kind,
                 "-deststorepass", "store-pass", "-destkeypass", key_pass)
        out[kind] = {"ssl.truststore.location": str(trust), "ssl.truststore.type": kind,
                     "ssl.truststore.password": "trust-pass",
                     "ssl.keystore.location": str(keys), "ssl.keystore.type": kind,
                     "ssl.keystore.password": "store-pass", "ssl.key.password": key_pass}
    pem = directory / "keys.pem"
    pem.write_bytes(key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, BestAvailableEncryption(b"pem-key-pass"))
                    + cert.public_bytes(Encoding.PEM))
    out["PEM"] = {"ssl.truststore.location": pki.ca, "ssl.truststore.type": "PEM",
                  "ssl.keystore.location": str(pem), "ssl.keystore.type": "PEM", "ssl.key.password": "pem-key-pass"}
    return out
