"""The schema registry client: Confluent's REST API (Apicurio's
``/apis/ccompat/v7`` is the same API) on httpx.

``SchemaRegistryClient({"url": "http://registry:8081", ...})`` takes
Confluent's option names (:mod:`kwire.registry.options`) and has
confluent-kafka's ``SchemaRegistryClient`` methods and parameters: schemas
by id, subjects and versions, registering and looking up, deleting,
compatibility levels and checks, and :meth:`resolve_references` (a schema's
imports, recursively, for the Avro and Protobuf formats).

Each call is written once, as steps (:mod:`kwire.registry.steps`): this
class runs them blocking on an ``httpx.Client``; ``kwire.aio``'s
:class:`~kwire.registry.aio.AsyncSchemaRegistryClient` awaits the very
same steps (``SchemaRegistryClient.<name>.steps``) on an
``httpx.AsyncClient``. What they share is everything but the I/O:

- **Deadline**: a call returns or raises within ``timeout`` seconds, its
  retries, backoffs and token fetch included: each request's connect and
  read timeouts are the time left, its answer is read chunk by chunk
  against the deadline, and no backoff is waited past it. (A server that
  trickles its answer a byte at a time can hold a blocking call for one
  more socket read, at most the time that was left when the request was
  sent; the asyncio client's bound is exact.)
- **Retries**: a request that got no answer, or 429 or a 5xx, goes to the
  next URL of ``url`` at once; once every URL failed, it waits (full jitter:
  up to ``retries.wait.ms`` doubled per retry, at most
  ``retries.max.wait.ms``) and tries them all again, ``max.retries`` times.
  The URL that answered last is tried first next time. Any other answer is
  an error at once.
- **Caches** (:mod:`kwire.registry.cache`): bounded, thread-safe.
- **Errors**: :class:`~kwire.registry.errors.SchemaRegistryError`, without
  secrets.

The client is thread-safe.
"""

from __future__ import annotations

import functools
import json
import os
import random
import ssl
import threading
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, ParamSpec, TypeVar, Union
from urllib.parse import quote

from kwire import __version__
from kwire.config import ConfigError
from kwire.registry.auth import Credentials
from kwire.registry.cache import Caches
from kwire.registry.errors import UNKNOWN, MalformedAnswer, SchemaRegistryError
from kwire.registry.options import Options, parse
from kwire.registry.schema import RegisteredSchema, Schema
from kwire.registry.steps import Answer, Body, Pause, Send, StepsOf, httpx

__all__ = ["SchemaRegistryClient", "MAX_REFERENCES"]

P = ParamSpec("P")
R = TypeVar("R")

#: A schema importing more schemas than this (its references, recursively) is refused.
MAX_REFERENCES = 1000
_HEADERS = {"Accept": "application/vnd.schemaregistry.v1+json, application/vnd.schemaregistry+json, "
                      "application/json",
            "User-Agent": f"kwire/{__version__}"}
_BODY_HEADERS = {"Content-Type": "application/vnd.schemaregistry.v1+json"}


def waits(fn: Callable[P, StepsOf[R]]) -> Callable[P, R]:
    """A registry call written as steps: the client's method runs them
    blocking; ``AsyncSchemaRegistryClient`` awaits them (``<method>.steps``)."""
    @functools.wraps(fn)
    def blocking(self: "SchemaRegistryClient", *args: Any, **kwargs: Any) -> Any:
        return self._run(fn(self, *args, **kwargs))

    blocking.steps = fn        # type: ignore[attr-defined]
    return blocking            # type: ignore[return-value]


def _tls(o: Options) -> Union[bool, ssl.SSLContext]:
    """httpx's ``verify``: True (its default CAs) or a context with the CA and client certificate asked for."""
    if o.ca is None and o.certificate is None:
        return True
    try:
        if o.ca is None:
            ctx = httpx.create_ssl_context()
        elif os.path.isdir(o.ca):
            ctx = ssl.create_default_context(capath=o.ca)
        else:
            ctx = ssl.create_default_context(cafile=o.ca)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"ssl.ca.location {o.ca} is not a CA file or directory kwire can read "
                          f"({type(e).__name__})") from None
    if o.certificate is not None:
        try:
            ctx.load_cert_chain(o.certificate, o.key, o.key_password)
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(f"ssl.certificate.location {o.certificate} / ssl.key.location {o.key}: not a "
                              f"certificate and key kwire can read, or the wrong ssl.key.password "
                              f"({type(e).__name__})") from None
    return ctx




def _jitter(o: Options, attempt: int) -> float:
    """Seconds before retry ``attempt`` + 1: full jitter under an exponential ceiling."""
    return random.random() * min(o.retries_wait_ms * 2.0 ** attempt, o.retries_max_wait_ms) / 1000.0


def _path(*parts: Any) -> str:
    return "/".join(quote(str(p), safe="") for p in parts)


def _int(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise MalformedAnswer(f"the registry's answer to {what} is not a number")
    return value


def _ints(value: Any, what: str) -> List[int]:
    if not isinstance(value, list):
        raise MalformedAnswer(f"the registry's answer to {what} is not a list")
    return [_int(v, what) for v in value]


def _strings(value: Any, what: str) -> List[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise MalformedAnswer(f"the registry's answer to {what} is not a list of strings")
    return value


def _field(value: Any, key: str, what: str) -> Any:
    if not isinstance(value, dict) or key not in value:
        raise MalformedAnswer(f"the registry's answer to {what} has no {key!r}")
    return value[key]


class SchemaRegistryClient:
    """A Confluent-API schema registry client (see the module doc):
    ``SchemaRegistryClient({"url": ..., "basic.auth.user.info": ...})``.
    Close it (or use ``with``) to release its connections."""

    def __init__(self, conf: Mapping[str, Any]) -> None:
        self.options = parse(conf)
        self._credentials = Credentials(self.options)
        self._caches = Caches(self.options.cache_capacity, self.options.cache_latest_ttl)
        self._verify = _tls(self.options)                 # checked now: a bad file fails here, not at a call
        self._first = 0                                   # the index of the URL that answered last
        self._lock = threading.Lock()
        self._clients: Dict[bool, httpx.Client] = {}      # token endpoint or not: its client, made on first use

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {','.join(self.options.urls)}>"

    # ------------------------------------------------------------ the blocking driver
    def _run(self, steps: StepsOf[R]) -> R:
        got: Any = None
        while True:
            try:
                step = steps.send(got)
            except StopIteration as done:
                return done.value
            got = self._perform(step)

    def _perform(self, step: Union[Send, Pause]) -> Any:
        """A :class:`Pause` slept, or a :class:`Send`'s :class:`Answer` (or the transport error that stopped it)."""
        if isinstance(step, Pause):
            time.sleep(step.seconds)
            return None
        body = Body(step)
        try:
            response = self._client(step.token).send(step.request, stream=True)
            try:
                for chunk in response.iter_bytes():
                    body.add(chunk)
            finally:
                response.close()
        except httpx.RequestError as e:
            return e
        return body.answer(response.status_code)

    def http_options(self, token_endpoint: bool = False) -> Dict[str, Any]:
        """The keyword arguments of the ``httpx.Client`` (``httpx.AsyncClient``) that
        reaches the registry, or (``token_endpoint``) the OAuth token endpoint, with
        httpx's own TLS defaults."""
        o = self.options
        return {"verify": True if token_endpoint else self._verify, "proxy": o.proxy, "follow_redirects": False,
                "timeout": o.timeout}

    def _client(self, token_endpoint: bool) -> httpx.Client:
        with self._lock:
            if token_endpoint not in self._clients:
                self._clients[token_endpoint] = httpx.Client(**self.http_options(token_endpoint))
            return self._clients[token_endpoint]

    def close(self) -> None:
        """Release the client's connections (its caches stay)."""
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()

    def __enter__(self) -> "SchemaRegistryClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------ one request, retried
    def _request(self, method: str, path: str, query: Optional[Dict[str, Any]] = None,
                 body: Optional[Dict[str, Any]] = None) -> StepsOf[Any]:
        """The JSON of the registry's successful answer to ``method path`` (see the module doc)."""
        o = self.options
        deadline = time.monotonic() + o.timeout
        headers = {**_HEADERS, **(yield from self._credentials.headers(deadline))}
        content = None
        if body is not None:
            content = json.dumps(body).encode()
            headers.update(_BODY_HEADERS)
        params = {k: (str(v).lower() if isinstance(v, bool) else v) for k, v in (query or {}).items() if v is not None}
        failure: Optional[SchemaRegistryError] = None
        for attempt in range(o.max_retries + 1):
            for i in range(len(o.urls)):
                index = (self._first + i) % len(o.urls)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise failure or self._late()
                request = httpx.Request(method, f"{o.urls[index]}/{path}", params=params, content=content,
                                        headers=headers, extensions={"timeout": httpx.Timeout(left).as_dict()})
                got = yield Send(request, deadline)
                if isinstance(got, Answer) and 200 <= got.status < 300:
                    self._first = index
                    return got.json()
                failure = self._failure(got, o.urls[index], method, path)
                if not failure.retriable:
                    raise failure
            wait = _jitter(o, attempt)
            if attempt == o.max_retries or time.monotonic() + wait >= deadline:
                break
            yield Pause(wait)
        raise failure          # type: ignore[misc] - at least one attempt was made, and failed

    def _late(self) -> SchemaRegistryError:
        return SchemaRegistryError(None, UNKNOWN, f"no time left for the schema registry within the call's timeout "
                                                  f"of {self.options.timeout:g} s")

    @staticmethod
    def _failure(got: Any, url: str, method: str, path: str) -> SchemaRegistryError:
        """A failed attempt as the error it is: the registry's error, or the transport's."""
        if not isinstance(got, Answer):
            return SchemaRegistryError(None, UNKNOWN, f"{method} {url}/{path} got no answer "
                                                      f"({type(got).__name__}: {got})")
        body = got.json()
        if isinstance(body, dict) and isinstance(body.get("message"), str):
            code = body.get("error_code")
            return SchemaRegistryError(got.status, code if isinstance(code, int) else UNKNOWN, body["message"])
        text = got.content[:200].decode("utf-8", "replace")
        return SchemaRegistryError(got.status, UNKNOWN, f"{method} {url}/{path} answered HTTP {got.status}: {text!r}")

    # ------------------------------------------------------------ schemas
    @waits
    def get_schema(self, schema_id: int, subject_name: Optional[str] = None, fmt: Optional[str] = None) -> StepsOf[Schema]:
        """The schema registered with id ``schema_id`` (cached: an id's schema never changes).
        ``subject_name`` names the subject (a context) to look in; ``fmt`` asks for a format
        (Protobuf: ``serialized``)."""
        key = (schema_id, subject_name, fmt)
        schema = self._caches.by_id.get(key)
        if schema is None:
            answer = yield from self._request("GET", _path("schemas", "ids", schema_id),
                                              {"subject": subject_name, "format": fmt})
            schema = Schema.from_dict(answer)
            self._caches.by_id.put(key, schema)
        return schema

    @waits
    def get_schema_types(self) -> StepsOf[List[str]]:
        """The schema types the registry knows (``AVRO``, ``PROTOBUF``, ``JSON``)."""
        answer = yield from self._request("GET", "schemas/types")
        return _strings(answer, "schemas/types")

    @waits
    def get_subjects_by_schema_id(self, schema_id: int, deleted: bool = False) -> StepsOf[List[str]]:
        """The subjects that registered schema ``schema_id``."""
        answer = yield from self._request("GET", _path("schemas", "ids", schema_id, "subjects"), {"deleted": deleted})
        return _strings(answer, "schemas/ids/subjects")

    @waits
    def register_schema(self, subject_name: str, schema: Schema, normalize_schemas: bool = False) -> StepsOf[int]:
        """Register ``schema`` under ``subject_name`` (or find it registered there); its id."""
        registered = yield from SchemaRegistryClient.register_schema_full_response.steps(
            self, subject_name, schema, normalize_schemas)
        return registered.schema_id

    @waits
    def register_schema_full_response(self, subject_name: str, schema: Schema,
                                      normalize_schemas: bool = False) -> StepsOf[RegisteredSchema]:
        """:meth:`register_schema`, answering the registration (its version where the registry says it)."""
        key = (subject_name, schema, "register", normalize_schemas)
        registered = self._caches.by_schema.get(key)
        if registered is None:
            answer = yield from self._request("POST", _path("subjects", subject_name, "versions"),
                                              {"normalize": normalize_schemas}, schema.to_dict())
            registered = RegisteredSchema.from_dict(answer, schema, subject_name)
            self._caches.by_schema.put(key, registered)
            self._caches.by_id.put((registered.schema_id, None, None), schema)
        return registered

    @waits
    def lookup_schema(self, subject_name: str, schema: Schema, normalize_schemas: bool = False,
                      deleted: bool = False) -> StepsOf[RegisteredSchema]:
        """How ``schema`` is registered under ``subject_name``: its id and version
        (40403 if it is not registered there, 40401 if the subject is unknown)."""
        key = (subject_name, schema, "lookup", normalize_schemas, deleted)
        registered = self._caches.by_schema.get(key)
        if registered is None:
            answer = yield from self._request("POST", _path("subjects", subject_name),
                                              {"normalize": normalize_schemas, "deleted": deleted}, schema.to_dict())
            registered = RegisteredSchema.from_dict(answer, schema, subject_name)
            self._caches.by_schema.put(key, registered)
        return registered

    # ------------------------------------------------------------ subjects and versions
    @waits
    def get_subjects(self, subject_prefix: Optional[str] = None, deleted: bool = False) -> StepsOf[List[str]]:
        """The registry's subjects (with ``deleted``, the soft-deleted ones too)."""
        answer = yield from self._request("GET", "subjects", {"subjectPrefix": subject_prefix, "deleted": deleted})
        return _strings(answer, "subjects")

    @waits
    def get_versions(self, subject_name: str, deleted: bool = False) -> StepsOf[List[int]]:
        """The versions registered under ``subject_name``."""
        answer = yield from self._request("GET", _path("subjects", subject_name, "versions"), {"deleted": deleted})
        return _ints(answer, "subjects/versions")

    @waits
    def get_version(self, subject_name: str, version: Union[int, str], deleted: bool = False,
                    fmt: Optional[str] = None) -> StepsOf[RegisteredSchema]:
        """Version ``version`` (a number, or ``"latest"``) of ``subject_name``."""
        if version == "latest":
            return (yield from SchemaRegistryClient.get_latest_version.steps(self, subject_name, fmt))
        key = (subject_name, version, fmt)
        registered = None if deleted else self._caches.by_version.get(key)
        if registered is None:
            answer = yield from self._request("GET", _path("subjects", subject_name, "versions", version),
                                              {"deleted": deleted, "format": fmt})
            registered = RegisteredSchema.from_dict(answer, subject=subject_name)
            if not deleted:
                self._caches.by_version.put(key, registered)
        return registered

    @waits
    def get_latest_version(self, subject_name: str, fmt: Optional[str] = None) -> StepsOf[RegisteredSchema]:
        """The latest version of ``subject_name`` (cached ``cache.latest.ttl.sec``, without it until deleted)."""
        key = (subject_name, fmt)
        registered = self._caches.latest.get(key)
        if registered is None:
            answer = yield from self._request("GET", _path("subjects", subject_name, "versions", "latest"),
                                              {"format": fmt})
            registered = RegisteredSchema.from_dict(answer, subject=subject_name)
            self._caches.latest.put(key, registered)
        return registered

    @waits
    def delete_subject(self, subject_name: str, permanent: bool = False) -> StepsOf[List[int]]:
        """Delete ``subject_name`` (soft; ``permanent`` for a soft-deleted one); the versions it had."""
        answer = yield from self._request("DELETE", _path("subjects", subject_name), {"permanent": permanent})
        self._caches.forget_subject(subject_name)
        return _ints(answer, "DELETE subjects")

    @waits
    def delete_version(self, subject_name: str, version: Union[int, str], permanent: bool = False) -> StepsOf[int]:
        """Delete one version of ``subject_name``; its number."""
        answer = yield from self._request("DELETE", _path("subjects", subject_name, "versions", version),
                                          {"permanent": permanent})
        self._caches.forget_subject(subject_name, None if version == "latest" else version)
        return _int(answer, "DELETE subjects/versions")

    @waits
    def resolve_references(self, schema: Schema) -> StepsOf[Dict[str, str]]:
        """Every schema ``schema`` imports, recursively: ``{reference name:
        schema text}``, each after the schemas it imports itself (the order a
        parser that needs a name defined before its use wants). A reference
        seen twice is fetched once; more than :data:`MAX_REFERENCES` is refused."""
        resolved: Dict[str, str] = {}
        seen = set()

        def visit(s: Schema) -> StepsOf[None]:
            for ref in s.references:
                if (ref.subject, ref.version) in seen:
                    continue
                seen.add((ref.subject, ref.version))
                if len(seen) > MAX_REFERENCES:
                    raise MalformedAnswer(f"the schema imports more than {MAX_REFERENCES} schemas")
                registered = yield from SchemaRegistryClient.get_version.steps(self, ref.subject, ref.version)
                yield from visit(registered.schema)
                resolved[ref.name] = registered.schema.schema_str

        yield from visit(schema)
        return resolved

    # ------------------------------------------------------------ compatibility
    @waits
    def test_compatibility(self, subject_name: str, schema: Schema, version: Union[int, str] = "latest",
                           normalize: bool = False, verbose: bool = False) -> StepsOf[bool]:
        """Whether ``schema`` is compatible with ``version`` of ``subject_name`` under its compatibility level."""
        answer = yield from self._request("POST", _path("compatibility", "subjects", subject_name, "versions", version),
                                          {"normalize": normalize, "verbose": verbose}, schema.to_dict())
        compatible = _field(answer, "is_compatible", "a compatibility test")
        if not isinstance(compatible, bool):
            raise MalformedAnswer("the registry's answer to a compatibility test has no boolean 'is_compatible'")
        return compatible

    @waits
    def set_compatibility(self, subject_name: Optional[str] = None, level: Optional[str] = None) -> StepsOf[str]:
        """Set the compatibility ``level`` (``BACKWARD``, ``FORWARD_TRANSITIVE``, ``NONE``...) of
        ``subject_name``, or the registry's default without one; the level set."""
        if not level:
            raise ValueError("set_compatibility needs a level, e.g. BACKWARD")
        path = _path("config", subject_name) if subject_name is not None else "config"
        answer = yield from self._request("PUT", path, body={"compatibility": level.upper()})
        return _field(answer, "compatibility", "PUT config")

    @waits
    def get_compatibility(self, subject_name: Optional[str] = None) -> StepsOf[str]:
        """The compatibility level of ``subject_name``, or the registry's default without one."""
        path = _path("config", subject_name) if subject_name is not None else "config"
        answer = yield from self._request("GET", path)
        return _field(answer, "compatibilityLevel", "GET config")

    def clear_caches(self) -> None:
        """Forget everything cached."""
        self._caches.clear()
