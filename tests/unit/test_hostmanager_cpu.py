"""The host manager's CPU meter under a budget given by a setting: its process tree, read from the kernel's lists of
each task's children (real processes), and the CPU the tree spends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil

from hostmanager._cpu import CpuMeter, process_tree

#: a child that starts a grandchild from a thread of its own (listed under that thread, not the main one), then
#: burns CPU until it is killed
SPAWNER = """
import subprocess, sys, threading
kid = []
t = threading.Thread(target=lambda: kid.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])))
t.start(); t.join()
print(kid[0].pid, flush=True)
while True:
    pass
"""


def test_the_tree_holds_children_and_grandchildren_as_psutil_finds_them_and_the_meter_counts_their_cpu():
    child = subprocess.Popen([sys.executable, "-c", SPAWNER], stdout=subprocess.PIPE, text=True)
    grandchild = 0
    try:
        grandchild = int(child.stdout.readline())
        tree = process_tree(os.getpid())
        assert tree[0] == os.getpid() and {child.pid, grandchild} <= set(tree)
        missed = {p.pid for p in psutil.Process().children(recursive=True)} - set(tree)
        assert not [pid for pid in missed if psutil.pid_exists(pid)]  # all psutil finds (but what ended meanwhile)
        # the meter counts at least what the child burns, however little of a busy machine it gets: the child's
        # CPU is read inside the meter's interval, and that interval inside the one timed here
        start = time.monotonic()
        meter = CpuMeter(cpus=2.0)
        assert meter.source == "the host manager's processes"
        burner = psutil.Process(child.pid)
        before = _cpu(burner)
        deadline = time.monotonic() + 60
        while _cpu(burner) - before < 0.3:
            assert time.monotonic() < deadline, "the child got no CPU in a minute"
            time.sleep(0.05)
        burnt = _cpu(burner) - before
        percent = meter.percent()
        least = 100.0 * burnt / (time.monotonic() - start) / 2.0
        assert percent >= 0.9 * least > 0
    finally:  # what this test started, and nothing else of this process's (a worker's ZooKeeper server...)
        for pid in (grandchild, child.pid):
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        child.wait(10)
    assert process_tree(2 ** 22 + 1) == [2 ** 22 + 1]  # no such process: itself alone


def _cpu(process: psutil.Process) -> float:
    t = process.cpu_times()
    return t.user + t.system
