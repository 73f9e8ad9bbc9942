"""roq.cgroups: reading mounts, memberships and quotas (pure, on texts as the kernel writes them)."""

from __future__ import annotations

from roq.cgroups import Hierarchy, parse_cfs_quota, parse_cpu_max, parse_membership, parse_mounts, quota_period

V1 = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
22 1 8:1 / / rw - ext4 /dev/sda1 rw
"""


def test_v1_hierarchies_name_their_controllers_and_v2_reads_its_own_list():
    found = parse_mounts(V1, {"/sys/fs/cgroup/unified": "hugetlb\n"})
    assert found == [
        Hierarchy(1, "/sys/fs/cgroup/cpu", "/", frozenset({"cpu"})),
        Hierarchy(1, "/sys/fs/cgroup/cpuacct", "/", frozenset({"cpuacct"})),
        Hierarchy(1, "/sys/fs/cgroup/memory", "/", frozenset({"memory"})),
        Hierarchy(2, "/sys/fs/cgroup/unified", "/", frozenset({"hugetlb"})),
    ]
    both = "30 25 0:26 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
    assert parse_mounts(both)[0].controllers == {"cpu", "cpuacct"}
    unified = "29 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n"
    assert parse_mounts(unified, {"/sys/fs/cgroup": "cpuset cpu io memory pids"})[0].controllers >= {"cpu", "memory"}
    assert parse_mounts("garbage\n\n1 2 3\n") == []


def test_a_process_belongs_to_one_group_per_controller_and_one_in_v2():
    text = "9:name=systemd:/\n4:memory:/api/e1\n2:cpu,cpuacct:/roq-emulated/7.1/127.0.0.11\n0::/user.slice\n"
    assert parse_membership(text) == {"name=systemd": "/", "memory": "/api/e1", "cpu": "/roq-emulated/7.1/127.0.0.11",
                                      "cpuacct": "/roq-emulated/7.1/127.0.0.11", "": "/user.slice"}


def test_a_group_directory_is_under_its_mount_even_when_a_container_sees_only_its_part():
    assert Hierarchy(1, "/sys/fs/cgroup/cpu", "/", frozenset()).directory("/roq-emulated/7.1/h") == \
        "/sys/fs/cgroup/cpu/roq-emulated/7.1/h"
    assert Hierarchy(2, "/sys/fs/cgroup", "/docker/abc", frozenset()).directory("/docker/abc") == "/sys/fs/cgroup"
    assert Hierarchy(2, "/sys/fs/cgroup", "/", frozenset()).directory("/") == "/sys/fs/cgroup"


def test_quotas_are_cores_and_no_quota_is_none():
    assert parse_cpu_max("50000 100000\n") == 0.5
    assert parse_cpu_max("250000 100000") == 2.5
    assert parse_cpu_max("max 100000") is None
    assert parse_cfs_quota("25000\n", "100000\n") == 0.25
    assert parse_cfs_quota("-1", "100000") is None


def test_quotas_are_written_over_a_short_period_where_the_kernel_takes_it():
    assert quota_period(0.1) == (1000, 10_000)
    assert quota_period(0.5) == (5000, 10_000)
    assert quota_period(2) == (20_000, 10_000)
    assert quota_period(0.05) == (1000, 20_000)  # a 1 ms quota at least: a longer period
    assert quota_period(0.01) == (1000, 100_000)
