"""The asyncio schema registry client: :class:`AsyncSchemaRegistryClient`,
every call of :class:`~kwire.registry.client.SchemaRegistryClient` as a
coroutine, on ``httpx.AsyncClient``.

Each call is the blocking client's own steps (``SchemaRegistryClient.<name>.steps``:
caches, requests, retries, token refreshes, answers), awaited here: the two
cannot drift apart. Waits are the loop's (``asyncio.sleep`` for a backoff),
and each request is held to the call's deadline with ``asyncio.wait_for``,
so a slow registry never blocks the loop nor outlasts ``timeout``.
Also ``kwire.aio.AsyncSchemaRegistryClient``.
"""

from __future__ import annotations

import asyncio
from typing import Any, Dict, List, Mapping, Optional, Union


from kwire.registry.client import SchemaRegistryClient
from kwire.registry.options import Options
from kwire.registry.schema import RegisteredSchema, Schema
from kwire.registry.steps import Body, Pause, Send, StepsOf, httpx

__all__ = ["AsyncSchemaRegistryClient"]

_C = SchemaRegistryClient


class AsyncSchemaRegistryClient:
    """``AsyncSchemaRegistryClient({"url": ...})``: the options and methods of
    :class:`~kwire.registry.client.SchemaRegistryClient`, awaited. ``async with``,
    or ``await`` :meth:`close`. Use it on one event loop."""

    def __init__(self, conf: Mapping[str, Any]) -> None:
        self._r = SchemaRegistryClient(conf)          # the state the steps use; its own I/O is never used
        self._clients: Dict[bool, httpx.AsyncClient] = {}

    @property
    def options(self) -> Options:
        """The registry client's options (URL, authentication, TLS, timeouts)."""
        return self._r.options

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {','.join(self.options.urls)}>"

    # ------------------------------------------------------------ the asyncio driver
    async def _run(self, steps: StepsOf[Any]) -> Any:
        got: Any = None
        while True:
            try:
                step = steps.send(got)
            except StopIteration as done:
                return done.value
            got = await self._perform(step)

    async def _perform(self, step: Union[Send, Pause]) -> Any:
        if isinstance(step, Pause):
            await asyncio.sleep(step.seconds)
            return None
        try:
            return await asyncio.wait_for(self._fetch(step), step.left())
        except httpx.RequestError as e:
            return e
        except asyncio.TimeoutError:
            return httpx.ReadTimeout("the answer did not arrive in time", request=step.request)

    async def _fetch(self, step: Send) -> Any:
        body = Body(step)
        response = await self._client(step.token).send(step.request, stream=True)
        try:
            async for chunk in response.aiter_bytes():
                body.add(chunk)
        finally:
            await response.aclose()
        return body.answer(response.status_code)

    def _client(self, token_endpoint: bool) -> httpx.AsyncClient:
        if token_endpoint not in self._clients:
            self._clients[token_endpoint] = httpx.AsyncClient(**self._r.http_options(token_endpoint))
        return self._clients[token_endpoint]

    async def close(self) -> None:
        """Release the client's connections (its caches stay)."""
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()

    async def __aenter__(self) -> "AsyncSchemaRegistryClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def clear_caches(self) -> None:
        """:meth:`SchemaRegistryClient.clear_caches`."""
        self._r.clear_caches()

    # ------------------------------------------------------------ the calls
    async def get_schema(self, schema_id: int, subject_name: Optional[str] = None,
                         fmt: Optional[str] = None) -> Schema:
        """:meth:`SchemaRegistryClient.get_schema`."""
        return await self._run(_C.get_schema.steps(self._r, schema_id, subject_name, fmt))

    async def get_schema_types(self) -> List[str]:
        """:meth:`SchemaRegistryClient.get_schema_types`."""
        return await self._run(_C.get_schema_types.steps(self._r))

    async def get_subjects_by_schema_id(self, schema_id: int, deleted: bool = False) -> List[str]:
        """:meth:`SchemaRegistryClient.get_subjects_by_schema_id`."""
        return await self._run(_C.get_subjects_by_schema_id.steps(self._r, schema_id, deleted))

    async def register_schema(self, subject_name: str, schema: Schema, normalize_schemas: bool = False) -> int:
        """:meth:`SchemaRegistryClient.register_schema`."""
        return await self._run(_C.register_schema.steps(self._r, subject_name, schema, normalize_schemas))

    async def register_schema_full_response(self, subject_name: str, schema: Schema,
                                            normalize_schemas: bool = False) -> RegisteredSchema:
        """:meth:`SchemaRegistryClient.register_schema_full_response`."""
        return await self._run(_C.register_schema_full_response.steps(self._r, subject_name, schema,
                                                                      normalize_schemas))

    async def lookup_schema(self, subject_name: str, schema: Schema, normalize_schemas: bool = False,
                            deleted: bool = False) -> RegisteredSchema:
        """:meth:`SchemaRegistryClient.lookup_schema`."""
        return await self._run(_C.lookup_schema.steps(self._r, subject_name, schema, normalize_schemas, deleted))

    async def get_subjects(self, subject_prefix: Optional[str] = None, deleted: bool = False) -> List[str]:
        """:meth:`SchemaRegistryClient.get_subjects`."""
        return await self._run(_C.get_subjects.steps(self._r, subject_prefix, deleted))

    async def get_versions(self, subject_name: str, deleted: bool = False) -> List[int]:
        """:meth:`SchemaRegistryClient.get_versions`."""
        return await self._run(_C.get_versions.steps(self._r, subject_name, deleted))

    async def get_version(self, subject_name: str, version: Union[int, str], deleted: bool = False,
                          fmt: Optional[str] = None) -> RegisteredSchema:
        """:meth:`SchemaRegistryClient.get_version`."""
        return await self._run(_C.get_version.steps(self._r, subject_name, version, deleted, fmt))

    async def get_latest_version(self, subject_name: str, fmt: Optional[str] = None) -> RegisteredSchema:
        """:meth:`SchemaRegistryClient.get_latest_version`."""
        return await self._run(_C.get_latest_version.steps(self._r, subject_name, fmt))

    async def delete_subject(self, subject_name: str, permanent: bool = False) -> List[int]:
        """:meth:`SchemaRegistryClient.delete_subject`."""
        return await self._run(_C.delete_subject.steps(self._r, subject_name, permanent))

    async def delete_version(self, subject_name: str, version: Union[int, str], permanent: bool = False) -> int:
        """:meth:`SchemaRegistryClient.delete_version`."""
        return await self._run(_C.delete_version.steps(self._r, subject_name, version, permanent))

    async def resolve_references(self, schema: Schema) -> Dict[str, str]:
        """:meth:`SchemaRegistryClient.resolve_references`."""
        return await self._run(_C.resolve_references.steps(self._r, schema))

    async def test_compatibility(self, subject_name: str, schema: Schema, version: Union[int, str] = "latest",
                                 normalize: bool = False, verbose: bool = False) -> bool:
        """:meth:`SchemaRegistryClient.test_compatibility`."""
        return await self._run(_C.test_compatibility.steps(self._r, subject_name, schema, version, normalize, verbose))

    async def set_compatibility(self, subject_name: Optional[str] = None, level: Optional[str] = None) -> str:
        """:meth:`SchemaRegistryClient.set_compatibility`."""
        return await self._run(_C.set_compatibility.steps(self._r, subject_name, level))

    async def get_compatibility(self, subject_name: Optional[str] = None) -> str:
        """:meth:`SchemaRegistryClient.get_compatibility`."""
        return await self._run(_C.get_compatibility.steps(self._r, subject_name))
