"""Kafka's Java security options, as Spark's connector users write them,
turned into kwire's: ``kafka.sasl.jaas.config`` with the classes and
options that go with it, and the TLS key and trust stores
(``kafka.ssl.keystore.*``, ``kafka.ssl.truststore.*``,
``kafka.ssl.key.password``). Both run in every process that makes a client
(the driver, each executor's Python worker), from the options as given:
nothing but those strings is shipped.

SASL: translated by :mod:`kwire.sasl.login` (its module doc has the table):
the Plain and SCRAM modules (with SCRAM's ``tokenauth="true"``, delegation
tokens), ``OAuthBearerLoginModule`` (OIDC with Kafka's callback handler and
KIP-1139's retrievers, unsecured JWTs, AWS MSK IAM's callback handler),
AWS's ``IAMLoginModule`` (``kafka.sasl.mechanism=AWS_MSK_IAM``, sent as
OAUTHBEARER) and ``Krb5LoginModule`` (GSSAPI: a keytab or a ticket cache).
Any other login module or Java class is refused, naming it; errors name the
``kafka.*`` option (:class:`SparkOptionError`), never a secret or a path.

A Python token callback for OAUTHBEARER is named, since a function cannot
be an option's value: ``kafka.oauth.cb=mypackage.tokens:get_token`` (kwire's
``oauth_cb``, as ``module:function``), imported in each process (ship the
module with ``--py-files``). It returns ``(token, expiry in epoch seconds)``
or a JWT; taking one argument, it gets ``kafka.sasl.oauthbearer.config``.

Kerberos keytabs ship with the job, as the connector's users do:
``--files kafka.keytab`` (``spark.files``) and ``keyTab="./kafka.keytab"``.
In each process the keytab is looked up as named (relative to the working
directory), then in the job's files (``SparkFiles``' root: by the same
relative path, then by its file name), and the client gets the absolute
path found; a keytab found nowhere is refused on the driver, before any
task runs, as "the keytab named in kafka.sasl.jaas.config" (its path never
appears in an error or a log line).

TLS stores: read by kwire's core (:mod:`kwire.stores`, Kafka's semantics,
as for every kwire client: JKS and JCEKS converted by the JDK's
``keytool``, PKCS12 read by ``cryptography``, PEM as it is), here in the
process that translates the options, so that errors name the ``kafka.*``
option (as :class:`SparkOptionError`) and the options handed on are
kwire's PEM ones: ``ssl.ca.location``, ``ssl.certificate.location``,
``ssl.key.location`` (private files, converted once per process for an
unchanged store) and ``ssl.key.password`` for a PEM key. On a cluster each
executor needs the store at the configured path, as the JVM connector's
executors do.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Dict, List, Mapping, Optional

from kwire.config import PEM_OPTION_NAMES, ConfigError, canonical_name
from kwire.sasl.jaas import JaasEntry, parse_jaas
from kwire.sasl.login import LOGIN_KEYS, translate_login
from kwire.spark.errors import SparkOptionError
from kwire.stores import STORE_OPTIONS, pem_files

STREAMING_PLANNER_DIR = "streaming_job"

__all__ = ["JaasEntry", "parse_jaas", "translate_security", "find_job_file", "SECURITY_KEYS"]

#: The Kafka (Java client) keys this module turns into kwire's options.
SECURITY_KEYS = LOGIN_KEYS | frozenset({
    "ssl.truststore.location", "ssl.truststore.type", "ssl.truststore.password",
    "ssl.keystore.location", "ssl.keystore.type", "ssl.keystore.password", "ssl.key.password",
})


# ------------------------------------------------------------------ SASL
def _sasl(params: Dict[str, Any]) -> Dict[str, Any]:
    """The Java login options as kwire's (:func:`kwire.sasl.login.translate_login`),
    a keytab found in this process."""
    given_keytab = "sasl.kerberos.keytab" in params
    _job_files_importable()          # a token callback named module:function may be a job's Python file
    try:
        out = translate_login(params, prefix="kafka.")
    except ConfigError as e:
        raise SparkOptionError(str(e)) from None
    keytab = out.get("sasl.kerberos.keytab")
    if keytab is not None:
        found = find_job_file(str(keytab))
        if found is None:
            what = ("kafka.sasl.kerberos.keytab" if given_keytab
                    else "the keytab named in kafka.sasl.jaas.config")
            raise SparkOptionError(f"{what} is not in this process's working directory nor among the job's "
                                   "files (ship it with --files / spark.files, and name it by its file name)")
        out["sasl.kerberos.keytab"] = found
    return out


def find_job_file(path: str) -> Optional[str]:
    """The absolute path of ``path`` in this process: as given (relative to
    the working directory), else in the job's files (``SparkFiles``' root,
    where ``--files`` / ``spark.files`` put them on the driver and on every
    executor) under the same relative path or its file name; None if none is
    a file."""
    candidates = [path]
    for root in _job_file_dirs():
        candidates += [os.path.join(root, p) for p in ((path, os.path.basename(path))
                                                       if not os.path.isabs(path) else (os.path.basename(path),))]
    for candidate in candidates:
        if os.path.isfile(candidate):
            return os.path.abspath(candidate)
    return None


def _job_file_dirs() -> List[str]:
    """Where the job's files are in this process: SparkFiles' root (driver or
    Python worker), or none. A streaming query's planner (PySpark 4's
    ``python_streaming_source_runner``, which makes the source's offset
    reader on the driver) is told a ``streaming_job`` directory below that
    root, which Spark never fills: the files are in the root itself."""
    try:
        from pyspark import SparkFiles

        root = SparkFiles.getRootDirectory()
    except Exception:        # no SparkContext here (a Spark Connect client, a plain Python process)
        return []
    if not root:
        return []
    dirs = [root]
    if os.path.basename(os.path.normpath(root)) == STREAMING_PLANNER_DIR and not os.path.isdir(root):
        dirs.append(os.path.dirname(os.path.normpath(root)))
    return dirs


def _job_files_importable() -> None:
    """The job's Python files (``--py-files``) importable in this process,
    as Spark makes them in its workers (and not in a streaming planner)."""
    for d in _job_file_dirs():
        if os.path.isdir(d) and d not in sys.path:
            sys.path.insert(1, d)


# ------------------------------------------------------------ key stores
def _stores(params: Dict[str, Any]) -> Dict[str, Any]:
    """The store options as kwire's ``ssl.ca.location`` /
    ``ssl.certificate.location`` / ``ssl.key.location`` /
    ``ssl.key.password``, converted by :func:`kwire.stores.pem_files` in
    this process (once per process for an unchanged store)."""
    names = {key: canonical_name(key) for key in params}
    if not any(name in STORE_OPTIONS for name in names.values()):
        return params
    try:
        files = pem_files({names[key]: value for key, value in params.items()}, prefix="kafka.")
    except ConfigError as e:
        raise SparkOptionError(str(e)) from None
    out = {k: v for k, v in params.items() if names[k] not in STORE_OPTIONS and names[k] not in PEM_OPTION_NAMES}
    for name, key in PEM_OPTION_NAMES.items():
        value = getattr(files, name[len("ssl_"):])
        if value is not None:
            out[key] = value
    return out


def translate_security(params: Mapping[str, Any]) -> Dict[str, Any]:
    """``params`` (``kafka.*`` options, prefix removed, keys lower case)
    with the JAAS config and the key/trust store options replaced by
    kwire's options; raises :class:`SparkOptionError` naming the option."""
    return _stores(_sasl(dict(params)))
