"""kwire.aio's AsyncSchemaRegistryClient against the real Apicurio: the
blocking client's calls, awaited; its deadline, retries and failover; the
loop never blocked; cancellation."""

from __future__ import annotations

import asyncio
import inspect
import json
import subprocess
import sys
import time

import pytest

import kwire.aio
from kwire.devbroker import free_port
from kwire.registry import AsyncSchemaRegistryClient, SchemaReference, SchemaRegistryClient, SchemaRegistryError
from kwire.registry.schema import Schema
from support.proxies import FaultProxy

from .conftest import USER_V1, USER_V2_COMPATIBLE, USER_V2_INCOMPATIBLE, avro_record

FAST = {"retries.wait.ms": 20, "retries.max.wait.ms": 100}


def test_every_call_of_the_blocking_client_is_a_coroutine_with_its_signature():
    calls = {n for n, f in vars(SchemaRegistryClient).items() if hasattr(f, "steps")}
    assert {"get_schema", "register_schema", "lookup_schema", "get_latest_version", "resolve_references",
            "test_compatibility"} <= calls
    for name in calls:
        blocking, awaited = getattr(SchemaRegistryClient, name), getattr(AsyncSchemaRegistryClient, name)
        assert inspect.iscoroutinefunction(awaited), name
        assert list(inspect.signature(blocking).parameters) == list(inspect.signature(awaited).parameters), name


def test_kwire_aio_names_it_without_importing_httpx():
    assert kwire.aio.AsyncSchemaRegistryClient is AsyncSchemaRegistryClient
    code = "import sys, kwire.aio; print('httpx' in sys.modules, 'kwire.registry' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_the_calls_awaited(apicurio, subject):
    async def main() -> None:
        async with AsyncSchemaRegistryClient({"url": apicurio.url}) as c:
            schema_id = await c.register_schema(subject, USER_V1)
            assert (await c.get_schema(schema_id)).schema_type == "AVRO"
            assert (await c.lookup_schema(subject, USER_V1)).version == 1
            assert await c.set_compatibility(subject, "BACKWARD") == "BACKWARD"
            assert await c.get_compatibility(subject) == "BACKWARD"
            assert await c.test_compatibility(subject, USER_V2_COMPATIBLE) is True
            assert await c.test_compatibility(subject, USER_V2_INCOMPATIBLE) is False
            second = await c.register_schema_full_response(subject, USER_V2_COMPATIBLE)
            assert await c.get_versions(subject) == [1, 2]
            assert (await c.get_latest_version(subject)).schema_id == second.schema_id
            assert (await c.get_version(subject, 1)).schema_id == schema_id
            assert subject in await c.get_subjects()
            assert subject in await c.get_subjects_by_schema_id(schema_id)
            assert "AVRO" in await c.get_schema_types()
            inner = avro_record("Inner", [{"name": "x", "type": "int"}])
            await c.register_schema(f"{subject}-inner", inner)
            outer = Schema(json.dumps({"type": "record", "name": "Outer", "namespace": "kwire.test",
                                       "fields": [{"name": "i", "type": "kwire.test.Inner"}]}),
                           references=[SchemaReference("kwire.test.Inner", f"{subject}-inner", 1)])
            await c.register_schema(f"{subject}-outer", outer)
            assert list(await c.resolve_references(outer)) == ["kwire.test.Inner"]
            assert await c.delete_version(subject, 2) == 2
            assert await c.delete_version(subject, 2, permanent=True) == 2
            assert await c.delete_subject(subject) == [1]
            with pytest.raises(SchemaRegistryError) as e:
                await c.get_latest_version(subject)
            assert e.value.status == 404
            c.clear_caches()

    asyncio.run(main())


def test_many_calls_at_once(apicurio, subject):
    async def main() -> set:
        async with AsyncSchemaRegistryClient({"url": apicurio.url}) as c:
            ids = await asyncio.gather(*(c.register_schema(f"{subject}-{i}", avro_record(f"R{i}", [
                {"name": "f", "type": "int"}])) for i in range(20)))
            c.clear_caches()
            schemas = await asyncio.gather(*(c.get_schema(i) for i in ids * 3))
            return {s.schema_type for s in schemas}

    assert asyncio.run(main()) == {"AVRO"}


def test_retries_and_failover(proxy, subject):
    dead = f"http://127.0.0.1:{free_port()}"

    async def main() -> list:
        async with AsyncSchemaRegistryClient({"url": f"{dead},{proxy.url}", "max.retries": 3, **FAST}) as c:
            proxy.fail(2, 503)
            await c.register_schema(subject, USER_V1)
            return [s.failed for s in proxy.requests()]

    assert asyncio.run(main()) == [True, True, False]


def test_a_partitioned_registry_neither_blocks_the_loop_nor_outlasts_the_timeout(apicurio):
    with FaultProxy(("127.0.0.1", apicurio.port)) as hole:
        url = f"http://127.0.0.1:{hole.port}/apis/ccompat/v7"

        async def main():
            async with AsyncSchemaRegistryClient({"url": url, "timeout": 1.5, **FAST}) as c:
                await c.get_subjects()
                hole.black_hole()
                ticks = 0

                async def tick() -> None:
                    nonlocal ticks
                    while True:
                        await asyncio.sleep(0.05)
                        ticks += 1

                ticker = asyncio.create_task(tick())
                t0 = time.monotonic()
                with pytest.raises(SchemaRegistryError) as e:
                    await c.get_subjects()
                took = time.monotonic() - t0
                ticker.cancel()
                hole.heal()
                return e.value, took, ticks, await c.get_subjects()

        err, took, ticks, after = asyncio.run(main())
    assert err.retriable and err.status is None
    assert 1.4 < took < 1.8, took
    assert ticks >= 20                       # the loop ran all along
    assert isinstance(after, list)


def test_a_cancelled_call_leaves_the_client_usable(apicurio, subject):
    with FaultProxy(("127.0.0.1", apicurio.port)) as hole:
        url = f"http://127.0.0.1:{hole.port}/apis/ccompat/v7"

        async def main() -> int:
            async with AsyncSchemaRegistryClient({"url": url, "timeout": 10}) as c:
                hole.black_hole()
                call = asyncio.create_task(c.register_schema(subject, USER_V1))
                await asyncio.sleep(0.3)
                call.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await call
                hole.heal()
                return await c.register_schema(subject, USER_V1)

        assert asyncio.run(main()) > 0
