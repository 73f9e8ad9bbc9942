"""kill -9 of an exchange under load: noticed within 1.5 s, publishers fail over, nothing lost."""

from __future__ import annotations

import os
import signal
import time

from simulation.audit import compare


def test_exchange_crash_under_load(make_cluster, loads):
    cluster = make_cluster(exchanges=3)
    m = cluster.monitor_endpoint
    subs = [loads.start("subscribe", m, "--prefix", p, "--idle-exit", "5") for p in ("", "a.")]
    pubs = [
        loads.start("publish", m, "--rate", "3000", "--duration", "120", "--keys", keys)
        for keys in ("a.1", "a.2,b.1", "b.2", "a.3")
    ]
    status = cluster.wait_for(
        lambda s: len(s.publishers) == 4 and sum(x.records_per_s for x in s.exchanges) > 5000, 15,
        "4 publishers sending",
    )
    victim = max(status.exchanges, key=lambda x: x.publishers)
    assert victim.publishers >= 1
    on_victim = {p.id for p in status.publishers if p.exchange == victim.id}
    killed_at = time.time()
    cluster.kill_exchange(victim.id)

    def victim_lost(events):
        return next((e for e in events if e["kind"] == "exchange_lost" and e["exchange"] == victim.id
                     and e["time"] >= killed_at), None)

    status = cluster.wait_for(lambda s: victim_lost(s.events) is not None, 5, "the monitor to notice")
    lost = victim_lost(status.events)
    detection = lost["time"] - killed_at
    print(f"exchange {victim.id} killed; declared lost after {detection:.3f}s")
    assert detection <= 1.5
    cluster.wait_for(
        lambda s: all(p.exchange != victim.id and not p.relocating for p in s.publishers), 10,
        "publishers to fail over",
    )
    cluster.wait_for(
        lambda s: all(p.records_per_s > 1000 for p in s.publishers if p.id in on_victim), 10,
        "the failed-over publishers to send through their new exchanges",
    )
    sent, failovers = {}, {}
    for pub in pubs:
        report = loads.report(pub, stop=True)
        assert report["error"] == ""
        sent[report["publisher"]] = report["keys"]
        failovers[report["publisher"]] = report["stats"]["failovers"]
    # a machine busy enough can keep a live exchange from beating for a second: taken for dead, its publishers fail
    # over too (and lose nothing, as the audit below checks); with none taken for dead, exactly the victim's did
    taken_for_dead = [e["text"] for e in cluster.status().events
                      if e["kind"] == "exchange_lost" and e["seq"] != lost["seq"]]
    print("taken for dead besides the victim:", taken_for_dead or "none")
    assert all(failovers[p] >= 1 for p in on_victim)
    if not taken_for_dead:
        assert failovers == {p: int(p in on_victim) for p in failovers}
    loads.publishers_done(*subs)
    for sub in subs:
        report = loads.report(sub)
        audit = compare(report["audit"], sent, report["prefix"].encode())
        assert audit["expected"] > 10_000, audit
        assert (audit["lost"], audit["duplicated"], audit["reordered"]) == (0, 0, 0), (report["prefix"], audit)


def test_a_subscriber_behind_when_its_exchange_is_killed_loses_nothing(make_cluster, loads):
    """A subscriber that keeps up but is a moment behind (stopped for 0.4 s, within the exchange's 0.5 s grace)
    has the last records its exchange acknowledged in that exchange's pipe and socket buffers when it is killed:
    the publishers resend them, since the exchange never said it had taken them (lost: 202 of them when
    publishers kept only what was acknowledged within the last 0.25 s)."""
    cluster = make_cluster(exchanges=2)
    m = cluster.monitor_endpoint
    sub = loads.start("subscribe", m, "--idle-exit", "5")
    pubs = [loads.start("publish", m, "--rate", "3000", "--duration", "120", "--keys", keys)
            for keys in ("a.1", "b.2")]
    status = cluster.wait_for(
        lambda s: len(s.publishers) == 2 and sum(x.records_per_s for x in s.exchanges) > 4000, 15,
        "2 publishers sending")
    victim = max(status.exchanges, key=lambda x: x.publishers)
    os.kill(sub.pid, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        while time.monotonic() - stopped < 0.4:  # what its exchange sends meanwhile waits in pipes and buffers
            time.sleep(0.05)
        cluster.kill_exchange(victim.id)
    finally:
        os.kill(sub.pid, signal.SIGCONT)
    cluster.wait_for(lambda s: all(p.exchange != victim.id and not p.relocating for p in s.publishers), 10,
                     "publishers to fail over")
    cluster.wait_for(lambda s: all(p.records_per_s > 1000 for p in s.publishers), 10,
                     "the publishers to send through their new exchange")
    sent, resent = {}, 0
    for pub in pubs:
        report = loads.report(pub, stop=True)
        assert report["error"] == ""
        sent[report["publisher"]] = report["keys"]
        resent += report["stats"]["retransmitted"]
    assert resent > 0  # what the stopped subscriber had not taken, at least
    loads.publishers_done(sub)
    report = loads.report(sub)
    audit = compare(report["audit"], sent, b"")
    assert audit["expected"] > 5_000, audit
    assert (audit["lost"], audit["duplicated"], audit["reordered"]) == (0, 0, 0), audit


def test_an_exchange_taken_for_dead_while_it_was_only_stopped_loses_nothing(make_cluster, loads):
    # A starved exchange looks dead: it is stopped (SIGSTOP) for longer than the monitor's heartbeat timeout, under
    # load, with no other exchange to fail over to, and then goes on. Its subscriber keeps its connection to it,
    # so what it forwards once it runs again still arrives; its publisher, told there is no exchange, kept its
    # link and is acknowledged again (until 2026-11-28 the subscriber closed its connection to an exchange
    # declared dead, the exchange found no subscriber and told the publisher everything was delivered: lost).
    # It stays stopped for two of the subscriber's hellos after the death: the monitor answers each with a list
    # that names the exchange neither listed nor lost (until late on 2026-11-28 the subscriber then dropped it, with
    # what it had on the way: lost 1,998 of 3,987 records in a CI run, where a hello came 33 ms after the death).
    cluster = make_cluster(exchanges=1)
    m = cluster.monitor_endpoint
    sub = loads.start("subscribe", m, "--idle-exit", "5", "--heartbeat", "0.2")
    pub = loads.start("publish", m, "--rate", "2000", "--duration", "120", "--keys", "a,b")
    cluster.wait_for(lambda s: s.publishers and sum(x.records_per_s for x in s.exchanges) > 1000, 30,
                     "the publisher sending")
    pid = cluster.exchanges["x1"].pid
    os.kill(pid, signal.SIGSTOP)
    try:
        cluster.wait_for(lambda s: any(e["kind"] == "exchange_lost" for e in s.events), 10,
                         "the monitor to take it for dead")
        declared = time.monotonic()
        while time.monotonic() - declared < 0.5:  # (how long it stays stopped: two hellos, within SUSPECT_S)
            time.sleep(0.05)
    finally:
        os.kill(pid, signal.SIGCONT)
    cluster.wait_for(lambda s: len(s.exchanges) == 1 and s.exchanges[0].records_per_s > 1000, 30,
                     "the exchange back, forwarding")
    report = loads.report(pub, stop=True)
    assert report["error"] == "", report
    loads.publishers_done(sub)
    got = loads.report(sub)
    audit = compare(got["audit"], {report["publisher"]: report["keys"]})
    print(f"published {report['sent']:,}; subscriber {audit}; its counts {got['stats']}")
    assert audit["expected"] > 1_000 and (audit["lost"], audit["duplicated"], audit["reordered"]) == (0, 0, 0), audit
