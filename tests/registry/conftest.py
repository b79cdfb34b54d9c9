"""tests/registry's shared pieces: clients of the session's Apicurio
Registry (``apicurio``, tests/conftest.py), a secured Apicurio (HTTP Basic
users and Keycloak's bearer tokens), subjects of their own per test, an
HTTP proxy in front of the registry, and the schemas the tests register."""

from __future__ import annotations

import json
import sys
import uuid
from typing import Dict, Iterator, List, Optional

import pytest

from kwire.registry import Schema, SchemaRegistryClient
from support.http_proxy import HttpProxy

#: The secured Apicurio's HTTP Basic users (user: password).
USERS = {"alice": "alice-secret-pw", "bob": "bob-secret-pw"}


def avro_record(name: str, fields: List[dict], namespace: Optional[str] = "kwire.test") -> Schema:
    """An Avro record schema (JSON text as a client would send it)."""
    doc: Dict = {"type": "record", "name": name, "fields": fields}
    if namespace:
        doc["namespace"] = namespace
    return Schema(json.dumps(doc))


#: Version 1 of the tests' evolving record, and compatible / incompatible next versions.
USER_V1 = avro_record("User", [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}])
USER_V2_COMPATIBLE = avro_record("User", [{"name": "id", "type": "long"}, {"name": "name", "type": "string"},
                                          {"name": "email", "type": ["null", "string"], "default": None}])
USER_V2_INCOMPATIBLE = avro_record("User", [{"name": "id", "type": "long"}, {"name": "name", "type": "string"},
                                            {"name": "age", "type": "int"}])     # no default: old data unreadable


@pytest.fixture
def subject() -> str:
    """A subject name no other test uses."""
    return f"kw-{uuid.uuid4().hex[:12]}-value"


@pytest.fixture
def client(apicurio) -> Iterator[SchemaRegistryClient]:
    with SchemaRegistryClient({"url": apicurio.url, "timeout": 10}) as c:
        yield c


@pytest.fixture
def proxy(apicurio) -> Iterator[HttpProxy]:
    """An HTTP proxy in front of the session's Apicurio (``proxy.url``), recording every request."""
    with HttpProxy(apicurio.url) as p:
        yield p


@pytest.fixture(scope="session")
def apicurio_secured(keycloak):
    """A second Apicurio whose API needs credentials: HTTP Basic for :data:`USERS`,
    or a bearer token of Keycloak's realm (tests/support/keycloak.py)."""
    from support.apicurio import start_apicurio

    server = start_apicurio(users=USERS, oidc_issuer=keycloak.issuer,
                            progress=lambda msg: sys.stderr.write(f"[apicurio-secured] {msg}\n"))
    try:
        yield server
    finally:
        server.stop()
