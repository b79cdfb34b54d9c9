"""Share groups (KIP-932) on Apache Kafka 4.4: records/s and client CPU of
kwire's ShareConsumer (``poll``, and ``poll_columnar`` into Arrow), Java's
KafkaShareConsumer (4.4) and confluent-kafka's preview ShareConsumer
(librdkafka 2.16), on the same topic, with 1 and 4 members, in one run.

Each round makes a new share group per client (``share.auto.offset.reset``
earliest) on the same topic of ``--records`` records (16-byte key,
100-byte value, ``--partitions`` partitions, written by kwire in 16 KiB
batches) and starts its members, each a process of its own (so 4 Python
members are not one interpreter's GIL), in implicit acknowledgement mode
(every record accepted by the next poll), each with ``max.poll.records``
500 (``--max-poll-records``: kwire and Java ask each ShareFetch for that
many records). A member stops after
``--idle`` seconds without a record. The rate is the group's: records
over the time from the first record any member got to the last one (the
joins and the idle wait not counted); CPU is the members' own from their
first record to their last (start-up and imports not counted), summed,
per million records; the broker's CPU is counted over the whole round
(joins and idle wait included), per million records. Clients take turns in each round, and each one's
best round counts (noise on this shared 2-core machine, which also runs
the broker, hits all alike). Then the ratios: kwire to confluent-kafka
(target 2x) and kwire's columns to confluent-kafka (target 5x), and to
Java.

    python -m benchmarks.compare_share [--records 300000] [--partitions 4] [--members 1,4] [--rounds 2]
                                       [--clients kwire,kwire-columnar,confluent,java] [--max-poll-records 500]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Dict, List, Tuple

from benchmarks.procstat import process_cpu

CLIENTS = ("kwire", "kwire-columnar", "confluent", "java")
TARGETS = [("kwire", "confluent", 2.0), ("kwire-columnar", "confluent", 5.0)]
MAX_POLL_RECORDS = 500          # (--max-poll-records)


# ------------------------------------------------------------------ a member (a process of its own)
def member(client: str, bootstrap: str, group: str, topic: str, idle: float) -> Dict[str, Any]:
    """Consume as one member until ``idle`` s pass without a record: count, first and last record's wall
    clock, and this process's CPU seconds from the first record to the last."""
    count, first, last, cpu, cpu0 = 0, 0.0, 0.0, 0.0, 0.0
    global MAX_POLL_RECORDS
    MAX_POLL_RECORDS = int(os.environ.get("KWIRE_BENCH_MAX_POLL_RECORDS", MAX_POLL_RECORDS))
    if client == "confluent":
        from confluent_kafka import ShareConsumer as CK

        c = CK({"bootstrap.servers": bootstrap, "group.id": group, "max.poll.records": str(MAX_POLL_RECORDS)})
        c.subscribe([topic])
        poll = lambda: sum(1 for m in c.poll(0.5) if m.error() is None)       # noqa: E731
    else:
        from kwire.share import ShareConsumer

        c = ShareConsumer(bootstrap_servers=bootstrap, group_id=group, max_poll_records=MAX_POLL_RECORDS)
        c.subscribe([topic])
        if client == "kwire-columnar":
            poll = lambda: sum(b.num_rows for b in c.poll_columnar(500).values())   # noqa: E731
        else:
            poll = lambda: sum(len(rs) for rs in c.poll(500).values())             # noqa: E731
    seen = time.monotonic()
    while time.monotonic() - seen < idle or not count:
        n = poll()
        if n:
            count += n
            seen = time.monotonic()
            last = time.time()
            cpu = _cpu()
            if not first:
                first, cpu0 = last, cpu
        elif not count and time.monotonic() - seen > 120:
            break
    c.close()
    return {"count": count, "first": first, "last": last, "cpu": cpu - cpu0 if count else 0.0}


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


# ------------------------------------------------------------------ a group of members
def _group(bootstrap: str) -> str:
    from kwire.admin import Admin
    from kwire.admin_ops.configs import AlterConfigOp

    group = f"bench-{uuid.uuid4().hex[:10]}"
    with Admin(bootstrap_servers=bootstrap) as a:
        a.incremental_alter_configs({("group", group): [AlterConfigOp("share.auto.offset.reset", "earliest")]})
    return group


def run_group(client: str, members: int, bootstrap: str, topic: str, idle: float, broker_pid: int = 0
              ) -> Dict[str, float]:
    group = _group(bootstrap)
    broker_cpu = process_cpu(broker_pid)
    max_poll = os.environ.get("KWIRE_BENCH_MAX_POLL_RECORDS", str(MAX_POLL_RECORDS))
    if client == "java":
        from support.java_peer import java_share_command

        cmd, stdin = java_share_command({"bootstrap.servers": bootstrap, "group.id": group,
                                         "max.poll.records": max_poll}, [topic],
                                        int(max(idle, 15.0) * 1000), 600_000)    # (its idle time counts from its start)
        procs = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  text=True) for _ in range(members)]
        for p in procs:
            p.stdin.write(stdin)
            p.stdin.close()
        outs = []
        for p in procs:
            done = [json.loads(line) for line in p.stdout if line.startswith("{")][-1]
            p.wait(60)
            outs.append({"count": done["count"], "first": done["first_ms"] / 1000, "last": done["last_ms"] / 1000,
                         "cpu": done["cpu_ms"] / 1000})
    else:
        procs = [subprocess.Popen([sys.executable, "-m", "benchmarks.compare_share", "--member", client, bootstrap,
                                   group, topic, str(idle)], stdout=subprocess.PIPE, text=True,
                                  cwd=str(Path(__file__).resolve().parents[1])) for _ in range(members)]
        outs = [json.loads(p.communicate(timeout=900)[0].strip().splitlines()[-1]) for p in procs]
    got = [o for o in outs if o["count"]]
    count = sum(o["count"] for o in outs)
    took = max(o["last"] for o in got) - min(o["first"] for o in got)
    # the broker's CPU over the whole round (the joins and the idle wait included: an upper bound)
    broker_cpu = process_cpu(broker_pid) - broker_cpu
    return {"count": count, "seconds": took, "rate": count / took if took > 0 else float("nan"),
            "cpu_per_m": sum(o["cpu"] for o in outs) / count * 1e6 if count else float("nan"),
            "broker_cpu_per_m": broker_cpu / count * 1e6 if count else float("nan")}


def _fill(bootstrap: str, records: int, partitions: int) -> str:
    from kwire import Producer
    from kwire.admin import Admin, NewTopic

    topic = f"share-bench-{uuid.uuid4().hex[:8]}"
    with Admin(bootstrap_servers=bootstrap) as a:
        a.create_topics([NewTopic(topic, partitions)])
    key, value = b"k" * 16, b"v" * 100
    with Producer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=16384) as p:
        for i in range(records):
            p.send(topic, value, key=key, partition=i % partitions)
    return topic


def main(argv: Any = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--member":
        client, bootstrap, group, topic, idle = argv[1:6]
        print(json.dumps(member(client, bootstrap, group, topic, float(idle))))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--members", default="1,4")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--idle", type=float, default=4.0)
    ap.add_argument("--clients", default=",".join(CLIENTS))
    ap.add_argument("--max-poll-records", type=int, default=MAX_POLL_RECORDS)
    args = ap.parse_args(argv)
    os.environ["KWIRE_BENCH_MAX_POLL_RECORDS"] = str(args.max_poll_records)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from support.kafka import start_kafka

    clients = [c for c in args.clients.split(",") if c]
    sizes = [int(m) for m in args.members.split(",")]
    broker = start_kafka(progress=lambda m: print(f"[kafka] {m}", file=sys.stderr))
    try:
        bootstrap = broker.bootstrap("plaintext")
        topic = _fill(bootstrap, args.records, args.partitions)
        best: Dict[Tuple[str, int], Dict[str, float]] = {}
        for r in range(args.rounds):
            for members in sizes:
                for client in clients:
                    res = run_group(client, members, bootstrap, topic, args.idle, broker.pid)
                    print(f"round {r + 1}/{args.rounds} {client} x{members}: {res}", file=sys.stderr)
                    if res["count"] < args.records:
                        print(f"  {client} x{members} got {res['count']} of {args.records} records", file=sys.stderr)
                    key = (client, members)
                    if key not in best or res["rate"] > best[key]["rate"]:
                        best[key] = res
        _table(best, clients, sizes, args)
    finally:
        broker.stop()
    return 0


def _table(best: Dict[Tuple[str, int], Dict[str, float]], clients: List[str], sizes: List[int], args: Any) -> None:
    print(f"\nshare group of {args.records:,} records (16-byte key, 100-byte value), {args.partitions} partitions, "
          f"Kafka 4.4, implicit acknowledgement, max.poll.records {args.max_poll_records}; best of {args.rounds} "
          f"rounds")
    print(f"{'client':<16}{'members':>8}{'records/s':>12}{'CPU s/M':>10}{'broker s/M':>12}{'vs confluent':>14}"
          f"{'vs java':>10}")
    for members in sizes:
        for client in clients:
            res = best[(client, members)]
            ratio = lambda peer: (f"{res['rate'] / best[(peer, members)]['rate']:.2f}x"   # noqa: E731
                                  if (peer, members) in best else "-")
            print(f"{client:<16}{members:>8}{res['rate']:>12,.0f}{res['cpu_per_m']:>10.2f}"
                  f"{res['broker_cpu_per_m']:>12.2f}{ratio('confluent'):>14}"
                  f"{ratio('java'):>10}")
    for client, peer, want in TARGETS:
        for members in sizes:
            if (client, members) in best and (peer, members) in best:
                got = best[(client, members)]["rate"] / best[(peer, members)]["rate"]
                print(f"target {client} >= {want:g}x {peer} with {members} member(s): {got:.2f}x "
                      f"{'met' if got >= want else 'missed'}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    sys.exit(main())
