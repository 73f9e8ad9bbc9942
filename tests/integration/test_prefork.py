"""Processes forked from a prefork server (real processes: a server per test process, the probe modules beside
this file): each runs as ``python -m`` would have run it, with its own arguments, environment, working directory,
streams, random sequence and command line; exit codes and signals are told; what must not be forked from is not."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

import psutil
import pytest

from roq import prefork
from roq.errors import BrokerTimeoutError
from roq.process import spawn

PROBE = "tests.integration.prefork_probe"


def said(child) -> dict:
    line = child.communicate(30).splitlines()[0]
    return json.loads(line)


def test_a_forked_process_runs_its_module_as_python_m_would(tmp_path, monkeypatch):
    monkeypatch.setenv("ROQ_PROBE", "first")
    first = spawn("probe", PROBE, ["--flag", "a b", "--exit", "0"], stderr=open(tmp_path / "err", "wb"))
    assert isinstance(first._popen, prefork.Forked) and prefork.server_pid() is not None
    one = said(first)
    assert first.returncode == 0 and one["argv"] == ["--flag", "a b", "--exit", "0"] and one["probe"] == "first"
    assert one["main"] == "__main__" and one["cwd"] == os.getcwd()
    assert one["cmdline"].rstrip("\0") == " ".join([sys.executable, "-m", PROBE, "--flag", "a b", "--exit", "0"])  # as ps shows it
    assert (tmp_path / "err").read_text() == "to stderr\n"

    # the environment and working directory are the caller's at each start, not the server's
    monkeypatch.setenv("ROQ_PROBE", "second")
    monkeypatch.chdir(tmp_path)
    second = spawn("probe", PROBE, ["--exit", "3"], env={**os.environ, "ROQ_PROBE": "given"})
    two = said(second)
    assert second.returncode == 3 and two["probe"] == "given" and two["cwd"] == str(tmp_path)
    assert two["random"] != one["random"]  # each its own sequence, not the server's


def test_forked_processes_start_their_own_from_servers_forked_from_them():
    """A process forked from a server forked from a process... (a host manager started by ``roq cluster up``)."""
    top = said(spawn("probe", PROBE, ["--nested", "3"]))
    assert top["argv"] == ["--nested", "3"]
    middle, code = top["nested"]
    assert middle["argv"] == ["--nested", "2"] and code == 0
    bottom, code = middle["nested"]
    assert bottom["argv"] == ["--nested", "1"] and code == 0 and bottom["nested"][0]["argv"] == []


def test_standard_input_commands_reach_a_forked_process():
    child = spawn("probe", PROBE, ["--read-stdin"], commands=True)
    stream = child._popen.stdin
    stream.write(b"hello\n")
    stream.close()
    assert said(child)["stdin"] == "hello\n" and child.returncode == 0


def test_exit_by_a_signal_and_a_stop_are_told_as_by_subprocess():
    child = spawn("probe", PROBE, ["--sleep", "60"])
    assert child.alive() and child.returncode is None
    deadline = time.monotonic() + 20
    while psutil.Process(child.pid).cmdline() != [sys.executable, "-m", PROBE, "--sleep", "60"]:  # what ps shows
        assert time.monotonic() < deadline, psutil.Process(child.pid).cmdline()
        time.sleep(0.01)
    with pytest.raises(BrokerTimeoutError):
        child.wait(0.2)
    os.kill(child.pid, signal.SIGKILL)
    assert child.wait(10) == -signal.SIGKILL and not child.alive()
    other = spawn("probe", PROBE, ["--sleep", "60"])
    assert other.stop(10) == -signal.SIGTERM  # the probe does not catch SIGTERM


def test_waits_from_several_threads_each_get_their_own_code():
    children = [spawn("probe", PROBE, ["--exit", str(i)]) for i in range(6)]
    codes: dict[int, int] = {}

    def wait(i: int) -> None:
        codes[i] = children[i].wait(30)

    threads = [threading.Thread(target=wait, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(40)
    assert codes == {i: i for i in range(6)}


def test_a_module_whose_import_starts_a_thread_is_started_as_a_new_interpreter():
    child = spawn("threaded", "tests.integration.prefork_threaded", [])
    assert not isinstance(child._popen, prefork.Forked)
    assert child.communicate(30).strip() == "ran" and child.returncode == 0
    # the server was not harmed: it forks the others still
    with spawn("probe", PROBE, []) as probe:
        assert isinstance(probe._popen, prefork.Forked)


def test_what_the_server_forked_dies_with_it_and_the_next_start_has_a_new_server():
    child = spawn("probe", PROBE, ["--sleep", "60"])
    server = prefork.server_pid()
    assert server is not None and psutil.Process(child.pid).ppid() == server
    os.kill(server, signal.SIGKILL)
    assert child.wait(20) == -signal.SIGTERM  # it got SIGTERM when its parent died
    deadline = time.monotonic() + 20
    while psutil.pid_exists(child.pid) and psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the forked process outlived its server"
        time.sleep(0.05)
    again = spawn("probe", PROBE, ["--exit", "0"])
    assert prefork.server_pid() not in (None, server) and said(again)["argv"] == ["--exit", "0"]


def test_a_start_finds_its_server_killed_unseen_and_starts_all_the_same():
    first = spawn("probe", PROBE, ["--exit", "0"])
    assert first.wait(30) == 0
    server = prefork.server_pid()
    os.kill(server, signal.SIGKILL)  # nobody reads from it before the next start
    child = spawn("probe", PROBE, ["--exit", "2"])
    assert said(child)["argv"] == ["--exit", "2"] and child.returncode == 2
    with spawn("probe", PROBE, []) as again:  # and the start after it has a new server
        assert isinstance(again._popen, prefork.Forked) and prefork.server_pid() not in (None, server)


def test_prefork_off_starts_new_interpreters(monkeypatch):
    monkeypatch.setenv("ROQ_PREFORK", "0")
    child = spawn("probe", PROBE, ["--exit", "4"])
    assert not isinstance(child._popen, prefork.Forked)
    assert said(child)["argv"] == ["--exit", "4"] and child.returncode == 4
