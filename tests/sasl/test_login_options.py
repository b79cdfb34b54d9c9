"""Kafka's Java login options as kwire's (kwire.sasl.login) and their syntax
(kwire.sasl.jaas: sasl.jaas.config, properties files): each login module's
mapping, the refusals, and that no secret or keytab path shows in an
error. No server: the translated options are checked by kwire's option
table and, where no extra is needed, by the authenticator they make."""

from __future__ import annotations

import pytest

from kwire.config import CONSUMER, ConfigError, resolve
from kwire.sasl.jaas import parse_jaas, read_properties
from kwire.sasl.login import (IAM_MODULE, IAM_OAUTH_HANDLER, KRB5_MODULE, OAUTH_MODULE, OIDC_HANDLERS, PLAIN_MODULE,
                         SCRAM_MODULE, aws_region, translate_login)

OIDC = OIDC_HANDLERS[0]
SECRETS = ("s3cr3t-Pa55", "/very/private/alice.keytab", "key-s3cr3t")


def login(jaas: str, **params):
    return translate_login({**{k.replace("_", "."): v for k, v in params.items()}, "sasl.jaas.config": jaas},
                           prefix="kafka.")


def refused(match: str, jaas: str, **params) -> str:
    with pytest.raises(ConfigError, match=match) as e:
        login(jaas, **params)
    text = str(e.value)
    for secret in SECRETS:
        assert secret not in text, text
    return text


def kwire_options(translated):
    """The options as a kwire consumer resolves them (types converted, names checked)."""
    return resolve(CONSUMER, {"bootstrap.servers": "127.0.0.1:9092", "security.protocol": "SASL_PLAINTEXT",
                              **translated})


# ------------------------------------------------------------------ syntax
def test_jaas_syntax():
    e = parse_jaas(f'{PLAIN_MODULE} required username="alice" password="p\\"a ss;w=rd";')
    assert (e.module, e.flag, e.options) == (PLAIN_MODULE, "required", {"username": "alice", "password": 'p"a ss;w=rd'})
    e = parse_jaas(f"  {SCRAM_MODULE} REQUIRED /* c */ username=bob\n  password='s3cr$t' // comment\n ;")
    assert e.flag == "required" and e.options == {"username": "bob", "password": "s3cr$t"}
    for bad, match in (("", "is empty"), ("a.B required username=x", "must end with ';'"),
                       ("a.B mandatory;", "invalid control flag 'mandatory'"),
                       ("a.B required username;", "expected key=value"),
                       ("a.B required; c.D required;", "exactly one login module entry, found 2"),
                       ("a.B required password=p@ss;", "unexpected character '@'"),
                       ('a.B required password="open;', "unterminated quoted value"),
                       ("a.B required /* open", "unterminated /\\* comment")):
        with pytest.raises(ConfigError, match=f"^kafka.sasl.jaas.config:? .*{match}"):
            parse_jaas(bad, "kafka.sasl.jaas.config")


def test_properties_file(tmp_path):
    path = tmp_path / "client.properties"
    path.write_text("# a comment\n! another\n\n"
                    "security.protocol = SASL_SSL\n"
                    "sasl.mechanism:OAUTHBEARER\n"
                    "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule \\\n"
                    "    required \\\n"
                    '    clientId="c\\\\d" clientSecret="x";\n'
                    "key\\ with\\ spaces value\n"
                    "tab\\tkey=\\u00e9t\\u00e9\n"
                    "empty=\n"
                    "ends.with.backslash=a\\\\\n"
                    "next=1\n", encoding="utf-8")
    assert read_properties(str(path)) == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
        "sasl.jaas.config": f'{OAUTH_MODULE} required clientId="c\\d" clientSecret="x";',
        "key with spaces": "value", "tab\tkey": "été", "empty": "", "ends.with.backslash": "a\\", "next": "1"}
    with pytest.raises(ConfigError, match="cannot read the properties file"):
        read_properties(str(tmp_path / "missing.properties"))
    path.write_text("bad=\\u12\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="line 1: malformed"):
        read_properties(str(path))


# ---------------------------------------------------------- PLAIN, SCRAM
def test_plain_and_scram():
    out = login(f'{PLAIN_MODULE} required username="u" password="p";', sasl_mechanism="PLAIN")
    assert out == {"sasl.mechanism": "PLAIN", "sasl.plain.username": "u", "sasl.plain.password": "p"}
    out = login(f'{SCRAM_MODULE} required username="tok-id" password="aG1hYw==" tokenauth="true";',
                sasl_mechanism="SCRAM-SHA-512")
    assert out["sasl.scram.tokenauth"] is True and kwire_options(out)["sasl_scram_tokenauth"] is True
    assert "sasl.scram.tokenauth" not in login(f'{SCRAM_MODULE} required username="u" password="p" '
                                               'tokenauth=false;', sasl_mechanism="SCRAM-SHA-256")
    refused("tokenauth=true \\(a delegation token\\) needs a SCRAM mechanism",
            f'{SCRAM_MODULE} required username="u" password="{SECRETS[0]}" tokenauth="true";', sasl_mechanism="PLAIN")
    refused("option tokenauth must be true or false",
            f'{SCRAM_MODULE} required username="u" password="p" tokenauth="yes";', sasl_mechanism="SCRAM-SHA-256")
    refused(f"{PLAIN_MODULE} option\\(s\\) tokenauth are not supported",
            f'{PLAIN_MODULE} required username="u" password="p" tokenauth="true";', sasl_mechanism="PLAIN")
    refused("needs password", f'{PLAIN_MODULE} required username="u";', sasl_mechanism="PLAIN")
    refused("needs kafka.sasl.mechanism PLAIN, SCRAM-SHA-256, SCRAM-SHA-512; it is not set \\(Kafka's default is "
            "GSSAPI", f'{PLAIN_MODULE} required username="u" password="{SECRETS[0]}";')
    refused("kafka.sasl.password contradicts kafka.sasl.jaas.config",
            f'{PLAIN_MODULE} required username="u" password="{SECRETS[0]}";', sasl_mechanism="PLAIN",
            sasl_password="other")


# ------------------------------------------------------------ OAUTHBEARER
def test_oidc_client_credentials_as_kafka_writes_them():
    for handler in OIDC_HANDLERS:
        out = login(f'{OAUTH_MODULE} required clientId="kwire" clientSecret="{SECRETS[0]}" scope="kafka" '
                    'extension_logicalCluster="lkc-1" extension_identityPoolId="pool-2";', sasl_mechanism="OAUTHBEARER",
                    sasl_login_callback_handler_class=handler,
                    sasl_oauthbearer_token_endpoint_url="https://idp.example/token")
        assert out == {"sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
                       "sasl.oauthbearer.grant.type": "client_credentials",
                       "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
                       "sasl.oauthbearer.client.id": "kwire", "sasl.oauthbearer.client.secret": SECRETS[0],
                       "sasl.oauthbearer.scope": "kafka",
                       "sasl.oauthbearer.extensions": {"logicalCluster": "lkc-1", "identityPoolId": "pool-2"}}
        cfg = kwire_options(out)
        assert (cfg["sasl_oauthbearer_method"], cfg["sasl_oauthbearer_client_id"]) == ("oidc", "kwire")


def test_oidc_kafka_41_options_and_retrievers():
    """KIP-1139: the client credentials as options (before the JAAS ones, as
    in Kafka), and the JWT bearer grant with kwire's assertion options."""
    base = dict(sasl_mechanism="OAUTHBEARER", sasl_oauthbearer_token_endpoint_url="https://idp.example/token")
    out = login(f'{OAUTH_MODULE} required clientId="old" clientSecret="old-secret";', **base,
                sasl_oauthbearer_jwt_retriever_class="org.apache.kafka.common.security.oauthbearer."
                                                     "ClientCredentialsJwtRetriever",
                **{"sasl_oauthbearer_client_credentials_client_id": "new",
                   "sasl_oauthbearer_client_credentials_client_secret": SECRETS[0]})
    assert (out["sasl.oauthbearer.client.id"], out["sasl.oauthbearer.client.secret"]) == ("new", SECRETS[0])
    assert not any("credentials" in k for k in out)
    out = login(f"{OAUTH_MODULE} required;", **base,
                sasl_oauthbearer_jwt_retriever_class="org.apache.kafka.common.security.oauthbearer."
                                                     "JwtBearerJwtRetriever",
                sasl_oauthbearer_assertion_private_key_file="/keys/assertion.pem",
                sasl_oauthbearer_assertion_claim_iss="svc", sasl_oauthbearer_assertion_claim_sub="svc",
                sasl_oauthbearer_assertion_claim_aud="https://idp.example", sasl_oauthbearer_assertion_algorithm="ES256",
                sasl_oauthbearer_scope="kafka")
    cfg = kwire_options(out)
    assert cfg["sasl_oauthbearer_grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer"
    assert (cfg["sasl_oauthbearer_assertion_private_key_file"], cfg["sasl_oauthbearer_assertion_claim_iss"],
            cfg["sasl_oauthbearer_assertion_algorithm"], cfg["sasl_oauthbearer_scope"]) == (
        "/keys/assertion.pem", "svc", "ES256", "kafka")
    # kwire's own method name chooses OIDC too
    assert login(f'{OAUTH_MODULE} required clientId="c" clientSecret="s";', **base,
                 sasl_oauthbearer_method="oidc")["sasl.oauthbearer.client.id"] == "c"


def test_oidc_refusals_name_the_option():
    base = dict(sasl_mechanism="OAUTHBEARER", sasl_login_callback_handler_class=OIDC)
    jaas = f'{OAUTH_MODULE} required clientId="c" clientSecret="{SECRETS[0]}";'
    refused("needs kafka.sasl.oauthbearer.token.endpoint.url", jaas, **base)
    url = dict(base, sasl_oauthbearer_token_endpoint_url="https://idp.example/token")
    refused("option\\(s\\) unsecuredLoginStringClaim_sub are not supported",
            jaas.replace(";", ' unsecuredLoginStringClaim_sub="a";'), **url)
    refused("kafka.sasl.oauthbearer.jwt.retriever.class=com.example.Mine is not supported by kwire", jaas, **url,
            sasl_oauthbearer_jwt_retriever_class="com.example.Mine")
    refused("a token read from a file \\(FileJwtRetriever\\) is not supported", jaas,
            **dict(url, sasl_oauthbearer_token_endpoint_url="file:/tmp/token.jwt"))
    refused("kafka.sasl.oauthbearer.assertion.template.file is not supported", jaas, **url,
            sasl_oauthbearer_assertion_template_file="/t.json")
    refused("kafka.sasl.oauthbearer.client.secret contradicts clientSecret", jaas, **url,
            sasl_oauthbearer_client_secret="another-secret")
    refused("kafka.sasl.oauthbearer.extensions and extension_<name>", jaas.replace(";", ' extension_a="b";'), **url,
            sasl_oauthbearer_extensions="c=d")
    refused("kafka.sasl.login.callback.handler.class=com.example.TokenHandler is not supported by kwire .*name a "
            "Python token callback with kafka.oauth.cb=module:function", jaas,
            **dict(url, sasl_login_callback_handler_class="com.example.TokenHandler"))
    refused("needs kafka.sasl.mechanism OAUTHBEARER; it is 'PLAIN'", jaas, **dict(url, sasl_mechanism="PLAIN"))
    refused(f"{OAUTH_MODULE} needs a token source", f"{OAUTH_MODULE} required;", sasl_mechanism="OAUTHBEARER")


def test_unsecured_jwts_as_librdkafka_config():
    from kwire.sasl import authenticator

    out = login(f'{OAUTH_MODULE} required unsecuredLoginStringClaim_sub="alice" '
                'unsecuredLoginListClaim_scope="|read|write" unsecuredLoginLifetimeSeconds="120" '
                'unsecuredLoginExtension_traceId="t-1";', sasl_mechanism="OAUTHBEARER")
    assert out == {"sasl.mechanism": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": True,
                   "sasl.oauthbearer.config": "principal=alice scope=read,write lifeSeconds=120",
                   "sasl.oauthbearer.extensions": {"traceId": "t-1"}}
    auth = authenticator(kwire_options(out))
    assert "unsecured JWTs for alice" in repr(auth)
    out = login(f'{OAUTH_MODULE} required unsecuredLoginPrincipalClaimName="user" '
                'unsecuredLoginStringClaim_user="bob" unsecuredLoginScopeClaimName="roles" '
                'unsecuredLoginStringClaim_roles="admin";', sasl_mechanism="OAUTHBEARER")
    assert out["sasl.oauthbearer.config"] == "principal=bob principalClaimName=user scopeClaimName=roles scope=admin"
    jaas = f'{OAUTH_MODULE} required unsecuredLoginStringClaim_sub="alice"'
    refused("option\\(s\\) unsecuredLoginStringClaim_iss are not supported by kwire \\(kwire's unsecured JWTs carry",
            jaas + ' unsecuredLoginStringClaim_iss="me";', sasl_mechanism="OAUTHBEARER")
    refused("option\\(s\\) unsecuredLoginNumberClaim_n are not supported",
            jaas + ' unsecuredLoginNumberClaim_n="1";', sasl_mechanism="OAUTHBEARER")
    refused("need unsecuredLoginStringClaim_sub", f'{OAUTH_MODULE} required unsecuredLoginLifetimeSeconds="5";',
            sasl_mechanism="OAUTHBEARER")
    refused("scope items must be words", jaas + ' unsecuredLoginListClaim_scope=",a b,c";',
            sasl_mechanism="OAUTHBEARER")
    refused("principal must be a word", f'{OAUTH_MODULE} required unsecuredLoginStringClaim_sub="a b";',
            sasl_mechanism="OAUTHBEARER")
    refused("kafka.sasl.oauthbearer.config and unsecuredLogin\\*", jaas + ";", sasl_mechanism="OAUTHBEARER",
            sasl_oauthbearer_config="principal=x")


def test_a_python_token_callback_named_as_module_function(tmp_path, monkeypatch):
    from kwire.sasl import authenticator

    (tmp_path / "kwire_test_tokens.py").write_text(
        "class Provider:\n    @staticmethod\n    def get():\n        return ('a.b.c', 4102444800.0)\n"
        "def token():\n    return ('a.b.c', 4102444800.0)\n"
        "not_callable = 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for spec in ("kwire_test_tokens:token", "kwire_test_tokens:Provider.get"):
        out = login(f'{OAUTH_MODULE} required extension_a="b";', sasl_mechanism="OAUTHBEARER", oauth_cb=spec)
        assert callable(out["oauth.cb"]) and out["sasl.oauthbearer.extensions"] == {"a": "b"}
        assert "token callback (oauth_cb)" in repr(authenticator(kwire_options(out)))
    # without a JAAS entry (kwire's own options) the name is imported too
    assert callable(translate_login({"sasl.mechanism": "OAUTHBEARER", "oauth.cb": "kwire_test_tokens:token"})[
        "oauth.cb"])
    for spec, match in (("kwire_test_tokens", "expected module:function"),
                        ("kwire_no_such_module:token", "cannot import kwire_no_such_module \\(ModuleNotFoundError"),
                        ("kwire_test_tokens:nope", "kwire_test_tokens has no nope"),
                        ("kwire_test_tokens:not_callable",
                         "kwire_test_tokens:not_callable is neither callable nor an object with a token")):
        refused(f"^kafka.oauth.cb: {match}", f"{OAUTH_MODULE} required;", sasl_mechanism="OAUTHBEARER", oauth_cb=spec)
    refused("option\\(s\\) clientId are not supported by kwire with a token callback",
            f'{OAUTH_MODULE} required clientId="c";', sasl_mechanism="OAUTHBEARER", oauth_cb="kwire_test_tokens:token")


# ------------------------------------------------------------ AWS MSK IAM
MSK = "b-1.orders.abc123.c2.kafka.eu-west-1.amazonaws.com:9098,b-2.orders.abc123.c2.kafka.eu-west-1.amazonaws.com:9098"


def test_aws_msk_iam_both_ways_the_library_documents(monkeypatch):
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    monkeypatch.setattr("kwire.sasl.login._botocore_region", lambda params: None)    # no profile's region either
    out = login(f'{IAM_MODULE} required awsProfileName="msk_client";', sasl_mechanism="AWS_MSK_IAM",
                bootstrap_servers=MSK,
                sasl_client_callback_handler_class="software.amazon.msk.auth.iam.IAMClientCallbackHandler")
    assert out == {"bootstrap.servers": MSK, "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "aws_msk_iam",
                   "sasl.oauthbearer.aws.profile": "msk_client", "sasl.oauthbearer.aws.region": "eu-west-1"}
    out = login(f'{OAUTH_MODULE} required awsRoleArn="arn:aws:iam::123456789012:role/msk" '
                'awsRoleSessionName="etl" awsStsRegion="us-east-1" awsMaxRetries="3";', sasl_mechanism="OAUTHBEARER",
                bootstrap_servers="10.0.0.5:9098", sasl_oauthbearer_aws_region="us-west-2",
                sasl_login_callback_handler_class=IAM_OAUTH_HANDLER, sasl_client_callback_handler_class=IAM_OAUTH_HANDLER)
    cfg = kwire_options(out)
    assert (cfg["sasl_oauthbearer_method"], cfg["sasl_oauthbearer_aws_role_arn"],
            cfg["sasl_oauthbearer_aws_role_session_name"], cfg["sasl_oauthbearer_aws_region"]) == (
        "aws_msk_iam", "arn:aws:iam::123456789012:role/msk", "etl", "us-west-2")
    jaas = f"{IAM_MODULE} required;"
    refused("AWS MSK IAM needs the cluster's region: kafka.sasl.oauthbearer.aws.region", jaas,
            sasl_mechanism="AWS_MSK_IAM", bootstrap_servers="10.0.0.5:9098")
    refused("option\\(s\\) awsRoleSecretAccessKey are not supported by kwire", jaas.replace(
        ";", f' awsRoleArn="arn:r" awsRoleSecretAccessKey="{SECRETS[2]}";'), sasl_mechanism="AWS_MSK_IAM",
        bootstrap_servers=MSK)
    refused("option\\(s\\) awsMskRegionProvider are not supported", jaas.replace(";", ' awsMskRegionProvider="x";'),
            sasl_mechanism="AWS_MSK_IAM", bootstrap_servers=MSK)
    refused("needs kafka.sasl.mechanism AWS_MSK_IAM", jaas, sasl_mechanism="OAUTHBEARER", bootstrap_servers=MSK)
    refused("kafka.sasl.client.callback.handler.class=com.example.H is not supported", jaas,
            sasl_mechanism="AWS_MSK_IAM", bootstrap_servers=MSK, sasl_client_callback_handler_class="com.example.H")


def test_aws_region_as_the_sdk_chain_finds_it():
    assert aws_region({"bootstrap.servers": MSK}, {}) == "eu-west-1"
    assert aws_region({"bootstrap.servers": ["boot-x.c1.kafka-serverless.ap-southeast-2.amazonaws.com:9098"]},
                      {}) == "ap-southeast-2"
    assert aws_region({"bootstrap.servers": "b-1.c.kafka.us-gov-west-1.amazonaws.com:9098"}, {}) == "us-gov-west-1"
    assert aws_region({"bootstrap.servers": "10.0.0.5:9098"}, {"AWS_REGION": "us-east-2"}) == "us-east-2"
    assert aws_region({"bootstrap.servers": "10.0.0.5:9098"}, {"AWS_DEFAULT_REGION": "sa-east-1"}) == "sa-east-1"
    assert aws_region({"bootstrap.servers": MSK, "sasl.oauthbearer.aws.region": "us-east-1"}, {}) == "us-east-1"


# --------------------------------------------------------------- Kerberos
def test_krb5_keytab_and_ticket_cache():
    out = login(f'{KRB5_MODULE} required useKeyTab=true storeKey=true keyTab="{SECRETS[1]}" '
                'principal="etl@EXAMPLE.COM";', sasl_kerberos_service_name="kafka")
    assert out == {"sasl.mechanism": "GSSAPI", "sasl.kerberos.service.name": "kafka",
                   "sasl.kerberos.keytab": SECRETS[1], "sasl.kerberos.principal": "etl@EXAMPLE.COM"}
    assert kwire_options(out)["sasl_kerberos_keytab"] == SECRETS[1]
    out = login(f'{KRB5_MODULE} required useTicketCache=true ticketCache="/tmp/krb5cc_etl" serviceName="kafka-prod" '
                "doNotPrompt=true renewTGT=true;", sasl_mechanism="GSSAPI")
    assert out == {"sasl.mechanism": "GSSAPI", "sasl.kerberos.ccache": "/tmp/krb5cc_etl",
                   "sasl.kerberos.service.name": "kafka-prod"}
    keytab = f'{KRB5_MODULE} required useKeyTab=true keyTab="{SECRETS[1]}" principal="p";'
    refused("kafka.sasl.kerberos.service.name contradicts serviceName", keytab.replace(";", ' serviceName="kafka";'),
            sasl_kerberos_service_name="other")
    refused("needs kafka.sasl.mechanism GSSAPI; it is 'PLAIN'", keytab, sasl_mechanism="PLAIN")
    refused("useKeyTab=true needs keyTab", f"{KRB5_MODULE} required useKeyTab=true;")
    refused("keyTab is read only with useKeyTab=true", f'{KRB5_MODULE} required keyTab="{SECRETS[1]}" '
                                                       "useTicketCache=true;")
    refused("needs useKeyTab=true with keyTab, or useTicketCache=true", f'{KRB5_MODULE} required principal="p";')
    refused("option\\(s\\) useFirstPass are not supported", keytab.replace(";", " useFirstPass=true;"))
    refused("kafka.sasl.kerberos.keytab contradicts keyTab", keytab, sasl_kerberos_keytab="/other.keytab")


# --------------------------------------------------------------- the rest
def test_unknown_modules_stray_classes_and_dropped_options():
    text = refused("login module com.example.CustomLoginModule is not supported by kwire \\(only .*PlainLoginModule",
                   f'com.example.CustomLoginModule required password="{SECRETS[0]}";')
    assert "Krb5LoginModule" in text and "IAMLoginModule" in text
    with pytest.raises(ConfigError, match="kafka.sasl.login.callback.handler.class needs kafka.sasl.jaas.config"):
        translate_login({"sasl.login.callback.handler.class": OIDC}, prefix="kafka.")
    refused(f"kafka.sasl.login.callback.handler.class has no meaning with {PLAIN_MODULE}",
            f'{PLAIN_MODULE} required username="u" password="p";', sasl_mechanism="PLAIN",
            sasl_login_callback_handler_class=OIDC)
    out = translate_login({"sasl.oauthbearer.scope.claim.name": "scp", "sasl.kerberos.ticket.renew.jitter": "0.05",
                           "client.id": "x"})
    assert out == {"client.id": "x"}
