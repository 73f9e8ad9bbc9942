"""The GCM's elastic decisions end to end: scale-out, exchange removal, events, host loss.

Real ZooKeeper, GCM, host managers, monitors and exchanges. The queues' rules set ``sustain_s`` to its
maximum so that the monitors take no scaling decision of their own while a test changes the topology, and
lift the hosts' CPU and memory limits: every loopback host reports the CPU of this (shared, busy) machine.
Queues are created on a named host for the same reason.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time

import pytest
from zkhelp import gone, registered, wait_until

import client
from roq.process import spawn
from roq.runtime import ExitCode
from roq.zk import Paths

QUIET = {"sustain_s": 3600, "host_cpu_percent": 100, "host_memory_percent": 100}


def queue_node(kz, root: str, queue: str) -> dict:
    return json.loads(kz.get(Paths(root).queue(queue))[0])


def whole(kz, root: str, queue: str) -> bool:
    """Every slot (and the monitor) placed on a live host and registered by that host."""
    paths = Paths(root)
    q = queue_node(kz, root, queue)
    live = set(kz.get_children(paths.hosts))
    monitor = json.loads(kz.get(paths.monitor(queue))[0]) if kz.exists(paths.monitor(queue)) else {}
    running = registered(kz, root, queue)
    return (
        q["host"] in live
        and monitor.get("host") == q["host"]
        and all(h in live and running.get(x, {}).get("host") == h for x, h in q["placement"].items())
    )


def gcm_events(qm: client.QueueManager, queue: str) -> list[dict]:
    return [e for e in qm.events(queue) if e["origin"] == "gcm"]


def kill_host_and_children(cluster, address: str) -> None:
    """A host lost at once: its host manager and every process it runs get SIGKILL (none can say goodbye)."""
    pids = cluster.crash_host(address)
    assert len(pids) >= 2  # the host manager and at least one child
    wait_until(lambda: all(gone(p) for p in pids), 5, "the lost host's processes dead")


def test_scale_out_is_idempotent_and_removal_keeps_the_minimum(make_embedded, kz):
    cluster = make_embedded(hosts=2)
    qm = cluster.manager
    qm.create("q", "127.0.0.11")
    qm.set_rules("q", QUIET)

    placed = qm.scale_out("q", 2, reason="test: one more")
    assert placed == {"Placed": [{"Exchange": "x2", "Host": "127.0.0.12"}], "Exchanges": 2}  # spread: not beside x1
    again = qm.scale_out("q", 2, reason="test: the same request again")
    assert again == {"Placed": [], "Exchanges": 2}
    assert queue_node(kz, cluster.root, "q")["placement"] == {"x1": "127.0.0.11", "x2": "127.0.0.12"}
    x2 = wait_until(lambda: registered(kz, cluster.root, "q").get("x2"), 15, "x2 running and registered")
    assert x2["host"] == "127.0.0.12"

    qm.set_rules("q", {"max_exchanges": 2})
    with pytest.raises(client.BadRequestError, match="max_exchanges") as err:
        qm.scale_out("q", 3)
    assert "at most 2" in str(err.value)
    assert qm.scale_out("q", 1) == {"Placed": [], "Exchanges": 2}  # fewer than placed: nothing to do

    removed = qm.remove_exchange("q", x2["name"], reason="test: drained")  # the incarnation name names its slot
    assert removed == {"Exchange": "x2", "Host": "127.0.0.12", "Exchanges": 1}
    wait_until(lambda: gone(x2["pid"]), 10, "the removed exchange's process stopped")
    assert not kz.exists(Paths(cluster.root).assignment("127.0.0.12", "q", "x2"))
    assert qm.remove_exchange("q", "x2") == {"Exchange": "x2", "Exchanges": 1}  # already gone
    with pytest.raises(client.BadRequestError, match="would leave 0 exchanges, below min_exchanges 1"):
        qm.remove_exchange("q", "x1")
    assert "x1" in registered(kz, cluster.root, "q")

    with pytest.raises(client.NotFoundError):
        qm.scale_out("nothing", 2)
    qm.stop("q")
    with pytest.raises(client.UnavailableError, match="stopped"):
        qm.scale_out("q", 2)

    kinds = [e["kind"] for e in gcm_events(qm, "q")]
    assert kinds == ["queue_created", "exchange_placed", "exchange_removed", "queue_stopped"]
    placed_event = gcm_events(qm, "q")[1]
    assert placed_event["reason"] == "test: one more" and placed_event["hosts"] == "127.0.0.12"
    assert (placed_event["previous"], placed_event["exchanges"]) == (1, 2) and "x2 on 127.0.0.12" in placed_event["text"]
    assert all(e["queue"] == "q" and isinstance(e["time"], float) for e in gcm_events(qm, "q"))
    assert isinstance(qm.counters("q"), dict)
    with pytest.raises(client.BadRequestError, match="Limit"):
        qm.events("q", limit=0)


def test_rules_store_only_what_the_operator_set(make_embedded, kz):
    cluster = make_embedded(hosts=1)
    qm = cluster.manager
    qm.create("q", "127.0.0.11")
    paths = Paths(cluster.root)
    assert json.loads(kz.get(paths.rules("q"))[0]) == {}
    qm.set_thresholds("q", {"cooldown_s": 7})
    assert qm.get_rules("q")["cooldown_s"] == 7.0  # the tuner over the default
    rules = qm.set_rules("q", {"cooldown_s": 3})
    assert rules["cooldown_s"] == 3.0 and rules == qm.get_rules("q")  # the operator over the tuner
    assert qm.explicit_rules("q") == {"cooldown_s": 3.0} == json.loads(kz.get(paths.rules("q"))[0])
    assert qm.set_rules("q", {"cooldown_s": None})["cooldown_s"] == 7.0  # unset: the threshold again
    assert qm.explicit_rules("q") == {}


def roq(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "roqcli", *args], capture_output=True, text=True, timeout=60)


def test_roq_events_prints_and_follows_the_queue_events(make_embedded, tmp_path):
    cluster = make_embedded(hosts=2)
    qm = cluster.manager
    qm.create("q", "127.0.0.11")
    qm.set_rules("q", QUIET)
    where = ["--zk", cluster.zk, "--root", cluster.root]

    shown = roq("events", "q", *where)
    assert shown.returncode == 0, shown.stderr
    line = next(line for line in shown.stdout.splitlines() if "queue_created" in line)
    stamp, source = line[:23], line[25:].split()[0]
    assert time.strptime(stamp[:19], "%Y-%m-%d %H:%M:%S") and stamp[19] == "." and source == "gcm"
    assert line.endswith("created on 127.0.0.11 with 1 exchange(s)")
    as_json = [json.loads(line) for line in roq("events", "q", "--json", "--limit", "1", *where).stdout.splitlines()]
    assert len(as_json) == 1 and as_json[0]["origin"] in ("gcm", "monitor")
    assert roq("events", "nothing", *where).returncode == ExitCode.FAILURE

    # `queue rules KEY=` unsets a rule
    assert roq("queue", "rules", "q", "cooldown_s=4", *where).returncode == 0
    assert qm.explicit_rules("q") == {**QUIET, "cooldown_s": 4.0}
    unset = roq("queue", "rules", "q", "cooldown_s=", "--json", *where)
    assert unset.returncode == 0 and json.loads(unset.stdout)["cooldown_s"] == 10.0
    assert qm.explicit_rules("q") == QUIET

    follow = spawn("roq events --follow", "roqcli", ["events", "q", "--follow", "--limit", "1", *where],
                   stderr=open(tmp_path / "follow.err", "wb"))
    try:
        out = b""

        def printed(text: bytes) -> bool:
            nonlocal out
            if select.select([follow.stdout_fd], [], [], 0.1)[0]:
                out += os.read(follow.stdout_fd, 65536)
            return text in out

        wait_until(lambda: printed(b"\n"), 15, "the latest event printed")
        before = out.count(b"\n")
        qm.scale_out("q", 2, reason="seen by follow")
        wait_until(lambda: printed(b"exchange_placed"), 10, "the new event printed by --follow")
        new = out.decode().splitlines()[before:]
        assert any("exchange_placed" in line and "seen by follow" in line for line in new)
        assert not any("queue_created" in line for line in new)  # only new events
        follow.signal(signal.SIGINT)
        assert follow.wait(10) == ExitCode.SIGNALLED
    finally:
        follow.stop()


def test_a_lost_host_has_its_exchanges_placed_again(make_embedded, kz):
    grace, session = 2.0, 4.0
    cluster = make_embedded(hosts=3, session_timeout=session, gcm_args=["--host-grace", str(grace)])
    qm = cluster.manager
    qm.create("q", "127.0.0.11")
    qm.set_rules("q", QUIET)
    placed = {p["Host"]: p["Exchange"] for p in qm.scale_out("q", 3)["Placed"]}
    assert sorted(placed) == ["127.0.0.12", "127.0.0.13"]  # one exchange per host
    wait_until(lambda: whole(kz, cluster.root, "q"), 15, "three exchanges running on three hosts")

    victim = placed["127.0.0.13"]
    killed = time.monotonic()
    kill_host_and_children(cluster, "127.0.0.13")  # holds one exchange, not the monitor
    wait_until(lambda: queue_node(kz, cluster.root, "q")["placement"][victim] != "127.0.0.13", session + grace + 5,
               f"{victim} placed on another host")
    moved = time.monotonic() - killed
    wait_until(lambda: whole(kz, cluster.root, "q"), 15, f"{victim} running again on a live host")
    running = time.monotonic() - killed
    print(f"{victim} re-placed {moved:.2f}s and registered {running:.2f}s after kill -9 of its host "
          f"(session timeout {session:g}s, host grace {grace:g}s)")
    assert moved >= grace  # not before the grace
    assert running <= session + grace + 5.0

    placement = queue_node(kz, cluster.root, "q")["placement"]
    assert sorted(placement) == ["x1", "x2", "x3"] and "127.0.0.13" not in placement.values()
    assert not kz.exists(Paths(cluster.root).assignment("127.0.0.13", "q", victim))
    replaced = [e for e in gcm_events(qm, "q") if e["kind"] == "exchanges_replaced"]
    assert len(replaced) == 1 and replaced[0]["lost_host"] == "127.0.0.13" and f"{victim} to " in replaced[0]["text"]


def test_a_slot_without_room_waits_for_a_host_and_a_lost_monitor_moves(make_embedded, kz):
    cluster = make_embedded(hosts=2, max_exchanges=1, session_timeout=4.0, gcm_args=["--host-grace", "1"])
    qm = cluster.manager
    qm.create("q", "127.0.0.12")
    qm.set_rules("q", QUIET)
    assert qm.scale_out("q", 2)["Placed"] == [{"Exchange": "x2", "Host": "127.0.0.11"}]
    wait_until(lambda: whole(kz, cluster.root, "q"), 15, "both exchanges running")

    kill_host_and_children(cluster, "127.0.0.12")  # the monitor and x1; 127.0.0.11 is full
    blocked = wait_until(lambda: [e for e in gcm_events(qm, "q") if e["kind"] == "replacement_blocked"], 10,
                         "the GCM saying x1 cannot be replaced")
    assert blocked[0]["slot"] == "x1" and "127.0.0.11: full (1/1)" in blocked[0]["text"]
    assert queue_node(kz, cluster.root, "q")["host"] == "127.0.0.11"  # the monitor needs no exchange slot
    assert queue_node(kz, cluster.root, "q")["placement"]["x1"] == "127.0.0.12"

    cluster.add_host("127.0.0.13")  # room at last: x1 goes there without anyone asking
    wait_until(lambda: queue_node(kz, cluster.root, "q")["placement"]["x1"] == "127.0.0.13", 10, "x1 placed on the new host")
    wait_until(lambda: whole(kz, cluster.root, "q"), 15, "the queue whole again: monitor on .11, x1 on .13")
    kinds = [e["kind"] for e in gcm_events(qm, "q")]
    assert kinds.count("monitor_moved") == 1 and kinds.count("replacement_blocked") == 1
    assert kinds.count("exchanges_replaced") == 1
    with cluster.connect("q") as conn:
        sub = conn.subscriber()
        pub = conn.publisher()
        for i in range(200):
            pub.send(b"k", b"%d" % i)
        pub.flush(10)
        got = {int(msg.payload) for msg in iter(lambda: sub.recv(timeout=3.0), None)}
        assert got == set(range(200))
