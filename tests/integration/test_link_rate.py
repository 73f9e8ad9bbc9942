"""A link under its rate limit: what crosses stays within the cap while its source runs faster, interest still
crosses at once while the link is full, and what crosses is whole (real processes: two sites' durable queues on
loopback aliases, an on-demand link, a load publisher)."""

from __future__ import annotations

import os
import time

import client
from roq.process import spawn
from tests.integration.sites import DurableQueue

CAP = 250_000  # bytes a second: 2 Mbit/s
WINDOW_S = 5.0


def test_a_link_keeps_to_its_rate_limit_interest_crosses_while_it_is_full_and_what_crosses_is_whole(tmp_path, loads):
    here = DurableQueue("127.0.0.18", str(tmp_path / "here"), exchanges=1)
    there = DurableQueue("127.0.0.19", str(tmp_path / "there"), exchanges=1)
    link = None
    try:
        link = spawn("link", "client.link", ["--name", "capped", "--source", here.monitor, "--target", there.monitor,
                                             "--rate-limit", str(CAP), "--on-demand"])
        with client.connect(there.monitor) as far, client.connect(here.monitor) as near:
            subs = [far.subscriber(b"a.")]  # what the far side wants at first: two keys of three

            def carried() -> list[str]:
                """What the link says it carries, as the source queue's monitor heard it."""
                return next((x.wants for x in near.status().links or [] if x.reads), [])

            link.wait_ready(60)
            # about 450 KB/s of batches at the source (300 KB/s of them wanted), for 10 s: the link is full all along
            pub = loads.start("publish", here.monitor, "--rate", "1000", "--size", "400", "--keys", "a.1,a.2,b.1",
                              "--duration", "10")
            deadline = time.monotonic() + 30
            while (far.status().journal.size_bytes or 0) < CAP * 3:  # full for seconds
                assert time.monotonic() < deadline, "the link carried too little"
                time.sleep(0.1)
            assert carried() == ["a."]
            # a subscriber on b. joins there while the link is full: its interest crosses at once (its own socket)
            joined = time.monotonic()
            subs.append(far.subscriber(b"b."))
            while "b." not in carried():
                assert time.monotonic() < joined + 5, carried()
                time.sleep(0.01)
            crossed_ms = (time.monotonic() - joined) * 1000
            assert loads.report(pub)["error"] == ""
            assert (far.status().journal.size_bytes or 0) > CAP * WINDOW_S  # (more than a window's worth crossed)
    finally:
        if link is not None:
            link.stop()
        for site in (there, here):
            site.stop()
    print(f"interest crossed the full link in {crossed_ms:.0f} ms (join to the source's monitor hearing it)")
    assert crossed_ms < 2000  # (the figure is what matters: it does not wait behind the queue of data)
    arrivals = there.arrivals()  # (journaled at, bytes as the link sent them), in order
    first, last = arrivals[0][0], arrivals[-1][0]
    assert (last - first) / 1e9 > WINDOW_S
    busiest, j, inside = 0, 0, 0
    for t, size in arrivals:  # the most that crossed in any window of WINDOW_S
        inside += size
        while arrivals[j][0] <= t - WINDOW_S * 1e9:
            inside -= arrivals[j][1]
            j += 1
        busiest = max(busiest, inside)
    # the cap over the window, a tenth of a second's burst, one batch, and 5% for the jitter of a busy machine
    largest = max(size for _, size in arrivals)
    mean = sum(size for _, size in arrivals) / ((last - first) / 1e9)
    print(f"cap {CAP} B/s: busiest {WINDOW_S:g} s {busiest / WINDOW_S:,.0f} B/s, mean {mean:,.0f} B/s, largest batch "
          f"{largest} B")
    assert busiest <= CAP * WINDOW_S * 1.05 + CAP / 10 + largest, busiest / WINDOW_S
    assert mean >= CAP * 0.5  # full, not idle
    last: dict[tuple[bytes, bytes], int] = {}  # each relayed publisher's keys: every chain whole, once, in order
    for publisher, key, key_prev, first, end in there.chains():
        if (publisher, key) in last:
            assert key_prev == last[publisher, key], (key, key_prev, last[publisher, key])
        last[publisher, key] = end
    assert {key for _, key in last} == {b"a.1", b"a.2", b"b.1"}


#: seconds the link is down under load (make test: 2; make federation: 60)
OUTAGE_S = float(os.environ.get("ROQ_LINK_OUTAGE_S", "2"))
#: the shortest outage whose drain is long enough to measure the link's rate on a shared machine: a 2 s outage drains
#: in about 1.3 s, where one stall of the machine decides the figure (CI once read 16% of the cap while the target's
#: disk took up to 121 ms a sync); make test checks what was held crossed whole, make federation the rate of it
RATE_MEASURED_FROM_S = 30.0
DRAIN_CAP = 500_000  # bytes a second: 4 Mbit/s


def test_an_outage_is_held_in_the_journal_and_drained_after_it_at_the_links_rate(tmp_path, loads):
    """A link capped at 4 Mbit/s carries 5,000 records/s (about half its rate); it is SIGKILLed and started again
    :data:`OUTAGE_S` seconds later: what was published meanwhile waited in the source's journal (the publishers never
    held back), and crossed after it (at no less than 90% of the link's rate, over an outage long enough to measure it:
    :data:`RATE_MEASURED_FROM_S`), each record once and in order."""
    here = DurableQueue("127.0.0.18", str(tmp_path / "here"), exchanges=1)
    there = DurableQueue("127.0.0.19", str(tmp_path / "there"), exchanges=1)
    args = ["--name", "held", "--source", here.monitor, "--target", there.monitor, "--rate-limit", str(DRAIN_CAP)]
    link = spawn("link", "client.link", args)
    try:
        link.wait_ready(60)
        duration = 1 + OUTAGE_S + 2 * OUTAGE_S + 2  # before, the outage, the drain (twice its expected length), after
        pub = loads.start("publish", here.monitor, "--rate", "5000", "--size", "40", "--keys", "a,b,c",
                          "--duration", f"{duration:g}")
        with client.connect(there.monitor) as far:
            deadline = time.monotonic() + 30
            while not far.status().journal.next_offset:  # crossing
                assert time.monotonic() < deadline, "nothing crossed"
                time.sleep(0.05)
            time.sleep(1.0)  # (a steady crossing before the outage: the publisher sets the pace, not a wait)
            link.kill()
            down_ns = time.time_ns()
            time.sleep(OUTAGE_S)  # the outage itself: nothing to wait for
            link = spawn("link", "client.link", args)
            link.wait_ready(60)
            up_ns = time.time_ns()
        report = loads.report(pub, timeout=duration + 60)
        assert report["error"] == "" and report["rate"] >= 0.9 * 5000  # the publisher was never held back
        with client.connect(here.monitor) as near, client.connect(there.monitor) as far:
            deadline = time.monotonic() + 60
            while far.status().journal.next_offset != near.status().journal.next_offset:  # the backlog crossed
                assert time.monotonic() < deadline, "the backlog never crossed"
                time.sleep(0.1)
    finally:
        link.stop()
        for site in (there, here):
            site.stop()
    arrivals = [(t, size) for t, size in there.arrivals() if t > up_ns]
    published = [t for t, _ in here.arrivals()]
    held = sum(1 for t in published if down_ns <= t <= up_ns)
    # the backlog crosses at the link's rate: over the first four fifths of the time it should take (what waited,
    # crossing at the rate left over by the publisher's own), at least 90% of the cap
    rate_in = sum(size for t, size in here.arrivals() if down_ns <= t <= up_ns) / ((up_ns - down_ns) / 1e9)
    expected_s = OUTAGE_S * rate_in / (DRAIN_CAP - rate_in)
    first = arrivals[0][0]
    window = [size for t, size in arrivals if t <= first + 0.8 * expected_s * 1e9]
    drained = sum(window) / (0.8 * expected_s)
    print(f"outage {OUTAGE_S:g} s: {held:,} batches held at the source ({rate_in:,.0f} B/s coming in, the publisher "
          f"at {report['rate']:,.0f} records/s); drained at "
          f"{drained:,.0f} B/s = {drained / DRAIN_CAP:.0%} of the link's {DRAIN_CAP:,} B/s")
    assert held > 0 and there.records_by_key() == here.records_by_key()  # every record held crossed
    if OUTAGE_S >= RATE_MEASURED_FROM_S:
        assert drained >= 0.9 * DRAIN_CAP
    last: dict[tuple[bytes, bytes], int] = {}  # every key's chain whole, once, in order, across the outage
    for publisher, key, key_prev, first_seq, end in there.chains():
        if (publisher, key) in last:
            assert key_prev == last[publisher, key], (key, key_prev, last[publisher, key])
        last[publisher, key] = end
