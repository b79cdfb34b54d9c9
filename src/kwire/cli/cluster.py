"""The ``kwire`` subcommands an operator runs against a cluster, in the
shapes of the tools Kafka ships: ``acls`` (kafka-acls.sh), ``quotas`` and
``user-scram`` (kafka-configs.sh's client quotas and SCRAM credentials),
``delete-records`` (kafka-delete-records.sh), ``leader-election``
(kafka-leader-election.sh) and ``reassign-partitions``
(kafka-reassign-partitions.sh), each over :class:`kwire.admin.Admin`, with
``--json`` for JSON lines. Changes that remove something (``acls remove``)
or move data (``reassign-partitions --execute``) show what they would do
unless given ``--force`` / ``--execute``."""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from kwire.cli.options import client_config, name_value, print_rows

__all__ = ["add_cluster_commands"]

#: kafka-acls.sh's resource flags: the option's dest, Kafka's resource type.
ACL_RESOURCES = {"topic": "topic", "group": "group", "transactional_id": "transactional_id", "cluster": "cluster"}


def _snake(name: str) -> str:
    """Kafka's CamelCase names (ClusterAction, DescribeConfigs) as kwire's (cluster_action)."""
    return re.sub(r"(?<=[a-z])(?=[A-Z])", "_", name.strip()).lower()


def _acl_resources(args: argparse.Namespace) -> List[Tuple[str, Optional[str]]]:
    """The resources named: (type, name); the cluster's name is kafka-cluster."""
    out: List[Tuple[str, Optional[str]]] = [(kind, name) for kind in ("topic", "group", "transactional_id")
                                            for name in getattr(args, kind) or ()]
    if args.cluster:
        out.append(("cluster", "kafka-cluster"))
    return out


def _acl_row(b: Any) -> Dict[str, Any]:
    return {"resource_type": b.resource_type, "resource_name": b.resource_name, "pattern_type": b.pattern_type,
            "principal": b.principal, "host": b.host, "operation": b.operation, "permission": b.permission_type}


ACL_HEADER = ["resource_type", "resource_name", "pattern_type", "principal", "host", "operation", "permission"]


def _acl_operations(args: argparse.Namespace, kind: str) -> List[str]:
    """The operations to grant on a resource of ``kind``: ``--operation``s,
    or those ``--producer`` / ``--consumer`` stand for (as kafka-acls.sh)."""
    ops = [_snake(o) for o in args.operation or ()]
    if args.producer and kind == "topic":
        ops += ["write", "describe", "create"]
    if args.consumer and kind in ("topic", "group"):
        ops += ["read"] + (["describe"] if kind == "topic" else [])
    return list(dict.fromkeys(ops))


def _acl_bindings(args: argparse.Namespace) -> List[Any]:
    """``acls add``'s bindings: each resource x principal x host x operation."""
    from kwire.acl import AclBinding

    pattern = _snake(args.resource_pattern_type or "literal")
    out = []
    for kind, name in _acl_resources(args):
        for permission, principals, hosts in (("allow", args.allow_principal, args.allow_host),
                                              ("deny", args.deny_principal, args.deny_host)):
            for principal in principals or ():
                for host in hosts or ["*"]:
                    out += [AclBinding(kind, name, pattern, principal, host, op, permission)
                            for op in _acl_operations(args, kind)]
    return out


def _acl_filters(args: argparse.Namespace) -> List[Any]:
    """``acls list`` / ``remove``'s filters: per resource named (or any),
    narrowed by principal, host, operation and permission when given."""
    from kwire.acl import AclBinding

    pattern = _snake(args.resource_pattern_type or ("any" if args.action == "list" else "literal"))
    principals = (args.principal or []) + (args.allow_principal or []) + (args.deny_principal or []) or [None]
    permission = "allow" if args.allow_principal and not args.deny_principal else \
        "deny" if args.deny_principal and not args.allow_principal else "any"
    operations = [_snake(o) for o in args.operation or ()] or ["any"]
    return [AclBinding(kind, name, pattern, principal, None, op, permission)
            for kind, name in _acl_resources(args) or [("any", None)]
            for principal in principals for op in operations]


def cmd_acls(args: argparse.Namespace) -> int:
    """``kwire acls list | add | remove`` (kafka-acls.sh's)."""
    from kwire.admin import Admin

    try:
        bindings, filters = (_acl_bindings(args), []) if args.action == "add" else ([], _acl_filters(args))
    except ValueError as e:          # an operation or pattern type Kafka does not have: AclBinding says which
        raise SystemExit(f"kwire acls {args.action}: {e}") from None
    with Admin(client_config(args)) as a:
        if args.action == "add":
            if not bindings:
                raise SystemExit("kwire acls add: name a resource (--topic, --group, --transactional-id, --cluster), "
                                 "--allow-principal or --deny-principal, and --operation (or --producer, --consumer)")
            a.create_acls(bindings)
            print_rows(args, ACL_HEADER, map(_acl_row, bindings))
            print(f"added {len(bindings)} ACLs", file=sys.stderr)
            return 0
        if args.action == "list" or not args.force:
            rows = sorted({b for f in filters for b in a.describe_acls(f)}, key=lambda b: [str(v) for v in
                                                                                         _acl_row(b).values()])
            print_rows(args, ACL_HEADER, map(_acl_row, rows))
            if args.action == "remove":
                print(f"{len(rows)} ACLs match; nothing removed: add --force to remove them", file=sys.stderr)
            return 0
        removed = a.delete_acls(filters)
        print_rows(args, ACL_HEADER, map(_acl_row, removed))
        print(f"removed {len(removed)} ACLs", file=sys.stderr)
    return 0


def _quota_entity(args: argparse.Namespace) -> Dict[str, Optional[str]]:
    """The client quota entity named (None: the default entity of that type)."""
    entity: Dict[str, Optional[str]] = {}
    for kind, name, default in (("user", args.user, args.user_default), ("client-id", args.client_id,
                                                                          args.client_default),
                                ("ip", args.ip, args.ip_default)):
        if name is not None and default:
            raise SystemExit(f"kwire quotas: give --{kind} or its --*-default, not both")
        if name is not None or default:
            entity[kind] = name
    return entity


def _quota_changes(args: argparse.Namespace) -> Dict[str, Optional[float]]:
    """``--add NAME=VALUE`` (a number) and ``--delete NAME``: the quotas to set and remove."""
    changes: Dict[str, Optional[float]] = {}
    for item in args.add or ():
        name, value = name_value(item, "kwire quotas alter: --add")
        try:
            changes[name] = float(value)
        except ValueError:
            raise SystemExit(f"kwire quotas alter: --add {item!r}: the value must be a number") from None
    changes.update((name, None) for name in args.delete or ())
    return changes


def cmd_quotas(args: argparse.Namespace) -> int:
    """``kwire quotas describe | alter`` (kafka-configs.sh's client quotas)."""
    from kwire.admin import Admin

    entity = _quota_entity(args)
    if not entity:
        raise SystemExit(f"kwire quotas {args.action}: name the entity (--user, --client-id, --ip or a *-default)")
    with Admin(client_config(args)) as a:
        if args.action == "alter":
            changes = _quota_changes(args)
            if not changes:
                raise SystemExit("kwire quotas alter: give --add NAME=VALUE or --delete NAME")
            a.alter_client_quotas(entity, changes, validate_only=args.validate_only)
            print(f"{'checked' if args.validate_only else 'altered'} the quotas of "
                  f"{_entity_text(tuple(entity.items()))}", file=sys.stderr)
            return 0
        found = a.describe_client_quotas(entity, strict=args.strict)
    print_rows(args, ["entity", "quota", "value"], (
        {"entity": _entity_text(key), "quota": name, "value": value}
        for key, quotas in sorted(found.items(), key=lambda kv: _entity_text(kv[0]))
        for name, value in sorted(quotas.items())))
    return 0


def _entity_text(key: Iterable[Tuple[str, Optional[str]]]) -> str:
    return ",".join(f"{kind}={'<default>' if name is None else name}" for kind, name in key)


def cmd_user_scram(args: argparse.Namespace) -> int:
    """``kwire user-scram describe | alter`` (kafka-configs.sh's
    ``--entity-type users`` SCRAM credentials). The password is read from
    stdin with ``--password -``, keeping it out of the process list."""
    from kwire.admin import (Admin, ScramCredentialInfo, UserScramCredentialDeletion,
                             UserScramCredentialUpsertion)

    with Admin(client_config(args)) as a:
        if args.action == "describe":
            found = a.describe_user_scram_credentials(args.user or None)
            print_rows(args, ["user", "mechanism", "iterations"], (
                {"user": user, "mechanism": c.mechanism, "iterations": c.iterations}
                for user, d in sorted(found.items()) for c in d.credential_infos))
            return 0
        if not args.user or not args.mechanism:
            raise SystemExit("kwire user-scram alter: give --user and --mechanism")
        if args.delete:
            changes: List[Any] = [UserScramCredentialDeletion(u, m) for u in args.user for m in args.mechanism]
        else:
            if not args.password:
                raise SystemExit("kwire user-scram alter: give --password (- reads it from stdin) or --delete")
            password = sys.stdin.readline().rstrip("\n") if args.password == "-" else args.password
            changes = [UserScramCredentialUpsertion(u, ScramCredentialInfo(m, args.iterations), password)
                       for u in args.user for m in args.mechanism]
        a.alter_user_scram_credentials(changes)
    print(f"{'deleted' if args.delete else 'set'} {len(changes)} SCRAM credentials", file=sys.stderr)
    return 0


def _offsets_file(path: str, key: str) -> List[Dict[str, Any]]:
    """The ``partitions`` of a kafka-*.sh JSON file, each with ``key``."""
    keys = list(dict.fromkeys(["topic", "partition", key]))
    shape = '{"partitions": [{' + ", ".join(f'"{k}"' for k in keys) + '}, ...]}'
    try:
        with open(path) as f:
            parts = json.load(f)["partitions"]
        lacking = [p for p in parts if not set(keys) <= set(p)]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"kwire: {path}: expected {shape} ({type(e).__name__}: {e})") from None
    if lacking:
        raise SystemExit(f"kwire: {path}: expected {shape}; this entry is not: {json.dumps(lacking[0])}")
    return parts


def cmd_delete_records(args: argparse.Namespace) -> int:
    """``kwire delete-records`` (kafka-delete-records.sh's): the records of
    each partition before an offset; prints the new low watermarks."""
    from kwire.admin import Admin

    if args.offset_json_file:
        before = {(p["topic"], int(p["partition"])): int(p["offset"])
                  for p in _offsets_file(args.offset_json_file, "offset")}
    elif args.topic is not None and args.partition is not None and args.offset is not None:
        before = {(args.topic, args.partition): args.offset}
    else:
        raise SystemExit("kwire delete-records: give --offset-json-file, or --topic, --partition and --offset")
    with Admin(client_config(args)) as a:
        low = a.delete_records(before)
    print_rows(args, ["topic", "partition", "low_watermark"], (
        {"topic": tp.topic, "partition": tp.partition, "low_watermark": off} for tp, off in sorted(low.items())))
    return 0


def _named_partitions(args: argparse.Namespace) -> Optional[List[Tuple[str, int]]]:
    if args.path_to_json_file:
        return [(p["topic"], int(p["partition"])) for p in _offsets_file(args.path_to_json_file, "partition")]
    if args.topic is not None:
        if args.partition is None:
            raise SystemExit("kwire leader-election: --topic needs --partition")
        return [(args.topic, args.partition)]
    if not args.all_topic_partitions:
        raise SystemExit("kwire leader-election: give --topic and --partition, --path-to-json-file, or "
                         "--all-topic-partitions")
    return None


def cmd_leader_election(args: argparse.Namespace) -> int:
    """``kwire leader-election`` (kafka-leader-election.sh's)."""
    from kwire.admin import Admin

    partitions = _named_partitions(args)
    with Admin(client_config(args)) as a:
        outcome = a.elect_leaders(partitions, _snake(args.election_type))
    print_rows(args, ["topic", "partition", "outcome"], (
        {"topic": tp.topic, "partition": tp.partition, "outcome": "elected" if err is None else str(err)}
        for tp, err in sorted(outcome.items())))
    return 0


def _reassignment_plan(path: str) -> Dict[Tuple[str, int], List[int]]:
    return {(p["topic"], int(p["partition"])): [int(r) for r in p["replicas"]]
            for p in _offsets_file(path, "replicas")}


def _reassign_rows(a: Any, plan: Dict[Tuple[str, int], List[int]]) -> Iterable[Dict[str, Any]]:
    """``--verify``: each partition's replicas now against the plan's."""
    ongoing = a.list_partition_reassignments(list(plan))
    topics = a.describe_topics(sorted({t for t, _ in plan}))
    for (topic, partition), wanted in sorted(plan.items()):
        now = next((list(p.replicas) for p in topics[topic].partitions if p.partition == partition), [])
        state = "in progress" if (topic, partition) in ongoing else "complete" if now == wanted else "not started"
        yield {"topic": topic, "partition": partition, "replicas": now, "target": wanted, "state": state}


def cmd_reassign_partitions(args: argparse.Namespace) -> int:
    """``kwire reassign-partitions --list | --execute | --verify | --cancel``
    (kafka-reassign-partitions.sh's, with its JSON file)."""
    from kwire.admin import Admin

    modes = [m for m in ("list", "execute", "verify", "cancel") if getattr(args, m)]
    if len(modes) != 1:
        raise SystemExit("kwire reassign-partitions: give one of --list, --execute, --verify, --cancel")
    if modes[0] != "list" and not args.reassignment_json_file:
        raise SystemExit(f"kwire reassign-partitions --{modes[0]}: give --reassignment-json-file")
    with Admin(client_config(args)) as a:
        if modes[0] == "list":
            print_rows(args, ["topic", "partition", "replicas", "adding", "removing"], (
                {"topic": t, "partition": p, "replicas": list(r.replicas), "adding": list(r.adding_replicas),
                 "removing": list(r.removing_replicas)}
                for (t, p), r in sorted(a.list_partition_reassignments().items())))
            return 0
        plan = _reassignment_plan(args.reassignment_json_file)
        if modes[0] == "execute":
            a.alter_partition_reassignments(plan)
            print(f"started {len(plan)} reassignments; --verify shows their progress", file=sys.stderr)
        elif modes[0] == "cancel":
            a.alter_partition_reassignments({tp: None for tp in plan})
            print(f"cancelled the reassignments of {len(plan)} partitions", file=sys.stderr)
        else:
            print_rows(args, ["topic", "partition", "replicas", "target", "state"], _reassign_rows(a, plan))
    return 0


def _add_acls(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["list", "add", "remove"])
    for kind in ("topic", "group", "transactional_id"):
        p.add_argument(f"--{kind.replace('_', '-')}", dest=kind, action="append", metavar="NAME")
    p.add_argument("--cluster", action="store_true", help="the cluster resource")
    p.add_argument("--resource-pattern-type", help="literal (add's default), prefixed, match or any (list's default)")
    p.add_argument("--allow-principal", action="append", metavar="TYPE:NAME")
    p.add_argument("--deny-principal", action="append", metavar="TYPE:NAME")
    p.add_argument("--allow-host", action="append", metavar="HOST", help="add: (default: *)")
    p.add_argument("--deny-host", action="append", metavar="HOST", help="add: (default: *)")
    p.add_argument("--principal", action="append", metavar="TYPE:NAME", help="list, remove: only this principal's")
    p.add_argument("--operation", action="append", help="Read, Write, Create, Delete, Alter, Describe, "
                                                        "ClusterAction, DescribeConfigs, AlterConfigs, "
                                                        "IdempotentWrite, CreateTokens, DescribeTokens, All")
    p.add_argument("--producer", action="store_true", help="add: a producer's (Write, Describe, Create on --topic)")
    p.add_argument("--consumer", action="store_true", help="add: a consumer's (Read, Describe on --topic; "
                                                           "Read on --group)")
    p.add_argument("--force", action="store_true", help="remove: remove (default: show what matches)")


def _add_quotas(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["describe", "alter"])
    for kind in ("user", "client-id", "ip"):
        p.add_argument(f"--{kind}", metavar="NAME")
    for kind in ("user", "client", "ip"):
        p.add_argument(f"--{kind}-default", action="store_true", help=f"the default {kind} entity")
    p.add_argument("--add", action="append", metavar="NAME=VALUE", help="alter: producer_byte_rate=1048576, "
                                                                       "consumer_byte_rate, request_percentage, ...")
    p.add_argument("--delete", action="append", metavar="NAME", help="alter: remove this quota")
    p.add_argument("--strict", action="store_true", help="describe: only entities of exactly these types")
    p.add_argument("--validate-only", action="store_true")


def _add_user_scram(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["describe", "alter"])
    p.add_argument("--user", action="append", metavar="NAME", help="(repeatable; describe: default every user)")
    p.add_argument("--mechanism", action="append", choices=["SCRAM-SHA-256", "SCRAM-SHA-512"])
    p.add_argument("--iterations", type=int, default=8192, help="alter: PBKDF2 iterations (4096 to 16384)")
    p.add_argument("--password", help="alter: the password (- reads it from stdin)")
    p.add_argument("--delete", action="store_true", help="alter: remove the credentials")


def _add_delete_records(p: argparse.ArgumentParser) -> None:
    p.add_argument("--offset-json-file", metavar="FILE", help='{"partitions": [{"topic", "partition", "offset"}]}')
    p.add_argument("--topic")
    p.add_argument("--partition", type=int)
    p.add_argument("--offset", type=int, help="delete the records before this offset (-1: all)")


def _add_leader_election(p: argparse.ArgumentParser) -> None:
    p.add_argument("--election-type", required=True, choices=["preferred", "unclean", "PREFERRED", "UNCLEAN"])
    p.add_argument("--topic")
    p.add_argument("--partition", type=int)
    p.add_argument("--path-to-json-file", metavar="FILE", help='{"partitions": [{"topic", "partition"}]}')
    p.add_argument("--all-topic-partitions", action="store_true", help="(preferred elections only)")


def _add_reassign(p: argparse.ArgumentParser) -> None:
    for mode in ("list", "execute", "verify", "cancel"):
        p.add_argument(f"--{mode}", action="store_true")
    p.add_argument("--reassignment-json-file", metavar="FILE",
                   help='{"partitions": [{"topic", "partition", "replicas": [broker ids]}]}')


COMMANDS: List[Tuple[str, str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]] = [
    ("acls", "list, add or remove ACLs (as kafka-acls.sh)", _add_acls, cmd_acls),
    ("quotas", "describe or alter client quotas (user, client id, ip)", _add_quotas, cmd_quotas),
    ("user-scram", "describe or alter users' SCRAM credentials", _add_user_scram, cmd_user_scram),
    ("delete-records", "delete a partition's records before an offset (as kafka-delete-records.sh)",
     _add_delete_records, cmd_delete_records),
    ("leader-election", "elect preferred or unclean leaders (as kafka-leader-election.sh)", _add_leader_election,
     cmd_leader_election),
    ("reassign-partitions", "list, execute, verify or cancel replica moves (as kafka-reassign-partitions.sh)",
     _add_reassign, cmd_reassign_partitions),
]


def add_cluster_commands(sub: Any, common: Callable[[argparse.ArgumentParser], None]) -> None:
    """Register the subcommands, each with the client options (``common``) and ``--json``."""
    for name, help_text, add, run in COMMANDS:
        p = sub.add_parser(name, help=help_text)
        common(p)
        add(p)
        p.add_argument("--json", action="store_true", help="JSON lines")
        p.set_defaults(func=run)
