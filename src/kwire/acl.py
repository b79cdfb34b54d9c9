"""ACL bindings in Kafka's own vocabulary, for :meth:`kwire.admin.Admin.create_acls`,
:meth:`~kwire.admin.Admin.describe_acls` and :meth:`~kwire.admin.Admin.delete_acls`.

An :class:`AclBinding` says: ``principal`` connecting from ``host`` is
allowed (or denied) ``operation`` on the resources of ``resource_type``
that ``resource_name`` names under ``pattern_type``. Each field takes
Kafka's name of the value, in any case (``"topic"``, ``"TRANSACTIONAL_ID"``,
``"prefixed"``, ``"read"``, ``"allow"``); the principal is ``"User:alice"``
and the host ``"*"`` for any host, as with Kafka's ``kafka-acls`` tool.

Used as a filter (describe and delete), ``"any"`` matches every value of
an enumerated field and ``None`` every name, principal or host;
``pattern_type="match"`` matches the literal, wildcard and prefixed
bindings that apply to ``resource_name``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional

__all__ = ["AclBinding", "RESOURCE_TYPES", "PATTERN_TYPES", "OPERATIONS", "PERMISSION_TYPES"]

#: Kafka's codes (org.apache.kafka.common.resource.ResourceType, PatternType,
#: acl.AclOperation, acl.AclPermissionType), by their lower-case names.
RESOURCE_TYPES: Dict[str, int] = {"unknown": 0, "any": 1, "topic": 2, "group": 3, "cluster": 4,
                                  "transactional_id": 5, "delegation_token": 6, "user": 7}
PATTERN_TYPES: Dict[str, int] = {"unknown": 0, "any": 1, "match": 2, "literal": 3, "prefixed": 4}
OPERATIONS: Dict[str, int] = {"unknown": 0, "any": 1, "all": 2, "read": 3, "write": 4, "create": 5, "delete": 6,
                              "alter": 7, "describe": 8, "cluster_action": 9, "describe_configs": 10,
                              "alter_configs": 11, "idempotent_write": 12, "create_tokens": 13,
                              "describe_tokens": 14, "two_phase_commit": 15}
PERMISSION_TYPES: Dict[str, int] = {"unknown": 0, "any": 1, "deny": 2, "allow": 3}

_FIELDS = {"resource_type": RESOURCE_TYPES, "pattern_type": PATTERN_TYPES, "operation": OPERATIONS,
           "permission_type": PERMISSION_TYPES}


_CREATION_FIELDS = ("resource_type", "resource_name", "resource_pattern_type", "principal", "host", "operation",
                    "permission_type")
_FILTER_FIELDS = ("resource_type_filter", "resource_name_filter", "pattern_type_filter", "principal_filter",
                  "host_filter", "operation", "permission_type")


def _name_of(table: Dict[str, int], code: int) -> str:
    for name, c in table.items():
        if c == code:
            return name
    return "unknown"


@dataclass(frozen=True)
class AclBinding:
    """One ACL (or, for describe and delete, a filter of ACLs).

    ``AclBinding("topic", "orders", principal="User:alice", operation="write")``
    allows alice to write to the topic ``orders`` from any host."""

    resource_type: str
    resource_name: Optional[str]
    pattern_type: str = "literal"
    principal: Optional[str] = None
    host: Optional[str] = "*"
    operation: str = "all"
    permission_type: str = "allow"

    def __post_init__(self) -> None:
        for field, table in _FIELDS.items():
            value = getattr(self, field)
            name = value.lower() if isinstance(value, str) else value
            if name not in table:
                raise ValueError(f"AclBinding {field} {value!r}: not one of {', '.join(table)}")
            object.__setattr__(self, field, name)

    def codes(self) -> Dict[str, int]:
        """The enumerated fields as Kafka's codes."""
        return {field: table[getattr(self, field)] for field, table in _FIELDS.items()}

    def wire(self, as_filter: bool = False) -> Dict[str, Any]:
        """The fields of a CreateAcls creation, or (``as_filter``) of a
        DescribeAcls request or DeleteAcls filter, by their wire names."""
        c = self.codes()
        values = (c["resource_type"], self.resource_name, c["pattern_type"], self.principal, self.host,
                  c["operation"], c["permission_type"])
        return dict(zip(_FILTER_FIELDS if as_filter else _CREATION_FIELDS, values))

    @classmethod
    def from_codes(cls, resource_type: int, resource_name: Optional[str], pattern_type: int,
                   principal: Optional[str], host: Optional[str], operation: int, permission_type: int) -> "AclBinding":
        """A binding as a broker describes it (Kafka's codes)."""
        return cls(_name_of(RESOURCE_TYPES, resource_type), resource_name, _name_of(PATTERN_TYPES, pattern_type),
                   principal, host, _name_of(OPERATIONS, operation), _name_of(PERMISSION_TYPES, permission_type))

    @classmethod
    def from_response(cls, resource: Any, acl: Any) -> "AclBinding":
        """A DescribeAcls response's resource and one of its ACLs."""
        return cls.from_codes(resource.resource_type, resource.resource_name, resource.pattern_type,
                              acl.principal, acl.host, acl.operation, acl.permission_type)
