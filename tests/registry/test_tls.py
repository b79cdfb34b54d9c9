"""TLS to the registry: the real Apicurio behind a TLS-terminating proxy
(support.proxies.TlsProxy) with a CA made for the test, with and without a
required client certificate (mutual TLS); both clients."""

from __future__ import annotations

import asyncio

import pytest
from cryptography.hazmat.primitives import serialization

from kwire.config import ConfigError
from kwire.registry import AsyncSchemaRegistryClient, SchemaRegistryClient, SchemaRegistryError
from support.proxies import TlsProxy, make_pki

from .conftest import USER_V1

KEY_PASSWORD = "client-key-secret"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(str(tmp_path_factory.mktemp("registry-pki")))


@pytest.fixture(scope="module")
def encrypted_key(pki, tmp_path_factory):
    """The client key again, encrypted with :data:`KEY_PASSWORD`."""
    key = serialization.load_pem_private_key(open(pki.client_key, "rb").read(), None)
    path = tmp_path_factory.mktemp("registry-key") / "client-encrypted.key"
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.BestAvailableEncryption(KEY_PASSWORD.encode())))
    return str(path)


def _tls_url(proxy: TlsProxy) -> str:
    return f"https://127.0.0.1:{proxy.port}/apis/ccompat/v7"


def _target(apicurio):
    return "127.0.0.1", apicurio.port


def test_the_registry_is_verified_against_the_ca(apicurio, pki, subject):
    with TlsProxy(_target(apicurio), pki) as tls:
        with SchemaRegistryClient({"url": _tls_url(tls), "ssl.ca.location": pki.ca}) as c:
            schema_id = c.register_schema(subject, USER_V1)
            assert c.get_schema(schema_id).schema_type == "AVRO"
        for ca in (pki.other_ca, None):                  # another CA, or the default CAs: refused
            conf = {"url": _tls_url(tls), "timeout": 5, "max.retries": 0}
            if ca:
                conf["ssl.ca.location"] = ca
            with SchemaRegistryClient(conf) as c, pytest.raises(SchemaRegistryError) as e:
                c.get_subjects()
            assert e.value.status is None and "CERTIFICATE_VERIFY_FAILED" in e.value.message


def test_mutual_tls(apicurio, pki, encrypted_key, subject):
    with TlsProxy(_target(apicurio), pki, require_client_cert=True) as tls:
        base = {"url": _tls_url(tls), "ssl.ca.location": pki.ca, "timeout": 5, "max.retries": 0}
        with SchemaRegistryClient(base) as c, pytest.raises(SchemaRegistryError) as e:
            c.get_subjects()                             # no client certificate: the handshake fails
        assert e.value.status is None and e.value.retriable
        for key, password in ((pki.client_key, None), (encrypted_key, KEY_PASSWORD)):
            conf = {**base, "ssl.certificate.location": pki.client_cert, "ssl.key.location": key}
            if password:
                conf["ssl.key.password"] = password
            with SchemaRegistryClient(conf) as c:
                assert c.register_schema(subject, USER_V1) > 0

            async def main() -> int:
                async with AsyncSchemaRegistryClient(conf) as ac:
                    return (await ac.get_latest_version(subject)).version

            assert asyncio.run(main()) == 1


def test_a_wrong_key_password_is_a_config_error_without_it(pki, encrypted_key):
    with pytest.raises(ConfigError) as e:
        SchemaRegistryClient({"url": "https://127.0.0.1:1", "ssl.ca.location": pki.ca,
                              "ssl.certificate.location": pki.client_cert, "ssl.key.location": encrypted_key,
                              "ssl.key.password": "wrong-secret"})
    assert "ssl.key.password" in str(e.value) and "secret" not in str(e.value)
