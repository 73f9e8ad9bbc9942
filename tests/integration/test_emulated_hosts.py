"""Emulated hosts: each host manager and everything it runs in a cgroup with its own CPU quota and, with a
bandwidth, in a network namespace behind a rate-limited link. Hosts report CPU against their own budget
(a process burning CPU outside the cluster does not count), placement follows the headroom of each, a ramp
scales out and in while the machine is busy, and everything made is removed, also after a ``kill -9`` of
the launcher."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from roq.process import die_with_parent
from roqcli.emulation import CGROUP_BASE, STATE_DIR, HostBudget, sweep
from tests.integration.queues import Queue
from tests.integration.zkhelp import wait_until

CPU_MOUNT = "/sys/fs/cgroup/cpu"  # v1 here; the checks below look at whichever hierarchy holds the groups
FAST = {"kpi_period_s": 1.0, "sustain_s": 1.0, "smoothing": 0.5}  # and the host checks as they are: no 100%


def made_by(tag: str) -> dict[str, list[str]]:
    """What of a launcher's emulation is still there: namespaces, links, cgroups, its state file."""
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    lines = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout.splitlines()
    links = [line.split(": ")[1].split("@")[0] for line in lines if ": " in line]
    groups = [d for root, dirs, _ in os.walk("/sys/fs/cgroup") if CGROUP_BASE in root for d in dirs]
    return {"netns": [n for n in netns if n.startswith(f"roq{tag}n")],
            "links": [name for name in links if name.startswith(f"rq{tag}")],
            "cgroups": groups, "state": os.listdir(STATE_DIR) if os.path.isdir(STATE_DIR) else []}


@pytest.fixture
def burner():
    """Processes burning CPU outside the cluster's groups (as any other work on the machine); stopped by pid."""
    procs: list[subprocess.Popen] = []

    def start(n: int) -> None:
        for _ in range(n):
            procs.append(subprocess.Popen([sys.executable, "-c", "while True: pass"],
                                          preexec_fn=lambda parent=os.getpid(): die_with_parent(parent)))

    yield start
    for p in procs:
        p.kill()
        p.wait()


def hosts_settled(cluster, budgets: dict[str, float], below: float):
    """Every host reports its own budget and a CPU % of it below ``below``."""
    hosts = {h["Address"]: h for h in cluster.manager.hosts()}
    ok = all(a in hosts and hosts[a]["Cpus"] == c and hosts[a]["CpuPercent"] < below for a, c in budgets.items())
    return hosts if ok else None


def test_hosts_measure_their_own_budget_and_placement_goes_where_the_headroom_is(make_embedded, burner):
    budgets = {"127.0.0.11": 0.3, "127.0.0.12": 1.0, "127.0.0.13": 0.3}
    cluster = make_embedded(hosts=3, budgets=[HostBudget(c) for c in budgets.values()])
    burner(2)  # both cores busy: every plain loopback host would read ~100% and refuse exchanges
    psutil.cpu_percent(None)
    hosts = wait_until(lambda: hosts_settled(cluster, budgets, 50.0), 30,
                       "every host reporting its own budget, mostly idle")
    machine = psutil.cpu_percent(None)
    print(f"machine CPU {machine:.0f}%; hosts: " + ", ".join(f"{a} {h['CpuPercent']:.0f}% of {h['Cpus']:g} cores"
                                                         for a, h in sorted(hosts.items())))
    assert machine > 70.0  # the machine is busy, the hosts are not

    one = cluster.manager.create("one")
    assert one["Host"] == "127.0.0.12"  # 1 core: the most headroom
    spread = cluster.manager.create("spread", exchanges=3)
    where = {x["Id"]: x["Host"] for x in spread["Exchanges"]}
    print(f"spread: {where}")
    assert sorted(where.values()) == sorted(budgets)  # three exchanges on three hosts
    one = cluster.manager.stats("one")["Queue"]
    assert one["Host"] == "127.0.0.12"
    # their processes run in their host's group: the host manager's children are in it
    pids = [x["pid"] for x in cluster.connect("spread").status(timeout=10)["exchanges"]]
    for pid in pids:
        with open(f"/proc/{pid}/cgroup") as f:
            assert f"/{CGROUP_BASE}/" in f.read()


def test_a_ramp_on_emulated_hosts_scales_out_and_in_while_the_machine_is_busy(make_embedded, loads, burner):
    cluster = make_embedded(hosts=3, budgets=[HostBudget(0.5)])
    burner(1)  # a core's worth of other work, outside the cluster's groups
    q = Queue(cluster, loads, "ramp", exchange_records_per_s=1500, min_exchanges=1, max_exchanges=4,
              cooldown_s=3.0, **FAST)
    q.subscribe("")
    for i in range(6):  # 600 records/s each: two fit in an exchange (1200 < 1500), three do not
        q.publish(600, f"k{i}")
        q.wait(lambda s, n=i + 1: len(s["publishers"]) == n, 15, f"{i + 1} publishers")
        time.sleep(2.0)  # the ramp: one more publisher every 2 s (a rate of arrival, not a wait)
    status = q.wait(lambda s: len([x for x in s["exchanges"] if not x["draining"]]) >= 3
                    and not s["scaling"]["starting"] and not s["relocations"], 40, "at least 3 exchanges")
    hosts = cluster.manager.hosts()
    print(f"grown to {len(status['exchanges'])} exchanges; hosts: "
          + ", ".join(f"{h['Address']} {h['CpuPercent']:.0f}% of {h['Cpus']:g}" for h in hosts))
    assert all(h["Cpus"] == 0.5 for h in hosts)
    assert not [e for e in q.events("scale_blocked")]  # no host refused for the machine's CPU
    for pub in list(q.pubs):
        q.stop_publisher(pub)
        time.sleep(1.0)
    q.wait(lambda s: len(s["exchanges"]) == 1 and not s["scaling"]["retiring"], 60,
           "the queue to shrink back to 1 exchange")
    assert len(q.events("scale_in")) >= 2
    q.audit()  # 0 lost, 0 duplicated, 0 reordered
    q.close()


LAUNCHER = """
import sys, time
sys.path.insert(0, {root!r})
from roqcli.embedded import EmbeddedCluster
from roqcli.emulation import HostBudget
c = EmbeddedCluster(hosts=2, budgets=[HostBudget(0.5, "50mbit"), HostBudget(0.25, "20mbit")], log_dir={logs!r})
c.start()
print("READY", c.emulation.tag, c.zk, " ".join(str(p) for p in c.pids()), flush=True)
time.sleep(600)
"""


def test_links_carry_traffic_and_everything_made_goes_on_stop_and_after_kill_9(make_embedded, tmp_path):
    cluster = make_embedded(hosts=2, zk=None, budgets=[HostBudget(0.5, "50mbit")])
    tag = cluster.emulation.tag
    made = made_by(tag)
    assert len(made["netns"]) == 2 and len(made["links"]) == 3 and made["cgroups"], made
    assert all(a.startswith("198.18.") for a in cluster.addresses)
    cluster.manager.create("net", exchanges=2)
    conn = cluster.connect("net")
    sub, pub = conn.subscriber(), conn.publisher()
    for i in range(2000):
        pub.send(b"k", b"%06d" % i + b"x" * 2000)
    pub.flush(30)
    got = set()
    while len(got) < 2000:
        msg = sub.recv(timeout=5.0)
        assert msg is not None, f"only {len(got)} of 2000 records arrived"
        got.add(int(msg.payload[:6]))
    pub.close(), sub.close(), conn.close()
    hosts = {h["Address"]: h for h in cluster.manager.hosts()}
    assert all(h["LinkBytesPerS"] == 50e6 / 8 and h["Cpus"] == 0.5 for h in hosts.values()), hosts
    cluster.stop()
    assert made_by(tag) == {"netns": [], "links": [], "cgroups": [], "state": []}

    # a launcher killed with -9 leaves its groups, namespaces and links; the next start removes them
    script = tmp_path / "launcher.py"
    script.write_text(LAUNCHER.format(root=os.getcwd(), logs=str(tmp_path / "killed")))
    launcher = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                                preexec_fn=lambda parent=os.getpid(): die_with_parent(parent))
    try:
        line = launcher.stdout.readline().split()  # type: ignore[union-attr]
        assert line and line[0] == "READY", line
        tag, pids = line[1], [int(p) for p in line[3:]]
        assert made_by(tag)["netns"] and made_by(tag)["cgroups"]
    finally:
        launcher.kill()
        launcher.wait()
    left = made_by(tag)
    assert left["netns"] and left["cgroups"] and left["state"], left
    wait_until(lambda: not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
                               for p in pids), 20, "the killed launcher's processes gone (they die with it)")
    removed = sweep()
    print("swept: " + "; ".join(removed))
    assert made_by(tag) == {"netns": [], "links": [], "cgroups": [], "state": []}
