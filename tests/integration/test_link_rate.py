"""A link under its rate limit: what crosses stays within the cap while its source runs faster, and what crosses
is whole (real processes: two sites' durable queues on loopback aliases, a link, a load publisher)."""

from __future__ import annotations

import client
from roq.process import spawn
from tests.integration.sites import DurableQueue

CAP = 250_000  # bytes a second: 2 Mbit/s
WINDOW_S = 8.0


def test_a_link_keeps_to_its_rate_limit_and_what_crosses_is_whole(tmp_path, loads):
    here = DurableQueue("127.0.0.18", str(tmp_path / "here"), exchanges=1)
    there = DurableQueue("127.0.0.19", str(tmp_path / "there"), exchanges=1)
    link = None
    try:
        link = spawn("link", "client.link", ["--name", "capped", "--source", here.monitor, "--target", there.monitor,
                                             "--rate-limit", str(CAP)])
        link.wait_ready(60)
        # about 450 KB/s of batches at the source, for 14 s: the link is full all along
        pub = loads.start("publish", here.monitor, "--rate", "1000", "--size", "400", "--keys", "a,b",
                          "--duration", "14")
        assert loads.report(pub)["error"] == ""
        with client.connect(there.monitor) as conn:
            assert (conn.status().journal.size_bytes or 0) > CAP * WINDOW_S  # (more than a window's worth crossed)
    finally:
        if link is not None:
            link.stop()
        for site in (there, here):
            site.stop()
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
    for seqs in there.journaled().values():  # each relayed publisher whole from its first record across, once
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
