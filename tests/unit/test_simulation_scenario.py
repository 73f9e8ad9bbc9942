"""Scenario files: the shipped ones are valid, and every kind of mistake names the line and the key."""

from __future__ import annotations

import pathlib

import pytest

from roq.errors import ConfigError
from roq.settings import parse_rate
from roqcli.emulation import HostBudget, parse_budgets
from simulation.scenario import load_scenario, parse_scenario

SHIPPED = sorted((pathlib.Path(__file__).parents[2] / "simulation" / "scenarios").glob("*.toml"))

HEAD = """\
[scenario]
name = "t"
duration_s = 30

[[queue]]
name = "q"
"""


def test_every_shipped_scenario_is_valid():
    assert {p.stem for p in SHIPPED} >= {"quickstart", "ramp-and-drain", "failover", "eqs-2011"}
    for path in SHIPPED:
        s = load_scenario(str(path))
        assert s.info.name == path.stem and s.queues and s.publishers and s.subscribers


def test_the_eqs_experiment_is_the_papers():
    s = load_scenario(str(next(p for p in SHIPPED if p.stem == "eqs-2011")))
    (pubs,), (subs,) = s.publishers, s.subscribers
    assert (pubs.count, pubs.rate, pubs.size, subs.count) == (16, 57, 5120, 20)
    assert s.queues[0].rules["max_exchanges"] == 4
    assert "host_cpu_percent" not in s.queues[0].rules  # on hosts of their own budgets, the host checks as they are
    assert {b.cpus for b in s.budgets} == {0.5} and len(s.budgets) == 4
    assert s.reference.delivered_records_per_minute == 1_000_000 and "2011" in s.reference.source
    joins = pubs.joins()
    assert joins == sorted(joins) and len(set(joins)) == 16  # one after another


def test_a_schedule_is_read_as_written():
    s = parse_scenario(HEAD + """
[[publishers]]
rate = 100
count = 3
start_s = 1
every_s = 2
stop_s = 20
leave_every_s = 1.5

[[subscribers]]
delay_us = 50
""")
    (g,) = s.publishers
    assert g.queue == "q" and g.joins() == [1, 3, 5] and g.leaves(30) == [20, 21.5, 23]
    assert not s.subscribers[0].keeps_up and s.hosts == ["127.0.0.11", "127.0.0.12", "127.0.0.13"]


@pytest.mark.parametrize("body, line, words", [
    ("[[publishers]]\nrate = 10\ncuont = 2\n", 10, ["[[publishers]] #1", "'cuont'", "did you mean 'count'"]),
    ("[[publishers]]\nrate = \"fast\"\n", 9, ["'rate'", "must be a number", "'fast'"]),
    ("[[publishers]]\nrate = 10\nkeys = \"k\"\n", 10, ["'keys'", "list of strings"]),
    ("[[publishers]]\nrate = 0\n", 9, ["'rate'", "more than 0"]),
    ("[[publishers]]\nrate = 5\ncount = 4\nevery_s = 10\n", 11, ["'every_s'", "join at 30 s", "not before the end"]),
    ("[[publishers]]\nrate = 5\nstart_s = 10\nstop_s = 5\n", 11, ["'stop_s'", "leave at 5 s", "before it joins"]),
    ("[[publishers]]\nrate = 5\nstop_s = 40\n", 10, ["'stop_s'", "after the end"]),
    ("[[publishers]]\nrate = 5\nqueue = \"nope\"\n", 10, ["no [[queue]] named 'nope'"]),
    ("[[publishers]]\nrate = 5\nsize = 10\n", 10, ["'size'", "at least 24"]),
    ("[[subscribers]]\nprefix = 3\n", 9, ["[[subscribers]] #1", "'prefix'", "must be a string"]),
    ("[[faults]]\nat_s = 40\nkind = \"kill_monitor\"\n", 9, ["[[faults]] #1", "'at_s'", "inside the run"]),
    ("[[faults]]\nat_s = 4\nkind = \"explode\"\n", 10, ["'kind'", "unknown fault 'explode'", "kill_host"]),
    ("[[faults]]\nat_s = 4\nkind = \"kill_host\"\n", 8, ["missing key 'host'", "127.0.0.11"]),
    ("[[faults]]\nat_s = 4\nkind = \"kill_host\"\nhost = \"10.0.0.1\"\n", 11, ["'host'", "not a host"]),
    ("[[faults]]\nat_s = 4\nkind = \"kill_gcm_leader\"\nqueue = \"q\"\n", 11, ["'queue'", "takes no 'queue'"]),
    ("[[faults]]\nat_s = 25\nkind = \"pause_monitor\"\nfor_s = 6\n", 11, ["'for_s'", "past the end"]),
    ("[[faults]]\nat_s = 4\nkind = \"pause_monitor\"\n", 8, ["'for_s'", "more than 0"]),
])
def test_mistakes_name_the_line_and_the_key(body, line, words):
    with pytest.raises(ConfigError) as err:
        parse_scenario(HEAD + "\n" + body, "bad.toml")
    message = str(err.value)
    assert message.startswith(f"bad.toml:{line}: "), message
    for word in words:
        assert word in message, message


@pytest.mark.parametrize("text, start, words", [
    ("[scenario]\nname = \"t\"\nduration_s = 30\nhosts = 12\n[[queue]]\nname = \"q\"\n", "s.toml:4:", ["'hosts'", "between 1 and 9"]),
    ("[scenario]\nname = \"t\"\nduration_s = -1\n[[queue]]\nname = \"q\"\n", "s.toml:3:", ["'duration_s'"]),
    ("[scenario]\nname = \"t\"\n[[queue]]\nname = \"q\"\n", "s.toml:1:", ["missing key 'duration_s'"]),
    ("[scenario]\nname = \"t\"\nduration_s = 3\n", "s.toml:", ["at least one [[queue]]"]),
    (HEAD + "rules = { exchange_records_per_s = -5 }\n", "s.toml:7:", ["rules", "exchange_records_per_s", "between 10 and"]),
    (HEAD + "[queue.rules]\nmin_exchanges = 5\nmax_exchanges = 2\n", "s.toml:8:", ["'min_exchanges' (5) is above"]),
    (HEAD + "[queue.rules]\nsustain = 1\n", "s.toml:8:", ["unknown rule 'sustain'"]),
    (HEAD + "name = \"q\"\n", "s.toml:", ["not valid TOML", "line 7"]),
    (HEAD + "[[queue]]\nname = \"q\"\n", "s.toml:8:", ["[[queue]] #2", "declared twice"]),
    (HEAD + "[[queue]]\nname = \"r\"\n[[publishers]]\nrate = 5\n", "s.toml:9:", ["[[publishers]] #1", "missing key 'queue'"]),
    (HEAD + "[[queue]]\nname = \"bad name!\"\n", "s.toml:8:", ["'name'"]),
    (HEAD + "[[publisher]]\nrate = 5\n", "s.toml:7:", ["unknown table 'publisher'"]),
    (HEAD + "[reference]\nsource = \"x\"\ndelivered_records_per_minute = -1\n", "s.toml:9:",
     ["[reference]", "'delivered_records_per_minute'", "0 or more"]),
    (HEAD + "[reference]\nnote = \"x\"\n", "s.toml:7:", ["[reference]", "missing key 'source'"]),
    (HEAD + "[[publishers]]\ncount = 70\nrate = 1\n", "s.toml:", ["70 publishers and subscribers", "64"]),
])
def test_whole_file_mistakes_are_named_too(text, start, words):
    with pytest.raises(ConfigError) as err:
        parse_scenario(text, "s.toml")
    message = str(err.value)
    assert message.startswith(start), message
    for word in words:
        assert word in message, message


def test_an_unreadable_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_scenario(str(tmp_path / "missing.toml"))
    (tmp_path / "binary.toml").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match="cannot read"):
        load_scenario(str(tmp_path / "binary.toml"))


def test_buffer_sizes_are_read_and_checked():
    s = parse_scenario(HEAD.replace("duration_s = 30", "duration_s = 30\nexchange_backend_hwm = 500\n"
                                                       "exchange_subscriber_queue_bytes = 1000000")
                       + "[[publishers]]\nrate = 10\n[[subscribers]]\ndelay_us = 100\nrcvhwm = 20\n")
    assert s.info.exchange_backend_hwm == 500 and s.subscribers[0].rcvhwm == 20
    assert s.info.exchange_options() == ["--exchange-option=backend_hwm=500",
                                         "--exchange-option=subscriber_queue_bytes=1000000"]
    with pytest.raises(ConfigError, match=r"s.toml:4: \[scenario\] key 'exchange_backend_hwm': must be 0 or more"):
        parse_scenario(HEAD.replace("duration_s = 30", "duration_s = 30\nexchange_backend_hwm = -1"), "s.toml")
    with pytest.raises(ConfigError, match=r"s.toml:10: \[\[subscribers\]\] #1 key 'rcvhwm': must be 0 or more"):
        parse_scenario(HEAD + "[[publishers]]\nrate = 10\n[[subscribers]]\nrcvhwm = -5\n", "s.toml")


def test_emulated_hosts_take_one_budget_for_all_or_one_per_host():
    plain = parse_scenario(HEAD)
    assert plain.budgets == ()
    one = parse_scenario(HEAD.replace("[[queue]]", '[hosts]\ncpus = 0.5\nbandwidth = "100mbit"\n\n[[queue]]'))
    assert one.budgets == (HostBudget(0.5, "100mbit"),) * 3
    each = parse_scenario(HEAD.replace("[[queue]]", "[hosts]\ncpus = [0.25, 0.5, 1]\n\n[[queue]]"))
    assert [b.cpus for b in each.budgets] == [0.25, 0.5, 1.0] and all(not b.bandwidth for b in each.budgets)


@pytest.mark.parametrize("table, words", [
    ("cpus = [0.5, 1]", r"s.toml:6: \[hosts\] key 'cpus': 2 values for 3 hosts"),
    ('bandwidth = "fast"', r"s.toml:6: \[hosts\] key 'bandwidth': bandwidth 'fast' is not a rate such as 100mbit"),
    ("cpus = -1", r"s.toml:6: \[hosts\] key 'cpus': cpus must be 0 \(no quota\) or between 0.01 and 1024, got -1"),
    ('cpus = ["x"]', r"s.toml:6: \[hosts\] key 'cpus': values must be a number, got str 'x'"),
    ("memory = 5", r"s.toml:6: \[hosts\] key 'memory': unknown key"),
])
def test_bad_host_budgets_name_the_line_and_the_key(table, words):
    with pytest.raises(ConfigError, match=words):
        parse_scenario(HEAD.replace("[[queue]]", f"[hosts]\n{table}\n\n[[queue]]"), "s.toml")


def test_rates_are_read_as_tc_writes_them():
    assert parse_rate("100mbit") == 12.5e6 and parse_rate("1gbit") == 125e6 and parse_rate("12mbps") == 12e6
    assert parse_rate("800000") == 1e5
    with pytest.raises(ConfigError, match="below 8kbit"):
        parse_rate("10bit")
    assert parse_budgets(2, "0.5,1", "") == [HostBudget(0.5), HostBudget(1.0)]
    with pytest.raises(ConfigError, match="not a number of cores"):
        parse_budgets(2, "half")
    with pytest.raises(ConfigError, match="host cpus: 3 values for 2 hosts"):
        parse_budgets(2, "0.5,1,2")


def test_a_stalled_group_is_read_and_does_not_keep_up():
    s = parse_scenario(HEAD + "[[publishers]]\nrate = 10\n[[subscribers]]\npause_at = 500\npause_for_s = 3\n"
                       "[[subscribers]]\n")
    stalled, steady = s.subscribers
    assert (stalled.pause_at, stalled.pause_for_s, stalled.keeps_up) == (500, 3.0, False) and steady.keeps_up
    with pytest.raises(ConfigError, match=r"\[\[subscribers\]\] #1 key 'pause_for_s': must be 0 or more"):
        parse_scenario(HEAD + "[[publishers]]\nrate = 10\n[[subscribers]]\npause_at = 5\npause_for_s = -1\n", "s.toml")


def test_a_group_stalled_at_a_time_does_not_keep_up_and_names_one_pause_only():
    s = parse_scenario(HEAD + "[[publishers]]\nrate = 10\n[[subscribers]]\npause_at_s = 4.5\npause_for_s = 3\n")
    (stalled,) = s.subscribers
    assert (stalled.pause_at_s, stalled.pause_for_s, stalled.keeps_up) == (4.5, 3.0, False)
    with pytest.raises(ConfigError, match=r"s.toml:\d+: \[\[subscribers\]\] #1 key 'pause_at_s': give pause_at"):
        parse_scenario(HEAD + "[[publishers]]\nrate = 10\n[[subscribers]]\npause_at = 5\npause_at_s = 1\n"
                              "pause_for_s = 1\n", "s.toml")
    with pytest.raises(ConfigError, match=r"key 'pause_at_s': must be 0 or more"):
        parse_scenario(HEAD + "[[publishers]]\nrate = 10\n[[subscribers]]\npause_at_s = -1\n", "s.toml")
