"""asyncio clients on the same core as the blocking ones:
:class:`AsyncProducer`, :class:`AsyncConsumer` and :class:`AsyncAdmin`,
with the blocking clients' names and options.

One client, two drivers: the logic (connections and their Kafka side,
metadata, fetching, batching, retries) is the blocking clients' own, and
what waits is written once as steps (:meth:`kwire.client.Client.run`); here
an event loop drives it (:mod:`kwire.aio.client`), its connections asyncio
transports (:mod:`kwire.aio.net`). Works on asyncio's default loop and on
uvloop. Each client belongs to the loop it was made in.

:class:`AsyncSchemaRegistryClient` (:mod:`kwire.registry.aio`, the schema
registry client on ``httpx.AsyncClient``) is here too, imported on first
use: ``import kwire.aio`` needs no httpx (``kwire[registry]``).
"""

from typing import TYPE_CHECKING, Any

from kwire.aio.admin import AsyncAdmin
from kwire.aio.consumer import AsyncConsumer
from kwire.aio.producer import AsyncProducer, WouldBlockError
from kwire.aio.share import AsyncShareConsumer

if TYPE_CHECKING:
    from kwire.registry.aio import AsyncSchemaRegistryClient

__all__ = ["AsyncAdmin", "AsyncConsumer", "AsyncProducer", "AsyncShareConsumer", "AsyncSchemaRegistryClient",
           "WouldBlockError"]


def __getattr__(name: str) -> Any:
    if name == "AsyncSchemaRegistryClient":
        from kwire.registry.aio import AsyncSchemaRegistryClient

        return AsyncSchemaRegistryClient
    raise AttributeError(f"module 'kwire.aio' has no attribute {name!r}")
