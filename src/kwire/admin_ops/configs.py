"""Configs of Kafka's resources as Java's AdminClient names them:
:class:`ConfigResource` (its ``ConfigResource``: a type and a name),
:class:`AlterConfigOp` (an ``AlterConfigOp``: SET, DELETE, APPEND,
SUBTRACT of one config), and the IncrementalAlterConfigs and AlterConfigs
requests and their per-resource errors.

A broker's (and a broker logger's) configs are answered by that broker
only: :func:`node_of` says where a resource's request goes (None: any
broker, which forwards to the controller when it must).
"""

from __future__ import annotations

import collections
from typing import Any, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

from kwire import protocol

__all__ = ["ConfigResource", "AlterConfigOp", "RESOURCE_TYPES", "OP_TYPES", "resource", "node_of", "by_node",
           "incremental_alter_request", "alter_request", "resource_errors"]

#: Kafka's ``ConfigResource.Type`` codes, by kwire's (lower-case) names.
RESOURCE_TYPES: Dict[str, int] = {"topic": 2, "broker": 4, "broker_logger": 8, "client_metrics": 16, "group": 32}
_TYPE_NAMES = {code: name for name, code in RESOURCE_TYPES.items()}

#: Kafka's ``AlterConfigOp.OpType`` codes.
OP_TYPES: Dict[str, int] = {"set": 0, "delete": 1, "append": 2, "subtract": 3}


class ConfigResource(NamedTuple):
    """A resource with configs: ``ConfigResource("topic", "orders")``,
    ``("broker", "1")`` (``""``: the cluster-wide default of every
    broker), ``("broker_logger", "1")``, ``("group", "g")``,
    ``("client_metrics", "subscription")``. A plain ``(type, name)`` tuple
    is equal to it (and is what :meth:`kwire.admin.Admin.describe_configs`
    keys its result by)."""

    type: str
    name: str


class AlterConfigOp(NamedTuple):
    """One change of :meth:`kwire.admin.Admin.incremental_alter_configs`:
    ``op_type`` ``"set"`` (``value`` replaces the config), ``"delete"``
    (back to its default; no value), ``"append"`` / ``"subtract"`` (add
    to or remove from a list config the comma-separated ``value``)."""

    name: str
    value: Optional[str] = None
    op_type: str = "set"


def resource(r: Union[ConfigResource, Tuple[str, Any]]) -> ConfigResource:
    """``r`` as a :class:`ConfigResource`, its type checked (a broker's id may be an int)."""
    kind, name = r
    if kind not in RESOURCE_TYPES:
        raise ValueError(f"a config resource's type is one of {sorted(RESOURCE_TYPES)}, not {kind!r}")
    return ConfigResource(kind, str(name))


def type_name(code: int) -> str:
    """The resource type of a response's code (``"unknown"`` for one Kafka added later)."""
    return _TYPE_NAMES.get(code, "unknown")


def node_of(r: ConfigResource) -> Optional[int]:
    """The broker a resource's config request must go to: a named broker's
    own (or its logger's); None for every other resource (any broker)."""
    if r.type in ("broker", "broker_logger") and r.name:
        return int(r.name)
    return None


def by_node(resources: Iterable[ConfigResource]) -> Dict[Optional[int], List[ConfigResource]]:
    """``resources`` grouped by :func:`node_of`, in their order."""
    out: Dict[Optional[int], List[ConfigResource]] = collections.defaultdict(list)
    for r in resources:
        out[node_of(r)].append(r)
    return out


def _op(op: AlterConfigOp) -> int:
    if op.op_type not in OP_TYPES:
        raise ValueError(f"an AlterConfigOp's op_type is one of {sorted(OP_TYPES)}, not {op.op_type!r}")
    if op.op_type != "delete" and op.value is None:
        raise ValueError(f"{op.op_type} of {op.name!r} needs a value")
    return OP_TYPES[op.op_type]


def incremental_alter_request(configs: Mapping[ConfigResource, Sequence[AlterConfigOp]],
                              validate_only: bool) -> Any:
    """An IncrementalAlterConfigsRequest of ``configs`` (a DELETE sends no value, as Java's does)."""
    cls = protocol.message("IncrementalAlterConfigsRequest")
    return cls(validate_only=validate_only, resources=[
        cls.AlterConfigsResource(resource_type=RESOURCE_TYPES[r.type], resource_name=r.name, configs=[
            cls.AlterableConfig(name=op.name, config_operation=_op(op),
                                value=None if op.op_type == "delete" else op.value) for op in ops])
        for r, ops in configs.items()])


def alter_request(configs: Mapping[ConfigResource, Mapping[str, Optional[str]]], validate_only: bool) -> Any:
    """An AlterConfigsRequest of ``configs``: each resource's whole set of
    (dynamic) configs, those left out going back to their defaults."""
    cls = protocol.message("AlterConfigsRequest")
    return cls(validate_only=validate_only, resources=[
        cls.AlterConfigsResource(resource_type=RESOURCE_TYPES[r.type], resource_name=r.name,
                                 configs=[cls.AlterableConfig(name=k, value=v) for k, v in entries.items()])
        for r, entries in configs.items()])


def resource_errors(resp: Any, api: str) -> List[BaseException]:
    """The errors of an (Incremental)AlterConfigs response's resources, each naming its resource."""
    return [protocol.error_for(r.error_code, api=api, message=r.error_message,
                               resource=ConfigResource(type_name(r.resource_type), r.resource_name))
            for r in resp.responses if r.error_code]
