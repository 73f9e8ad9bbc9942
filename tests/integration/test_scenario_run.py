"""A short scenario end to end: real cluster, load processes on a schedule, a fault, the audit and the summary."""

from __future__ import annotations

import json

import matplotlib.image
import psutil
import pytest

from roq.errors import ConfigError
from roqcli.embedded import EmbeddedCluster
from simulation.report import PLOTS, render
from simulation.runner import Runner
from simulation.scenario import parse_scenario

SHORT = """
[scenario]
name = "short"
duration_s = 12
hosts = 2
gcms = 2
faults_after_scale_out = true  # the queue has grown before the faults, however busy the machine

[[queue]]
name = "s"
# every host is this machine, which the test itself keeps busy: its CPU must not refuse the scale-out
# and the load is well above the mark (1,800 records/s on 1,200): beside busy loops the publishers made 1,470-1,570
# and, on a mark of 1,500, no scale-out came before the faults
rules = { exchange_records_per_s = 1200, sustain_s = 1, cooldown_s = 3, host_cpu_percent = 100 }

[[subscribers]]
prefix = ""

[[subscribers]]
prefix = "a"

[[subscribers]]
prefix = ""
rcvhwm = 20
pause_at_s = 5     # it stops reading for 3 s while the publishers go on (one that reads slowly would hold them
pause_for_s = 3    # back to its pace: it is not sent past while it makes progress)

[[publishers]]
count = 3
rate = 600
keys = ["a", "b"]
size = 100
size_max = 400
every_s = 0.3      # all three within a second: the queue runs above its mark, and scales out, before the first fault
stop_s = 10
leave_every_s = 0.5

[[faults]]
at_s = 4
kind = "pause_monitor"
for_s = 1.5

[[faults]]
at_s = 7
kind = "kill_exchange"

[[faults]]
at_s = 8
kind = "kill_gcm_leader"

[[faults]]
at_s = 9
kind = "restart_zookeeper"
for_s = 1
"""

FIELDS = {"scenario", "source", "interrupted", "duration_s", "units", "published", "delivered",
          "delivered_records_per_s", "exchanges_peak", "relocations", "scale_outs", "scale_ins", "failovers",
          "exchanges_restarted",
          "faults", "keep_up_audit", "publishers", "subscribers", "latency_by_exchanges"}


def recovered(summary: dict) -> bool:
    """The killed exchange's publishers went on: moved to another exchange (a fail-over), or back to the same one,
    restarted by its host manager, whichever came first (a run beside busy loops saw the restart come first); what
    they sent is audited apart."""
    return summary["failovers"] >= 1 or summary["exchanges_restarted"] >= 1


def test_a_short_scenario_runs_and_reports(tmp_path):
    out = tmp_path / "out"
    lines: list[str] = []
    summary = Runner(parse_scenario(SHORT, "short.toml"), str(out), progress=lines.append).run()
    print("\n".join(lines))
    assert json.loads((out / "summary.json").read_text()) == json.loads(json.dumps(summary, default=str))
    assert FIELDS <= set(summary) and not summary["interrupted"]
    assert summary["published"] > 5000 and [p["error"] for p in summary["publishers"]] == ["", "", ""]
    assert summary["keep_up_audit"] == {"lost": 0, "duplicated": 0, "reordered": 0, "clean": True}
    everything, only_a, slow = summary["subscribers"]
    assert everything["audit"]["received"] == summary["published"]
    assert 0 < only_a["audit"]["expected"] < summary["published"] and only_a["audit"]["lost"] == 0
    # the slow group's shortfall is shown, not hidden: what was still queued for it when it stopped, and records
    # dropped (the audit's holes and missing heads; the client library counts the holes it can see as gaps).
    # Loopback sockets buffer megabytes, so its backlog is mostly in flight, not in a pipe an exchange finds full:
    # what it misses is mostly what the exchange killed had on its way to it, when it had any (a missing head, the
    # first records of a publisher, is no gap to a live subscriber, which cannot know where a stream began)
    # (what loopback buffers took in of its 3 s pause it reads afterwards: it may miss nothing)
    assert not slow["keeps_up"] and 0 < slow["audit"]["received"] <= slow["audit"]["expected"]
    assert slow["audit"]["received"] + slow["audit"]["lost"] == slow["audit"]["expected"]
    assert slow["audit"]["duplicated"] == 0  # and nothing delivered twice
    assert (slow["gaps"] > 0) == (slow["gap_records"] > 0), slow
    assert everything["gaps"] == only_a["gaps"] == 0
    assert [f["kind"] for f in summary["faults"]] == ["pause_monitor", "kill_exchange", "kill_gcm_leader",
                                                      "restart_zookeeper"]
    assert all("error" not in f for f in summary["faults"]) and recovered(summary)
    assert summary["scale_outs"] >= 1 and summary["exchanges_peak"] >= 2  # 1,800 records/s on a mark of 1,200
    timeline = json.loads((out / "timeline.json").read_text())
    # a sample a second is asked for; a busy machine answers fewer (9 in 12 s beside two busy loops): a timeline
    # of the run is what is checked, not the pace of its sampling
    assert len(timeline["samples"]) >= 4 and timeline["events"]
    assert all(len(c["points"]) >= 4 for c in timeline["subscribers"])
    slow_points = timeline["subscribers"][2]["points"]
    assert slow_points[-1]["dropped"] <= slow["gap_records"]  # what the gaps plot shows
    # it read nothing for 3 s, while the publishers went on: two points 1.5 s apart or more within the pause
    assert any(b["time"] - a["time"] >= 1.5 and b["received"] - a["received"] < 400
               for gap in (1, 2) for a, b in zip(slow_points, slow_points[gap:]))
    # latency as the queue scaled: 1 exchange, then 2 after the scale-out
    assert {r["exchanges"] for r in summary["latency_by_exchanges"]} >= {1, 2}
    assert all(r["seconds"] > 0 and 0 < r["p50_ms"] <= r["p99_ms"] for r in summary["latency_by_exchanges"])
    assert any("records/s" in line for line in lines)
    # the report: every plot a real PNG image, and a page that shows them
    for name in PLOTS:
        image = matplotlib.image.imread(str(out / name))
        assert image.shape[0] > 100 and image.shape[1] > 100
    page = (out / "index.html").read_text()
    assert all(f'src="{name}"' in page for name in PLOTS) and "clean" in page
    assert "by exchanges in the queue" in page
    (out / "index.html").unlink()
    assert str(out / "index.html") in render(str(out))  # python -m simulation report DIR renders it again


def test_report_of_a_directory_without_results_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="summary.json: cannot read"):
        render(str(tmp_path))
    (tmp_path / "summary.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not JSON"):
        render(str(tmp_path))


GIVEN = """
[scenario]
name = "given"
duration_s = 6

[[queue]]
name = "given"
rules = { host_cpu_percent = 100 }

[[subscribers]]
prefix = ""

[[publishers]]
count = 2
rate = 500
every_s = 0.5

[[faults]]
at_s = 3
kind = "kill_exchange"
"""


def test_a_scenario_runs_on_a_given_cluster_and_leaves_it_as_it_was(tmp_path):
    with EmbeddedCluster(hosts=2, log_dir=str(tmp_path / "cluster")) as cluster:
        before = cluster.pids()
        # faults that need the runner's own cluster are refused before anything starts
        with pytest.raises(ConfigError, match=r"\[\[faults\]\] #2 restart_zookeeper needs the runner's own cluster"):
            Runner(parse_scenario(GIVEN + '[[faults]]\nat_s = 4\nkind = "restart_zookeeper"\nfor_s = 1\n', "g.toml"),
                   str(tmp_path / "refused"), zk=cluster.zk, root=cluster.root)
        # a queue of the scenario that exists already is not taken over
        cluster.manager.create("given")
        with pytest.raises(ConfigError, match="queue 'given' already exists"):
            Runner(parse_scenario(GIVEN, "g.toml"), str(tmp_path / "taken"), zk=cluster.zk, root=cluster.root).run()
        assert cluster.manager.exists("given")
        cluster.manager.remove("given")

        summary = Runner(parse_scenario(GIVEN, "g.toml"), str(tmp_path / "out"), progress=lambda line: None,
                         zk=cluster.zk, root=cluster.root).run()
        # (two publishers at 500 records/s for 6 s; their processes may start seconds late on a busy machine: one
        # CI run published 1,792, one of them for half a second. That records flowed and none was lost is the point)
        assert summary["keep_up_audit"]["clean"] and summary["published"] > 500, summary["keep_up_audit"]
        (fault,) = summary["faults"]
        assert "error" not in fault and recovered(summary)
        # the cluster is as it was: every process of its own still runs, the scenario's queue is gone
        assert all(psutil.pid_exists(pid) for pid in before)
        cluster.wait_for(lambda: not cluster.manager.exists("given"), 10, "the scenario's queue removed")
