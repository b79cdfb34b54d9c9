"""Kafka's Java client SASL login options, as Spark's connector users and
Kafka's tools write them, turned into kwire's (:mod:`kwire.sasl`): used by
:mod:`kwire.spark.security` for the ``kafka.*`` options of the Spark source
and sink, and by the ``kwire`` command (``--command-config``, ``-X``).

:func:`translate_login` takes the options with Kafka's dotted names (lower
case) and replaces ``sasl.jaas.config`` (:func:`kwire.sasl.jaas.parse_jaas`) and
the Java classes that go with it:

=====================================================  ==============================================
Java                                                   kwire
=====================================================  ==============================================
``PlainLoginModule``, ``ScramLoginModule``:            ``sasl.plain.username``, ``sasl.plain.password``;
``username``, ``password``; ``tokenauth="true"``       ``sasl.scram.tokenauth`` (delegation tokens)
``OAuthBearerLoginModule`` with                        ``sasl.oauthbearer.method=oidc``:
``sasl.login.callback.handler.class=                   ``sasl.oauthbearer.client.id``, ``.client.secret``,
...OAuthBearerLoginCallbackHandler``: ``clientId``,    ``.scope``, ``.extensions``
``clientSecret``, ``scope``, ``extension_<name>``
(or ``sasl.oauthbearer.client.credentials.client.id``
and ``.client.secret``, ``sasl.oauthbearer.scope``)
``sasl.oauthbearer.jwt.retriever.class=``              ``sasl.oauthbearer.grant.type`` ``client_credentials``
``ClientCredentialsJwtRetriever`` /                    / ``urn:ietf:params:oauth:grant-type:jwt-bearer``
``JwtBearerJwtRetriever`` (KIP-1139)                   (``sasl.oauthbearer.assertion.*`` as they are)
``OAuthBearerLoginModule``:                            ``enable.sasl.oauthbearer.unsecure.jwt=true``,
``unsecuredLoginStringClaim_sub``,                     ``sasl.oauthbearer.config`` ``principal=... scope=...
``unsecuredLoginListClaim_scope``,                     lifeSeconds=...``, ``sasl.oauthbearer.extensions``
``unsecuredLoginLifetimeSeconds``,
``unsecuredLoginExtension_<name>``
``OAuthBearerLoginModule`` with ``oauth.cb``           ``oauth_cb``, the Python token callback named
(kwire's: ``module:function``)                         (imported in the process that makes the client)
``IAMLoginModule`` (``sasl.mechanism=AWS_MSK_IAM``),   ``sasl.mechanism=OAUTHBEARER``,
or ``OAuthBearerLoginModule`` with                     ``sasl.oauthbearer.method=aws_msk_iam``,
``IAMOAuthBearerLoginCallbackHandler``:                ``.aws.profile``, ``.aws.role.arn``,
``awsProfileName``, ``awsRoleArn``,                    ``.aws.role.session.name``, ``.aws.region``
``awsRoleSessionName``
``Krb5LoginModule``: ``useKeyTab``, ``keyTab``,        ``sasl.mechanism=GSSAPI``, ``sasl.kerberos.keytab``,
``principal``, ``useTicketCache``, ``ticketCache``,    ``.principal``, ``.ccache``, ``.service.name``
``serviceName``
=====================================================  ==============================================

AWS MSK IAM's region, as AWS's Java library finds it: kwire's
``sasl.oauthbearer.aws.region`` if given, else the region in the bootstrap
servers' names (``b-1.<cluster>...kafka.<region>.amazonaws.com``), else the
AWS SDK's default chain (``AWS_REGION``, ``AWS_DEFAULT_REGION``, the
profile's ``region`` through botocore when it is installed). The library's
other options change nothing in kwire and are dropped (``awsStsRegion``:
kwire's signer assumes a role through the cluster region's STS;
``awsDebugCreds``, ``awsMaxRetries``, ``awsMaxBackOffTimeMs``,
``awsAddDefaultProviders``); role keys given inline and custom region
providers are refused.

Everything else is refused with a :class:`~kwire.config.ConfigError` that
names the option (with the caller's ``prefix``, e.g. ``kafka.``) and never
shows a secret, a password or a keytab's path: another login module,
another callback handler or retriever class (a Java class cannot run here:
name a Python token callback with ``oauth.cb``), JAAS options kwire would not
act on, contradicting settings, and options that have no meaning without a
JAAS entry.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any, Callable, Dict, Iterable, Optional

from kwire.config import ConfigError, canonical_name, named_callback
from kwire.sasl.jaas import JaasEntry, parse_jaas

__all__ = ["translate_login", "named_callback", "aws_region", "LOGIN_KEYS", "PLAIN_MODULE", "SCRAM_MODULE",
           "OAUTH_MODULE", "KRB5_MODULE", "IAM_MODULE"]

log = logging.getLogger(__name__)

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
KRB5_MODULE = "com.sun.security.auth.module.Krb5LoginModule"
IAM_MODULE = "software.amazon.msk.auth.iam.IAMLoginModule"
_OAUTH = "org.apache.kafka.common.security.oauthbearer."
OIDC_HANDLERS = (_OAUTH + "OAuthBearerLoginCallbackHandler", _OAUTH + "secured.OAuthBearerLoginCallbackHandler")
UNSECURED_HANDLER = _OAUTH + "internals.unsecured.OAuthBearerUnsecuredLoginCallbackHandler"
IAM_OAUTH_HANDLER = "software.amazon.msk.auth.iam.IAMOAuthBearerLoginCallbackHandler"
IAM_CLIENT_HANDLER = "software.amazon.msk.auth.iam.IAMClientCallbackHandler"
_DEFAULT_CLIENT_HANDLER = "org.apache.kafka.common.security.authenticator.SaslClientCallbackHandler"
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
#: ``sasl.oauthbearer.jwt.retriever.class`` -> kwire's grant (another class is refused).
_RETRIEVERS = {_OAUTH + "DefaultJwtRetriever": "client_credentials",
               _OAUTH + "ClientCredentialsJwtRetriever": "client_credentials",
               _OAUTH + "JwtBearerJwtRetriever": JWT_BEARER}
_PASSWORD_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_LOGIN_HANDLER = "sasl.login.callback.handler.class"
_CLIENT_HANDLER = "sasl.client.callback.handler.class"
_RETRIEVER = "sasl.oauthbearer.jwt.retriever.class"
_CC_ID = "sasl.oauthbearer.client.credentials.client.id"
_CC_SECRET = "sasl.oauthbearer.client.credentials.client.secret"

#: The Kafka (Java client) keys :func:`translate_login` takes away.
LOGIN_KEYS = frozenset({"sasl.jaas.config", _LOGIN_HANDLER, _CLIENT_HANDLER, _RETRIEVER, _CC_ID, _CC_SECRET})
#: Kafka options that change nothing in kwire (the client-side checks of the token a
#: Java client gets; the Kerberos renewal timing kwire takes from the ticket): dropped.
_NO_EFFECT = frozenset({"sasl.oauthbearer.jwt.validator.class", "sasl.oauthbearer.scope.claim.name",
                        "sasl.oauthbearer.sub.claim.name", "sasl.oauthbearer.clock.skew.seconds",
                        "sasl.oauthbearer.expected.audience", "sasl.oauthbearer.expected.issuer",
                        "sasl.kerberos.ticket.renew.window.factor", "sasl.kerberos.ticket.renew.jitter"})


class _Login:
    """The options being translated, the JAAS entry, and the names errors use."""

    def __init__(self, params: Dict[str, Any], entry: JaasEntry, prefix: str) -> None:
        self.params = params
        self.entry = entry
        self.opts = dict(entry.options)
        self.prefix = prefix
        self.jaas = f"{prefix}sasl.jaas.config"

    def error(self, text: str) -> ConfigError:
        return ConfigError(f"{self.jaas}: {text}")

    def name(self, key: str) -> str:
        return f"{self.prefix}{key}"

    def mechanism(self) -> Optional[str]:
        value = self.params.get("sasl.mechanism", self.params.get("sasl.mechanisms"))
        return None if value is None else str(value).strip().upper()

    def need_mechanism(self, allowed: Iterable[str], unset_is: Optional[str] = None) -> str:
        """The mechanism, which must be one of ``allowed`` (``unset_is`` when not given)."""
        allowed = tuple(allowed)
        mechanism = self.mechanism() or unset_is
        if mechanism not in allowed:
            given = self.mechanism()
            shown = "not set (Kafka's default is GSSAPI, Kerberos)" if given is None else repr(given)
            raise ConfigError(f"{self.jaas} with {self.entry.module} needs {self.name('sasl.mechanism')} "
                              f"{', '.join(allowed)}; it is {shown}")
        return mechanism

    def set_mechanism(self, mechanism: str) -> None:
        self.params.pop("sasl.mechanisms", None)
        self.params["sasl.mechanism"] = mechanism

    def only(self, allowed: Iterable[str], prefixes: Iterable[str] = (), what: str = "") -> None:
        """Refuse the JAAS options that are neither ``allowed`` nor start with one of ``prefixes``."""
        allowed, prefixes = set(allowed), tuple(prefixes)
        unknown = sorted(k for k in self.opts if k not in allowed and not k.startswith(prefixes))
        if unknown:
            raise self.error(f"{self.entry.module} option(s) {', '.join(unknown)} are not supported by kwire"
                             f"{what}")

    def flag(self, key: str) -> bool:
        raw = self.opts.get(key, "false").strip().lower()
        if raw not in ("true", "false"):
            raise self.error(f"{self.entry.module} option {key} must be true or false")
        return raw == "true"

    def put(self, key: str, value: Any, jaas_option: str) -> None:
        """Set kwire's ``key`` from a JAAS option, unless the same option is
        already given otherwise with another value (never shown)."""
        given = self.params.get(key)
        if given is not None and (str(given).strip().lower() != str(value).lower() if isinstance(value, bool)
                                  else given != value):
            raise ConfigError(f"{self.name(key)} contradicts {jaas_option} in {self.jaas}")
        self.params[key] = value

    def pop_class(self, key: str) -> Optional[str]:
        value = self.params.pop(key, None)
        return None if value is None else str(value).strip()

    def refuse_class(self, key: str, value: str, hint: str = "") -> ConfigError:
        return ConfigError(f"{self.name(key)}={value} is not supported by kwire (a Java class cannot run here)"
                           f"{hint}")


# ----------------------------------------------------------- PLAIN, SCRAM
def _password(j: _Login) -> None:
    """``username`` and ``password`` as kwire's; SCRAM's ``tokenauth``."""
    scram = j.entry.module == SCRAM_MODULE
    j.only(("username", "password", "tokenauth") if scram else ("username", "password"),
           what=f" (only username, password{', tokenauth' if scram else ''})")
    missing = [k for k in ("username", "password") if k not in j.opts]
    if missing:
        raise j.error(f"{j.entry.module} needs {' and '.join(missing)}")
    mechanism = j.need_mechanism(_PASSWORD_MECHANISMS)
    for key, value in (("sasl.username", j.opts["username"]), ("sasl.password", j.opts["password"])):
        for given in (key, key.replace("sasl.", "sasl.plain.")):
            if given in j.params and j.params[given] != value:
                raise ConfigError(f"{j.name(given)} contradicts {j.jaas}")
            j.params.pop(given, None)
    j.params["sasl.plain.username"] = j.opts["username"]
    j.params["sasl.plain.password"] = j.opts["password"]
    if j.flag("tokenauth"):
        if mechanism == "PLAIN":
            raise j.error("tokenauth=true (a delegation token) needs a SCRAM mechanism")
        j.put("sasl.scram.tokenauth", True, "tokenauth")


# ------------------------------------------------------------ OAUTHBEARER
def _oauthbearer(j: _Login) -> None:
    """``OAuthBearerLoginModule``: which token source its classes and options choose."""
    j.need_mechanism(("OAUTHBEARER",))
    login, client = j.pop_class(_LOGIN_HANDLER), j.pop_class(_CLIENT_HANDLER)
    if client not in (None, _DEFAULT_CLIENT_HANDLER, IAM_OAUTH_HANDLER):
        raise j.refuse_class(_CLIENT_HANDLER, client)
    method = str(j.params.get("sasl.oauthbearer.method", "")).strip().lower()
    if IAM_OAUTH_HANDLER in (login, client) or method == "aws_msk_iam":
        if login not in (None, IAM_OAUTH_HANDLER):
            raise j.refuse_class(_LOGIN_HANDLER, login, f" with {IAM_OAUTH_HANDLER}")
        _aws(j)
    elif login in OIDC_HANDLERS or j.params.get(_RETRIEVER) is not None or method == "oidc":
        _oidc(j)
    elif login not in (None, UNSECURED_HANDLER):
        raise j.refuse_class(_LOGIN_HANDLER, login, f"; name a Python token callback with {j.name('oauth.cb')}="
                                                    "module:function")
    elif any(k.startswith("unsecuredLogin") for k in j.opts):
        _unsecured(j)
    elif any(canonical_name(k) == "oauth_cb" for k in j.params):
        j.only((), ("extension_",), " with a token callback (only extension_<name>)")
        _extensions(j, "extension_")
    else:
        raise j.error(f"{OAUTH_MODULE} needs a token source: {j.name(_LOGIN_HANDLER)}={OIDC_HANDLERS[0]} (OIDC) or "
                      f"{IAM_OAUTH_HANDLER} (AWS MSK IAM), unsecuredLoginStringClaim_sub (development), or a Python "
                      f"token callback {j.name('oauth.cb')}=module:function")


def _extensions(j: _Login, prefix: str) -> None:
    """JAAS options ``<prefix><name>`` as ``sasl.oauthbearer.extensions`` (KIP-342)."""
    ext = {k[len(prefix):]: v for k, v in j.opts.items() if k.startswith(prefix)}
    if not ext:
        return
    if j.params.get("sasl.oauthbearer.extensions") not in (None, ""):
        raise ConfigError(f"{j.name('sasl.oauthbearer.extensions')} and {prefix}<name> in {j.jaas}: give SASL "
                          "extensions in one of them")
    j.params["sasl.oauthbearer.extensions"] = ext


def _oidc(j: _Login) -> None:
    """KIP-768 (and KIP-1139's retrievers) as ``sasl.oauthbearer.method=oidc``."""
    j.only(("clientId", "clientSecret", "scope"), ("extension_",), " (only clientId, clientSecret, scope and "
                                                                   "extension_<name>)")
    retriever = j.pop_class(_RETRIEVER)
    grant = _RETRIEVERS.get(retriever or _OAUTH + "DefaultJwtRetriever")
    if grant is None:
        raise j.refuse_class(_RETRIEVER, str(retriever))
    url = j.params.get("sasl.oauthbearer.token.endpoint.url")
    if not url:
        raise ConfigError(f"{j.jaas} with {OIDC_HANDLERS[0]} needs {j.name('sasl.oauthbearer.token.endpoint.url')}")
    if str(url).strip().lower().startswith("file:"):
        raise ConfigError(f"{j.name('sasl.oauthbearer.token.endpoint.url')}: a token read from a file "
                          "(FileJwtRetriever) is not supported by kwire; name a Python token callback with "
                          f"{j.name('oauth.cb')}=module:function")
    if "sasl.oauthbearer.assertion.template.file" in j.params:
        raise ConfigError(f"{j.name('sasl.oauthbearer.assertion.template.file')} is not supported by kwire: set "
                          "the assertion's claims with sasl.oauthbearer.assertion.claim.iss, .sub and .aud")
    # Kafka 4.1's options come before the JAAS options they replace, as in Kafka
    for kafka_key, jaas_key, key in ((_CC_ID, "clientId", "sasl.oauthbearer.client.id"),
                                     (_CC_SECRET, "clientSecret", "sasl.oauthbearer.client.secret"),
                                     ("sasl.oauthbearer.scope", "scope", "sasl.oauthbearer.scope")):
        value, source = j.params.pop(kafka_key, None), j.name(kafka_key)
        if value is None:
            value, source = j.opts.get(jaas_key), jaas_key
        if value is not None:
            j.put(key, value, source)
    _extensions(j, "extension_")
    j.params["sasl.oauthbearer.method"] = "oidc"
    j.params.setdefault("sasl.oauthbearer.grant.type", grant)


def _unsecured(j: _Login) -> None:
    """Kafka's unsecured JWT options as librdkafka's ``sasl.oauthbearer.config``."""
    pc = j.opts.get("unsecuredLoginPrincipalClaimName", "sub")
    sc = j.opts.get("unsecuredLoginScopeClaimName", "scope")
    strings = {f"unsecuredLoginStringClaim_{pc}", f"unsecuredLoginStringClaim_{sc}"}
    j.only(strings | {f"unsecuredLoginListClaim_{sc}", "unsecuredLoginPrincipalClaimName",
                      "unsecuredLoginScopeClaimName", "unsecuredLoginLifetimeSeconds"},
           ("unsecuredLoginExtension_",), f" (kwire's unsecured JWTs carry the principal ({pc}), the scope ({sc}), "
                                          "iat and exp)")
    principal = j.opts.get(f"unsecuredLoginStringClaim_{pc}")
    if not principal:
        raise j.error(f"unsecured JWTs need unsecuredLoginStringClaim_{pc} (the principal)")
    scope = [j.opts[f"unsecuredLoginStringClaim_{sc}"]] if f"unsecuredLoginStringClaim_{sc}" in j.opts else []
    listed = j.opts.get(f"unsecuredLoginListClaim_{sc}", "")
    scope += [s for s in listed[1:].split(listed[:1]) if s] if listed else []
    if any(not s or re.search(r"[\s,]", s) for s in scope):
        raise j.error("unsecured JWTs: scope items must be words without white space or commas")
    words = {"principal": principal, "principalClaimName": pc if pc != "sub" else None,
             "scopeClaimName": sc if sc != "scope" else None, "scope": ",".join(scope) or None,
             "lifeSeconds": j.opts.get("unsecuredLoginLifetimeSeconds")}
    for word, value in words.items():
        if value is not None and (not value or re.search(r"\s", value)):
            raise j.error(f"unsecured JWTs: {word} must be a word without white space")
    if j.params.get("sasl.oauthbearer.config") not in (None, ""):
        raise ConfigError(f"{j.name('sasl.oauthbearer.config')} and unsecuredLogin* in {j.jaas}: give the unsecured "
                          "JWT's settings in one of them")
    j.params["enable.sasl.oauthbearer.unsecure.jwt"] = True
    j.params["sasl.oauthbearer.config"] = " ".join(f"{k}={v}" for k, v in words.items() if v is not None)
    _extensions(j, "unsecuredLoginExtension_")


# ------------------------------------------------------------ AWS MSK IAM
_AWS_OPTIONS = {"awsProfileName": "sasl.oauthbearer.aws.profile", "awsRoleArn": "sasl.oauthbearer.aws.role.arn",
                "awsRoleSessionName": "sasl.oauthbearer.aws.role.session.name"}
#: Options of AWS's Java library that change nothing in kwire (see the module doc).
_AWS_NO_EFFECT = ("awsStsRegion", "awsDebugCreds", "awsMaxRetries", "awsMaxBackOffTimeMs", "awsAddDefaultProviders")


def _iam_module(j: _Login) -> None:
    """AWS's ``IAMLoginModule`` (mechanism ``AWS_MSK_IAM``): kwire signs the
    same token and sends it over OAUTHBEARER, which MSK's IAM listeners take too."""
    j.need_mechanism(("AWS_MSK_IAM",))
    client = j.pop_class(_CLIENT_HANDLER)
    if client not in (None, IAM_CLIENT_HANDLER):
        raise j.refuse_class(_CLIENT_HANDLER, client, f" with {IAM_MODULE}")
    _aws(j)


def _aws(j: _Login) -> None:
    j.only(tuple(_AWS_OPTIONS) + _AWS_NO_EFFECT, what=f" (only {', '.join(_AWS_OPTIONS)}; inline role keys: use "
                                                      "a profile)")
    for option, key in _AWS_OPTIONS.items():
        if option in j.opts:
            j.put(key, j.opts[option], option)
    j.set_mechanism("OAUTHBEARER")
    j.params["sasl.oauthbearer.method"] = "aws_msk_iam"
    region = aws_region(j.params)
    if region is None:
        raise ConfigError(f"{j.jaas}: AWS MSK IAM needs the cluster's region: {j.name('sasl.oauthbearer.aws.region')}"
                          ", bootstrap servers named ...kafka.<region>.amazonaws.com, or AWS_REGION")
    j.params["sasl.oauthbearer.aws.region"] = region


_REGION = re.compile(r"^(?:[a-z]{2}|us-gov|us-iso[a-z]?|eu-iso[a-z]?)-[a-z]+-\d+$")


def aws_region(params: Dict[str, Any], environ: Optional[Dict[str, str]] = None) -> Optional[str]:
    """The MSK cluster's region (see the module doc), or None."""
    given = params.get("sasl.oauthbearer.aws.region")
    if given:
        return str(given)
    servers = params.get("bootstrap.servers") or ""
    for server in servers if isinstance(servers, (list, tuple)) else str(servers).split(","):
        for label in str(server).strip().rsplit(":", 1)[0].lower().split("."):
            if _REGION.match(label):
                return label
    env = os.environ if environ is None else environ
    return env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or _botocore_region(params)


def _botocore_region(params: Dict[str, Any]) -> Optional[str]:
    """The AWS profile's region, when botocore (``kwire[aws]``) is installed."""
    try:
        import botocore.session
    except ImportError:
        return None
    try:
        return botocore.session.Session(profile=params.get("sasl.oauthbearer.aws.profile")).get_config_variable(
            "region")
    except Exception:                # a missing profile: no region from it
        return None


# --------------------------------------------------------------- Kerberos
def _krb5(j: _Login) -> None:
    """``Krb5LoginModule``'s keytab or ticket cache as kwire's GSSAPI options."""
    j.only(("useKeyTab", "keyTab", "principal", "storeKey", "useTicketCache", "ticketCache", "serviceName",
            "doNotPrompt", "renewTGT", "isInitiator", "refreshKrb5Config", "debug"))
    j.need_mechanism(("GSSAPI",), unset_is="GSSAPI")
    j.set_mechanism("GSSAPI")
    keytab, cache = j.flag("useKeyTab"), j.flag("useTicketCache")
    if j.opts.get("isInitiator", "true").strip().lower() != "true":
        raise j.error(f"{KRB5_MODULE} option isInitiator must be true for a client")
    if keytab != ("keyTab" in j.opts):
        raise j.error("useKeyTab=true needs keyTab (the client's keytab)" if keytab else
                      "keyTab is read only with useKeyTab=true")
    if "ticketCache" in j.opts and not cache:
        raise j.error("ticketCache is read only with useTicketCache=true")
    if not keytab and not cache:
        raise j.error(f"{KRB5_MODULE} needs useKeyTab=true with keyTab, or useTicketCache=true (a job cannot "
                      "prompt for a password)")
    if keytab:
        j.put("sasl.kerberos.keytab", j.opts["keyTab"], "keyTab")
    if "ticketCache" in j.opts:
        j.put("sasl.kerberos.ccache", j.opts["ticketCache"], "ticketCache")
    if "principal" in j.opts:
        j.put("sasl.kerberos.principal", j.opts["principal"], "principal")
    if "serviceName" in j.opts:
        j.put("sasl.kerberos.service.name", j.opts["serviceName"], "serviceName")


_MODULES: Dict[str, Callable[[_Login], None]] = {
    PLAIN_MODULE: _password, SCRAM_MODULE: _password, OAUTH_MODULE: _oauthbearer, IAM_MODULE: _iam_module,
    KRB5_MODULE: _krb5}


# ---------------------------------------------------------- the callback
def _callbacks(params: Dict[str, Any], prefix: str) -> None:
    """A token callback named as ``module:function`` (``oauth.cb``), imported."""
    for key, value in list(params.items()):
        if isinstance(value, str) and canonical_name(key) == "oauth_cb":
            params[key] = named_callback(value, f"{prefix}{key}")


# ------------------------------------------------------------------ entry
def translate_login(params: Dict[str, Any], prefix: str = "") -> Dict[str, Any]:
    """``params`` (Kafka's dotted names, lower case) with the Java login
    options replaced by kwire's (see the module doc); errors name the
    options with ``prefix`` before them."""
    out = dict(params)
    _callbacks(out, prefix)
    for key in _NO_EFFECT & set(out):
        log.debug("%s%s has no effect in kwire: dropped", prefix, key)
        del out[key]
    if "sasl.jaas.config" not in out:
        stray = sorted(LOGIN_KEYS & set(out))
        if stray:
            raise ConfigError(f"{prefix}{stray[0]} needs {prefix}sasl.jaas.config (its login module entry)")
        return out
    entry = parse_jaas(str(out.pop("sasl.jaas.config")), f"{prefix}sasl.jaas.config")
    translate = _MODULES.get(entry.module)
    if translate is None:
        raise ConfigError(f"{prefix}sasl.jaas.config: login module {entry.module} is not supported by kwire (only "
                          f"{', '.join(_MODULES)})")
    login = _Login(out, entry, prefix)
    translate(login)
    stray = sorted(LOGIN_KEYS & set(out))
    if stray:
        raise ConfigError(f"{prefix}{stray[0]} has no meaning with {entry.module} in {prefix}sasl.jaas.config")
    return out
