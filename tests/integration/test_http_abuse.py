"""The GCM's HTTP server under slow, greedy and odd clients, all at once, on a real cluster (ZooKeeper, a GCM, a
host manager): a slowloris of 200 connections from 127.0.0.1, 64 readers of the live stream that never read,
a ``HEAD`` of the stream held open, 2,000 pipelined health checks on one connection and a client that
half-closes. Throughout, every health check (also from 127.0.0.1) is answered 200, an authorised client creates
a queue, the half-closed request and every pipelined one are answered, a new dashboard feed gets states, the
readers beyond the per-address cap are refused, the ``HEAD`` is answered its headers alone, and the GCM's log
has no traceback.

How fast and at what CPU is the benchmark's (``python -m simulation.bench --only n``, beside the health checks
alone): here a deadline is only there to catch a hang. The clients are :mod:`simulation.http_abuse`'s, each a
socket on loopback, closed at the end; the health checks are made from a child process (stopped at the end).
Each address has its role: 127.0.0.1 the slowloris and the health checks, 127.0.0.2 the readers (one address:
its share of the connections gets a stream, the others are refused), the others one client each.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from pathlib import Path

import psutil
import pytest

from roq.http import MAX_PER_ADDRESS
from simulation.http_abuse import (Feed, Prober, Readers, Slowloris, half_closed_request, hold_head,
                                   pipelined_health_checks)
from tests.integration.zkhelp import wait_until

WINDOW_S = 12.0  # how long the abuse goes on
HANG_S = 10.0  # a health check, a feed's next state: later than this is a hang (the figures: bench (n))
# of a core, the GCM's process over the window: a bound only a loop spinning on a socket reaches, kept to catch
# one (the figure, under 20%, is bench (n)'s)
SPIN = 0.9


def test_slow_pipelined_half_closed_and_head_clients_do_not_hold_the_gcm(make_embedded, tmp_path):
    cluster = make_embedded(hosts=1, log_dir=str(tmp_path / "cluster"))
    port = int(cluster.http_url().rsplit(":", 1)[1])
    gcm = psutil.Process(cluster.gcms["gcm1"].pid)
    token = cluster.api_token
    slowloris = Slowloris(port, 200, "127.0.0.1")
    prober: Prober | None = None
    feed: Feed | None = None
    readers = Readers(port, 64, "127.0.0.2")  # they never read what they are sent
    head = None
    try:
        head, headers = hold_head(port, "127.0.0.6")
        assert headers.startswith(b"HTTP/1.1 200") and b"text/event-stream" in headers and headers.endswith(b"\r\n\r\n")
        slowloris.start()
        prober = Prober(port, "127.0.0.1", timeout=HANG_S)  # it starts probing while the slowloris grows
        wait_until(lambda: slowloris.connects >= 200 and slowloris.closed > 0, 30, "the slowloris at full strength")

        # the window: everything above goes on while the rest is done
        cpu_before, started = gcm.cpu_times(), time.monotonic()
        feed = Feed(port, "127.0.0.3")
        feed.start()
        answered: list[int] = []
        pipeliner = threading.Thread(target=lambda: answered.append(
            pipelined_health_checks(port, "127.0.0.5", 2000)), daemon=True)
        pipeliner.start()
        api = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=("127.0.0.4", 0))
        api.request("POST", "/api/v1/queues", body=json.dumps({"name": "abuse"}),
                    headers={"authorization": f"Bearer {token}", "content-type": "application/json"})
        created = api.getresponse()
        assert created.status == 201 and json.loads(created.read())["state"] == "running"
        api.close()
        # its request waits for the queue's monitor; it ends its side at once: answered, then closed
        got = half_closed_request(port, "127.0.0.7", "/api/v1/queues/abuse")
        assert got.startswith(b"HTTP/1.1 200") and b'"name": "abuse"' in got
        pipeliner.join(30)
        assert answered == [2000]
        while time.monotonic() - started < WINDOW_S:  # the window's length: the abuse goes on meanwhile
            assert slowloris.is_alive() and prober.alive() and feed.is_alive()
            time.sleep(0.2)
        cpu_after, ended = gcm.cpu_times(), time.monotonic()
        answers = prober.stop()
        feed.stop()
        slowloris.stop()

        cpu = (cpu_after.user + cpu_after.system - cpu_before.user - cpu_before.system) / (ended - started)
        latencies = sorted(a.seconds for a in answers)
        marks = [started, *feed.states, ended]
        gaps = [b - a for a, b in zip(marks, marks[1:])]
        print(f"GCM CPU {cpu:.1%} of a core over {ended - started:.1f} s; {len(latencies)} health checks, "
              f"slowest {latencies[-1]:.3f} s, median {latencies[len(latencies) // 2]:.3f} s; "
              f"slowloris: {slowloris.connects} connections, {slowloris.closed} closed by the GCM, "
              f"{slowloris.bytes} bytes; feed states {len(feed.states)}, longest wait {max(gaps):.2f} s")
        assert len(answers) >= 10  # on a loaded machine fewer than one each 0.25 s, but enough to judge
        assert all(a.status == 200 and a.seconds < HANG_S for a in answers), answers
        assert feed.states and max(gaps) < HANG_S, gaps  # states came throughout the window
        assert cpu < SPIN, f"the GCM used {cpu:.1%} of a core"
        # the readers: one address's share of the connections got a stream, the others were refused
        assert 1 <= readers.streaming() <= MAX_PER_ADDRESS, readers.streaming()
        head.setblocking(False)
        with pytest.raises(BlockingIOError):  # the HEAD was answered its headers alone, and its connection is open
            head.recv(100)
    finally:
        for client in (slowloris, feed, prober):
            if client is not None:
                client.stop()
        readers.close()
        if head is not None:
            head.close()
    log = (Path(tmp_path) / "cluster" / "gcm1.log").read_text(errors="replace")
    assert "Traceback" not in log
