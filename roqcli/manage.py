"""The commands that talk to a running cluster: ``roq queue ...``, ``roq events``, ``roq hosts``, ``roq watch``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import time
from typing import Any

from roq.errors import ConfigError, ProtocolError, RoQError
from roq.runtime import ExitCode
from roq.wire.shape import to_document
from roq.wire.status import JournalStatus, QueueStatus, latency, traffic
from roq import defaults

__all__ = ["ClientSettings", "manage"]


@dataclasses.dataclass(frozen=True)
class ClientSettings:
    """``[client]``: where the other commands find the cluster."""

    zk: str = defaults.ZK
    root: str = defaults.ROOT
    timeout: float = 30.0
    credentials: str = ""  # a credentials directory, for a cluster that serves CURVE ("" = plaintext)


def manage(args: argparse.Namespace, s: ClientSettings) -> int:
    from client import QueueManager

    with QueueManager(s.zk, root=s.root, timeout=s.timeout, credentials=s.credentials or None) as qm:
        if args.command == "hosts":
            return _show(args, qm.hosts(), _host_line)
        if args.command == "status":
            return _status(args, qm)
        if args.command == "watch":
            return _watch(args, qm, s.credentials)
        if args.command == "events":
            return _events(args, qm)
        if args.command == "acl":
            return _acl(args, qm)
        if args.command == "audit":
            return _show(args, qm.audit(args.limit), _audit_line)
        if args.command == "federation":
            return _show(args, qm.federation(), _federation_lines if args.action == "status" else _links_lines)
        if args.command == "journal":
            return _journal(args, qm)
        action = args.action
        if action == "create":
            return _show(args, qm.create(args.name, args.host, exchanges=args.exchanges), _queue_line)
        if action == "list":
            return _show(args, qm.list(), _queue_line)
        if action == "stats":
            return _show(args, qm.stats(args.name), None)
        if action == "rules":
            if args.changes:
                return _show(args, qm.set_rules(args.name, _parse_changes(args.changes)), None)
            return _show(args, qm.get_rules(args.name), None)
        getattr(qm, action)(args.name)
        print(f"queue {args.name}: {action} done")
        return ExitCode.OK


def _acl(args: argparse.Namespace, qm: Any) -> int:
    if args.action == "list":
        found = qm.acl()
        if not found["Enforced"] and not args.json:
            print("no permissions set: every key of the keyring may do anything")
        return _show(args, found["Rules"], _rule_line)
    change = qm.grant if args.action == "grant" else qm.revoke
    done = change(args.principal, args.permission, args.queues, allow=not args.deny, prefixes=tuple(args.prefix))
    if not args.json:
        print(f"{'granted' if args.action == 'grant' else 'revoked'}; the rules now:")
    return _show(args, done["Rules"], _rule_line)


def _journal(args: argparse.Namespace, qm: Any) -> int:
    if args.action == "stats":
        found = qm.journal(args.name)
        if args.json:
            return _show(args, to_document(found) if found is not None else {}, None)
        if found is None or not found.journal:
            print(f"queue {args.name}: durability {found.durability if found is not None else 'none'}, "
                  "no journal running")
            return ExitCode.OK
        print(_journal_line(found))
        return ExitCode.OK
    found = qm.verify_journal(args.name, timeout=max(qm.timeout, 120.0))
    if not args.json:
        print(f"queue {args.name}: {found['segments']} segment(s), offsets {found['first_offset']}.."
              f"{found['end_offset']}, {found['size_bytes']:,} bytes: "
              f"{'sound' if not found['problems'] else str(len(found['problems'])) + ' problem(s)'}")
        for line in found["problems"]:
            print(f"  {line}")
        return ExitCode.FAILURE if found["problems"] else ExitCode.OK
    _show(args, found, None)
    return ExitCode.FAILURE if found["problems"] else ExitCode.OK


def _journal_line(j: JournalStatus) -> str:
    state = "up" if j.alive else f"silent for {j.silent_s or 0:.1f}s"
    return (f"journal {j.journal} ({state}), durability {j.durability}, intake {j.intake}, reads "
            f"{j.reads}\n  offsets {j.first_offset}..{j.next_offset}, {j.size_bytes or 0:,} "
            f"bytes in {j.segments} segment(s), {j.unsynced_bytes or 0:,} not yet synced\n  syncs "
            f"{j.syncs} in the last period (mean {j.sync_ms or 0:.2f} ms, longest "
            f"{j.sync_max_ms or 0:.2f} ms), {j.write_failures or 0} failed writes"
            + (f"; last error: {j.error}" if j.error else "")
            + "".join(f"\n  replica {r.replica}: {r.role}{' (a learner)' if r.learner else ''}, epoch {r.epoch}, "
                      f"log to {r.end}, "
                      f"{'in sync' if r.in_sync else f'{r.lag} behind'}" + ("" if r.alive else
                                                                          f", silent for {r.silent_s:.1f}s")
                      for r in j.replicas or []))


def _audit_line(e: dict[str, Any]) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.get("time", 0)))
    said = f": {e['comment']}" if e.get("comment") and e.get("result") != "OK" else ""
    what = " ".join(str(e[k]) for k in ("action", "queue", "detail") if e.get(k))
    return f"{when}  {e.get('principal') or '-':<12} {e.get('via', ''):<10} {what} -> {e.get('result', '')}{said}"


def _rule_line(r: dict[str, Any]) -> str:
    where = "" if r["permission"] == "admin" else f" on {r['queues']}"
    keys = f" (keys {', '.join(r['prefixes'])})" if r.get("prefixes") else ""
    return f"{'allow' if r['allow'] else 'deny '} {r['permission']:<9} to {r['principal']}{where}{keys}"


def _parse_changes(changes: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for change in changes:
        key, sep, value = change.partition("=")
        if not sep or not key:
            raise ConfigError(f"expected KEY=VALUE, got {change!r}")
        if value.strip().lower() in ("", "none", "null"):
            out[key] = None  # unset: the threshold or default applies again
            continue
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value  # the GCM names the key and the wrong type
    return out


def _show(args: argparse.Namespace, value: Any, line: Any) -> int:
    if args.json or line is None:
        print(json.dumps(value, indent=None if args.json else 2, sort_keys=True))
    elif isinstance(value, list):
        if not value:
            print("(none)")
        for item in value:
            print(line(item))
    else:
        print(line(value))
    return ExitCode.OK


def _federation_lines(f: dict[str, Any]) -> str:
    if not f["Name"]:
        return "this cluster is in no tree (started without a cluster name)"
    where = f"under {' / '.join(f['Path'])}" if f["Path"] else "the root" if f["Role"] == "root" else "no parent yet"
    lines = [f"{f['Name']} ({f['Role']}), {where}; {len(f['Children'])} child(ren)"]
    for c in f["Children"]:
        below = f", below it: {', '.join(c['Below'])}" if c["Below"] else ""
        lines.append(f"  {c['Name']:<20} key {c['Key'] or '-'}  incarnation {c['Incarnation']}{below}")
    if f["Refusals"]:
        lines.append("links refused: " + ", ".join(f"{r} {n}" for r, n in sorted(f["Refusals"].items())))
    return "\n".join(lines)


def _links_lines(f: dict[str, Any]) -> str:
    if not f["Name"]:
        return "this cluster is in no tree (started without a cluster name)"
    if not f["Children"]:
        return f"{f['Name']}: no child's link"
    lines = []
    for c in f["Children"]:
        lines.append(f"{c['Name']}: hello {c.get('HeardS', 0.0):.1f} s ago, {len(c.get('Links', []))} crossing(s)")
        for x in c.get("Links", []):
            limit = f"{x['RateLimit'] * 8 / 1e6:g} Mbit/s" if x["RateLimit"] else "none"
            lines.append(f"  into {x['Target']}: {x['Records']:,} records, {x['Bytes'] / 1e6:.1f} MB sent"
                         + (" compressed" if x.get("Compressed") else "")
                         + f", {x.get('BytesRead', 0) / 1e6:.1f} MB read; backlog "
                         f"{x['Backlog'] / 1e3:.1f} kB; {x['Moves']} move(s); rate limit {limit}; carries "
                         + (", ".join(repr(p) for p in x["Carrying"]) or "nothing")
                         + (f"; REFUSED there: {x['Refused']}" if x.get("Refused") else ""))
    return "\n".join(lines)


def _queue_line(q: dict[str, Any]) -> str:
    xs = ", ".join(f"{x['Id']}@{x['Host']}" for x in q.get("Exchanges", []))
    return f"{q['Name']:<20} {q['State']:<9} monitor {q.get('Monitor') or '-'}  exchanges [{xs}]"


def _host_line(h: dict[str, Any]) -> str:
    link = h.get("LinkBytesPerS", 0.0)
    net = f"net {h['NetBytesPerS'] / 1e3:.1f} kB/s" + (f" ({h.get('NetPercent', 0.0):.0f}% of {link * 8 / 1e6:g} Mbit/s)"
                                                       if link else "")
    return (f"{h['Address']:<15} exchanges {h['AssignedExchanges']}/{h['MaxExchanges']}  "
            f"cpu {h['CpuPercent']:.0f}% of {h.get('Cpus', 0.0):g} cores  memory {h['MemoryPercent']:.0f}%  {net}")


STATUS_QUEUES = 20  # queues whose monitors `roq status` asks for their figures (the others: a count)


def _status(args: argparse.Namespace, qm: Any) -> int:
    """One screen: the leader, every host, and the busiest queues with their traffic and events' counts."""
    leader = qm.leader()
    hosts = qm.hosts()
    queues = qm.list()
    stats: dict[str, QueueStatus | None] = {}
    for q in [q for q in queues if q["State"] == "running"][:STATUS_QUEUES]:
        try:
            stats[q["Name"]] = qm.status(q["Name"])
        except RoQError:  # removed or restarting meanwhile (or a status that does not read): shown without figures
            stats[q["Name"]] = None
    rows = [_queue_status(q, stats.get(q["Name"])) for q in queues]
    if args.json:
        print(json.dumps({"leader": leader, "hosts": hosts, "queues": rows}, sort_keys=True))
        return ExitCode.OK
    states: dict[str, int] = {}
    for q in queues:
        states[q["State"]] = states.get(q["State"], 0) + 1
    print(f"leader   {leader['id']}  management {leader['management']}"
          + (f"  http {leader['http']}" if leader.get("http") else ""))
    print(f"hosts    {len(hosts)}   queues {len(queues)}"
          + (f" ({', '.join(f'{n} {s}' for s, n in sorted(states.items()))})" if queues else "")
          + f"   records/s in {sum(r['records_in_per_s'] for r in rows):,.0f}"
          + f" out {sum(r['records_out_per_s'] for r in rows):,.0f}")
    print()
    for h in hosts:
        print("  " + _host_line(h))
    if not queues:
        print("\n(no queues)")
        return ExitCode.OK
    print(f"\n  {'QUEUE':<20} {'STATE':<9} {'EXCH':>4} {'PUBS':>5} {'SUBS':>5} {'IN/S':>10} {'OUT/S':>10} "
          f"{'P50 MS':>7}  MOVES FAILOVERS SCALE+/-")
    for r in sorted(rows, key=lambda r: (-r["records_in_per_s"], r["name"]))[:STATUS_QUEUES]:
        p50 = f"{r['latency_p50_ms']:.1f}" if r["latency_p50_ms"] is not None else "-"
        print(f"  {r['name']:<20.20} {r['state']:<9} {r['exchanges']:>4} {r['publishers']:>5} {r['subscribers']:>5} "
              f"{r['records_in_per_s']:>10,.0f} {r['records_out_per_s']:>10,.0f} {p50:>7}  {r['relocations']:>5} "
              f"{r['failovers']:>9} {r['scale_outs']:>3}/{r['scale_ins']}")
    if len(rows) > STATUS_QUEUES:
        print(f"  ... and {len(rows) - STATUS_QUEUES} more queues (roq queue list)")
    return ExitCode.OK


def _queue_status(q: dict[str, Any], status: QueueStatus | None) -> dict[str, Any]:
    """A queue's row: its summary (from the queue list), and its monitor's figures when it gave them."""
    return {
        "name": q["Name"], "state": q["State"],
        "exchanges": (len(status.exchanges) if status is not None else 0) or len(q.get("Exchanges", [])),
        **{k: v for k, v in traffic(status).items() if not k.startswith("bytes")},
        "latency_p50_ms": latency(status)["p50_median"],
        **{k: status.count(k) if status is not None else 0 for k in ("relocations", "failovers", "scale_outs", "scale_ins")},
    }


def _event_line(e: dict[str, Any]) -> str:
    t = float(e.get("time", 0.0)) if isinstance(e.get("time"), (int, float)) else 0.0
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) + f".{int(t * 1000) % 1000:03d}"
    return f"{stamp}  {e.get('origin', '?'):<7}  {e.get('kind', '?'):<20}  {e.get('text', '')}"


def _events(args: argparse.Namespace, qm: Any) -> int:
    if not 1 <= args.limit <= 1000:
        raise ConfigError(f"--limit must be between 1 and 1000, got {args.limit}")

    def show(events: list[dict[str, Any]]) -> None:
        for e in events:
            print(json.dumps(e, sort_keys=True) if args.json else _event_line(e), flush=True)

    def key(e: dict[str, Any]) -> tuple[Any, ...]:
        return e.get("origin"), e.get("seq"), e.get("time")

    # following: read every event stored (each source keeps at most 200), so none falls between two reads
    events = qm.events(args.name, 1000 if args.follow else args.limit)
    show(events[-args.limit:])
    if not args.follow:
        if not events and not args.json:
            print("(no events)")
        return ExitCode.OK
    seen = {key(e) for e in events}

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupt)  # even when started with SIGINT ignored (in the background)
    while True:  # until Ctrl-C (exit 130)
        time.sleep(0.5)
        latest = qm.events(args.name, 1000)
        show([e for e in latest if key(e) not in seen])
        seen = {key(e) for e in latest}


def _watch(args: argparse.Namespace, qm: Any, credentials: str) -> int:
    import zmq

    from roq.wire import management as m
    from roq.config import CurveClient
    from roq.sockets import poll_ms

    curve = CurveClient.load(credentials) if credentials else None
    ctx = zmq.Context()
    seen = 0
    try:
        while not args.count or seen < args.count:
            leader = qm.leader()
            sub = ctx.socket(zmq.SUB)
            sub.setsockopt(zmq.LINGER, 0)
            sub.setsockopt(zmq.SUBSCRIBE, b"")
            if curve is not None:
                curve.apply(sub)
            sub.connect(leader["broadcast"])
            print(f"# watching {leader['id']} at {leader['broadcast']}", flush=True)
            try:
                while not args.count or seen < args.count:
                    if not sub.poll(poll_ms(1.0)):
                        if qm.leader().get("id") != leader.get("id"):
                            break  # a new leader: follow it
                        continue
                    try:
                        queues, hosts = m.parse_broadcast(sub.recv_multipart())
                    except ProtocolError as exc:
                        print(f"# unreadable broadcast: {exc}", flush=True)
                        continue
                    seen += 1
                    if args.json:
                        print(json.dumps({"Queues": queues, "Hosts": hosts}, sort_keys=True), flush=True)
                    else:
                        qs = ", ".join(f"{q['Name']}({q['State']}, {len(q['Exchanges'])} exchanges)" for q in queues) or "none"
                        hs = ", ".join(f"{h['Address']}({h['AssignedExchanges']}/{h['MaxExchanges']})" for h in hosts) or "none"
                        print(f"{time.strftime('%H:%M:%S')} queues: {qs} | hosts: {hs}", flush=True)
            finally:
                sub.close()
    finally:
        ctx.term()
    return ExitCode.OK
