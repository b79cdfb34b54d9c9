"""Authentication against a secured Apicurio Registry (``apicurio_secured``:
HTTP Basic users, and bearer tokens of the session's Keycloak verified
against its JWKS): every credentials source of the options, the refusals,
and no secret in errors or logs."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from kwire.registry import AsyncSchemaRegistryClient, SchemaRegistryClient, SchemaRegistryError
from support.http_proxy import HttpProxy

from .conftest import USER_V1, USERS


def _basic_sources(url: str):
    user, password = "alice", USERS["alice"]
    host = url.split("//", 1)[1]
    jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
            f'username="{user}" password="{password}";')
    return {
        "USER_INFO": {"url": url, "basic.auth.credentials.source": "USER_INFO",
                      "basic.auth.user.info": f"{user}:{password}"},
        "user info without a source": {"url": url, "basic.auth.user.info": f"{user}:{password}"},
        "URL": {"url": f"http://{user}:{password}@{host}", "basic.auth.credentials.source": "URL"},
        "SASL_INHERIT": {"url": url, "basic.auth.credentials.source": "SASL_INHERIT", "sasl.mechanism": "PLAIN",
                         "sasl.username": user, "sasl.password": password},
        "SASL_INHERIT (jaas)": {"url": url, "basic.auth.credentials.source": "SASL_INHERIT",
                                "sasl.mechanism": "SCRAM-SHA-256", "sasl.jaas.config": jaas},
    }


def _secrets(keycloak) -> list:
    return [*USERS.values(), keycloak.client.secret]


def test_basic_auth_from_every_source(apicurio_secured, subject):
    for name, conf in _basic_sources(apicurio_secured.url).items():
        with SchemaRegistryClient(conf) as c:
            assert c.register_schema(subject, USER_V1) > 0, name
            assert c.get_latest_version(subject).version == 1, name


def test_refusals_are_not_retried_and_name_no_secret(apicurio_secured, keycloak, caplog):
    caplog.set_level(logging.DEBUG)
    url = apicurio_secured.url
    refused = [{"url": url},
               {"url": url, "basic.auth.user.info": "alice:wrong-password"},
               {"url": f"http://alice:{USERS['bob']}@{url.split('//', 1)[1]}"},
               {"url": url, "bearer.auth.token": "not-a-jwt"}]
    for conf in refused:
        with SchemaRegistryClient({**conf, "max.retries": 3, "retries.wait.ms": 1000}) as c:
            t0 = time.monotonic()
            with pytest.raises(SchemaRegistryError) as e:
                c.get_subjects()
            assert e.value.status == 401 and not e.value.retriable and time.monotonic() - t0 < 1, conf
            assert not any(s in str(e.value) or s in repr(e.value) for s in _secrets(keycloak)), str(e.value)
            assert not any(s in repr(c) or s in repr(c.options) for s in _secrets(keycloak))
    assert not any(s in caplog.text for s in _secrets(keycloak))


def test_a_static_bearer_token(apicurio_secured, keycloak, subject):
    token = keycloak.token()["access_token"]
    with HttpProxy(apicurio_secured.url) as proxy:
        conf = {"url": proxy.url, "bearer.auth.credentials.source": "STATIC_TOKEN", "bearer.auth.token": token,
                "bearer.auth.logical.cluster": "lsrc-kwire", "bearer.auth.identity.pool.id": "pool-1"}
        with SchemaRegistryClient(conf) as c:
            assert c.register_schema(subject, USER_V1) > 0
            assert token not in repr(c.options)
        headers = proxy.requests()[0].headers
    assert headers["Authorization"] == f"Bearer {token}"
    assert headers["target-sr-cluster"] == "lsrc-kwire" and headers["Confluent-Identity-Pool-Id"] == "pool-1"


def _oauth(keycloak, token_url: str, url: str, secret=None) -> dict:
    return {"url": url, "bearer.auth.credentials.source": "OAUTHBEARER", "bearer.auth.issuer.endpoint.url": token_url,
            "bearer.auth.client.id": keycloak.client.client_id,
            "bearer.auth.client.secret": secret or keycloak.client.secret, "bearer.auth.scope": "profile"}


def test_oauth_client_credentials_fetch_once_and_refresh(apicurio_secured, keycloak, subject):
    with HttpProxy(keycloak.token_endpoint) as idp:
        with SchemaRegistryClient(_oauth(keycloak, idp.url, apicurio_secured.url)) as c:
            schema_id = c.register_schema(subject, USER_V1)
            for _ in range(3):
                c.clear_caches()
                assert c.get_schema(schema_id).schema_type == "AVRO"
            assert len(idp.requests("POST")) == 1               # one token for every call
            value, _ = c._credentials._token
            c._credentials._token = (value, time.time() - 1)    # past 80% of its life: fetched anew
            c.clear_caches()
            c.get_schema(schema_id)
            assert len(idp.requests("POST")) == 2
        form = idp.requests("POST")[0]
    assert form.headers["Authorization"].startswith("Basic ")  # the client's secret as Kafka's client sends it


def test_oauth_async(apicurio_secured, keycloak, subject):
    async def main() -> int:
        async with AsyncSchemaRegistryClient(_oauth(keycloak, keycloak.token_endpoint, apicurio_secured.url)) as c:
            schema_id = await c.register_schema(subject, USER_V1)
            return (await c.lookup_schema(subject, USER_V1)).schema_id - schema_id

    assert asyncio.run(main()) == 0


def test_oauth_refused_by_the_token_endpoint(apicurio_secured, keycloak):
    conf = _oauth(keycloak, keycloak.token_endpoint, apicurio_secured.url, secret="wrong-client-secret")
    with SchemaRegistryClient(conf) as c, pytest.raises(SchemaRegistryError) as e:
        c.get_subjects()
    assert e.value.status == 401 and not e.value.retriable
    assert keycloak.token_endpoint in e.value.message and "Invalid client credentials" in e.value.message
    assert "wrong-client-secret" not in str(e.value)
