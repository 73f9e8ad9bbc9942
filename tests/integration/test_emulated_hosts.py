"""Emulated hosts: each host manager and everything it runs in a cgroup with its own CPU quota and, with a
bandwidth, in a network namespace behind a rate-limited link. Hosts report CPU against their own budget
(a process burning CPU outside the cluster does not count), placement follows the headroom of each, and
everything made is removed, also after a ``kill -9`` of the launcher. (The ramp that scales out and in
while the machine is busy is in test_elasticity.py, on emulated hosts.)"""

from __future__ import annotations

import functools
import os
import subprocess
import sys

import psutil

from roq.process import die_with_parent
from roqcli.emulation import CGROUP_BASE, STATE_DIR, HostBudget, sweep
from tests.integration.zkhelp import wait_until

CPU_MOUNT = "/sys/fs/cgroup/cpu"  # v1 here; the checks below look at whichever hierarchy holds the groups


def made_by(tag: str, name: str) -> dict[str, list[str]]:
    """What of a launcher's emulation (its ``tag`` and ``name``) is still there: namespaces, links, its cgroup (with
    its hosts' groups in it), its state file. (Its own only: another test's cluster of emulated hosts may run.)"""
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    lines = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout.splitlines()
    links = [line.split(": ")[1].split("@")[0] for line in lines if ": " in line]
    groups = [os.path.join(root, d) for root, dirs, _ in os.walk("/sys/fs/cgroup") if CGROUP_BASE in root
              for d in dirs if d == name]
    files = os.listdir(STATE_DIR) if os.path.isdir(STATE_DIR) else []
    return {"netns": [n for n in netns if n.startswith(f"roq{tag}n")],
            "links": [link for link in links if link.startswith(f"rq{tag}")],
            "cgroups": groups, "state": [f for f in files if f.lstrip(".").startswith(f"{name}.")]}


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
    with cluster.connect("spread") as conn:
        pids = [x.pid for x in conn.status(timeout=10).exchanges]
    for pid in pids:
        with open(f"/proc/{pid}/cgroup") as f:
            assert f"/{CGROUP_BASE}/" in f.read()
        # and that group gets its budget on the busy machine: it weighs its cores among the hosts, the groups
        # above it the most there is (the burners cannot starve it; its quota caps it)
        group, weights = weights_of(pid)
        host = os.path.basename(group)
        assert weights[0] in (round(1024 * budgets[host]), round(100 * budgets[host])), (group, weights)
        assert set(weights[1:]) in ({262144}, {10000}), (group, weights)


def weights_of(pid: int) -> tuple[str, list[int]]:
    """The CPU group of ``pid`` and the weights of it and of each group above it up to the emulation's base."""
    with open(f"/proc/{pid}/cgroup") as f:
        lines = [line.strip().split(":", 2) for line in f]
    v1 = [path for _, controllers, path in lines if "cpu" in controllers.split(",")]
    group, mount, name = (v1[0], "/sys/fs/cgroup/cpu", "cpu.shares") if v1 else (
        next(path for hid, _, path in lines if hid == "0"), "/sys/fs/cgroup", "cpu.weight")
    weights, d = [], group
    while d.strip("/") and CGROUP_BASE in d:
        with open(os.path.join(mount, d.strip("/"), name)) as f:
            weights.append(int(f.read()))
        d = os.path.dirname(d)
    return group, weights


LAUNCHER = """
import sys, time
sys.path.insert(0, {root!r})
from roqcli.embedded import EmbeddedCluster
from roqcli.emulation import HostBudget
c = EmbeddedCluster(hosts=2, budgets=[HostBudget(0.5, "50mbit"), HostBudget(0.25, "20mbit")], log_dir={logs!r})
c.start()
print("READY", c.emulation.tag, c.emulation.name, c.zk, " ".join(str(p) for p in c.pids()), flush=True)
time.sleep(600)
"""


def test_links_carry_traffic_and_everything_made_goes_on_stop_and_after_kill_9(make_embedded, tmp_path):
    cluster = make_embedded(hosts=2, zk=None, budgets=[HostBudget(0.5, "50mbit")])
    tag, name = cluster.emulation.tag, cluster.emulation.name
    made = made_by(tag, name)
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
    assert made_by(tag, name) == {"netns": [], "links": [], "cgroups": [], "state": []}

    # a launcher killed with -9 leaves its groups, namespaces and links; the next start removes them
    script = tmp_path / "launcher.py"
    script.write_text(LAUNCHER.format(root=os.getcwd(), logs=str(tmp_path / "killed")))
    scratch = tmp_path / "killed-tmp"  # its ZooKeeper's data and its API token, which no stop removes after a kill
    scratch.mkdir()
    launcher = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                                preexec_fn=functools.partial(die_with_parent, os.getpid()),
                                env={**os.environ, "TMPDIR": str(scratch)})
    try:
        line = launcher.stdout.readline().split()  # type: ignore[union-attr]
        assert line and line[0] == "READY", line
        tag, name, pids = line[1], line[2], [int(p) for p in line[4:]]
        assert made_by(tag, name)["netns"] and made_by(tag, name)["cgroups"]
    finally:
        launcher.kill()
        launcher.wait()
    left = made_by(tag, name)
    assert left["netns"] and left["cgroups"] and left["state"], left
    wait_until(lambda: not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
                               for p in pids), 20, "the killed launcher's processes gone (they die with it)")
    removed = sweep()
    print("swept: " + "; ".join(removed))
    assert made_by(tag, name) == {"netns": [], "links": [], "cgroups": [], "state": []}
