"""A link between two clusters on emulated hosts flapped again and again under 5,000 records/s each way: its host's
interface taken down and up (``ip link set down/up``) and its process SIGKILLed and started again, in turn. Every
record published on either side reaches the subscriber on the other, once and in its publisher's order (an audit of
the publishers' own counters in the payloads, not of the broker's sequence numbers).

``make federation`` flaps it 100 times in about 5 minutes (``ROQ_LINK_FLAPS``); the default, 6, is a quick look."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import time

import pytest

from roq.federation import relay_id
from roq.process import spawn
from roq.security.zap import TAG_BYTES
from roqcli.emulation import Emulation, HostBudget
from simulation.audit import compare
from tests.integration.sites import DurableQueue

FLAPS = int(os.environ.get("ROQ_LINK_FLAPS", "6"))
RATE = "200mbit"
RECORDS_PER_S = 5000
DOWN_S, UP_S = 1.0, 1.4  # each flap: an outage, then the link up again until the next (100 flaps: about 5 min)


@pytest.fixture
def hosts():
    emulation = Emulation({name: HostBudget(bandwidth=RATE) for name in ("hq", "store")}).start()
    try:
        yield emulation
    finally:
        emulation.stop()


def _relayed(sent: dict[str, dict[str, int]], label: str) -> dict[str, dict[str, int]]:
    """What the far side hears of ``sent``: each origin under the id the link (plaintext, named ``label`` that way)
    relays it with."""
    tag = hashlib.blake2b(label.encode(), digest_size=TAG_BYTES).digest()
    return {relay_id(tag, bytes.fromhex(origin)).hex(): keys for origin, keys in sent.items()}


def test_a_link_flapped_and_killed_under_load_both_ways_loses_and_doubles_nothing(tmp_path, hosts, loads):
    hq = DurableQueue(hosts.addresses["hq"], str(tmp_path / "hq"), exchanges=1, enter=hosts.enter("hq"))
    store = DurableQueue(hosts.addresses["store"], str(tmp_path / "store"), exchanges=1, enter=hosts.enter("store"))
    in_store = hosts.enter("store")
    veth = hosts.interface("store")
    args = ["--name", "store", "--cluster", "store", "--role", "leaf", "--source", store.monitor,
            "--target", hq.monitor, "--down"]
    link = spawn("link", "client.link", args, enter=in_store)
    try:
        link.wait_ready(60)
        # each side's subscriber hears the other's records; each side's publisher runs on its own host, so that it
        # goes on publishing through every outage of the link
        up = loads.start("subscribe", hq.monitor, "--prefix", "s.", "--idle-exit", "10")
        down = loads.start("subscribe", store.monitor, "--prefix", "h.", "--idle-exit", "10", enter=in_store)
        pubs = [loads.start("publish", hq.monitor, "--rate", str(RECORDS_PER_S), "--duration", "900",
                            "--keys", "h.a,h.b,h.c"),
                loads.start("publish", store.monitor, "--rate", str(RECORDS_PER_S), "--duration", "900",
                            "--keys", "s.a,s.b,s.c", enter=in_store)]
        started = time.monotonic()
        kills = 0
        for flap in range(FLAPS):
            time.sleep(UP_S)  # (the link up between two flaps: the schedule, not a wait for a condition)
            if flap % 2 == 0:
                subprocess.run(["ip", "link", "set", veth, "down"], check=True)
                time.sleep(DOWN_S)  # (the outage itself)
                subprocess.run(["ip", "link", "set", veth, "up"], check=True)
            else:
                link.signal(signal.SIGKILL)
                link.wait(10)
                kills += 1
                time.sleep(DOWN_S)  # (the outage: no link at all)
                link = spawn("link", "client.link", args, enter=in_store)
                link.wait_ready(60)
        took = time.monotonic() - started
        sent = {}
        for pub in pubs:  # each flushes what it has, and says what it sent
            pub.signal(signal.SIGTERM)
        for pub in pubs:
            report = loads.report(pub)
            assert report["error"] == "", report
            sent[report["publisher"]] = report["keys"]
        # (each subscriber stops 10 s after its last record: what the link still carries after the publishers
        # stopped comes before)
        h = {p: k for p, k in sent.items() if all(key.startswith("h.") for key in k)}
        s = {p: k for p, k in sent.items() if all(key.startswith("s.") for key in k)}
        total = sum(sum(k.values()) for k in sent.values())
        print(f"{FLAPS} flaps ({FLAPS - kills} of the interface, {kills} SIGKILLs of the link) in {took:.0f} s, "
              f"{total:,} records published ({total / took:,.0f}/s both ways)")
        for sub, expected, label in ((up, s, "store"), (down, h, "store.down")):
            report = loads.report(sub, timeout=180)
            audit = compare(report["audit"], _relayed(expected, label), report["prefix"].encode())
            print(f"subscriber {report['prefix']!r}: {audit}")
            assert audit["expected"] == sum(sum(k.values()) for k in expected.values()) > RECORDS_PER_S * took * 0.5
            assert (audit["lost"], audit["duplicated"], audit["reordered"]) == (0, 0, 0), audit
    finally:
        subprocess.run(["ip", "link", "set", veth, "up"], check=False)
        link.stop()
        hq.stop()
        store.stop()
