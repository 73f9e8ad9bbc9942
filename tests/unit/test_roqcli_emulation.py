"""Emulated hosts' state files: what :func:`roqcli.emulation.sweep` removes, and that sweeps side by side (clusters
starting at once on other test workers, or by other users) do not trip over each other."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import psutil
import pytest

from roqcli import emulation


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    directory = tmp_path / "roq-emulated"
    directory.mkdir()
    monkeypatch.setattr(emulation, "STATE_DIR", str(directory))
    monkeypatch.setattr(emulation, "_remove", lambda name, tag, namespaces, cpu: [f"made by {name}"])
    monkeypatch.setattr(emulation, "Controller", _NoCgroups)
    return directory


class _NoCgroups:
    def __init__(self, base: str) -> None:
        raise emulation.ConfigError("no cgroups in a unit test")


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def _write(directory, name: str, pid: int, started: float) -> None:
    (directory / f"{name}.json").write_text(json.dumps({"pid": pid, "started": started, "name": name, "tag": "t",
                                                        "namespaces": []}))


def test_a_gone_launchers_state_is_removed_and_a_live_ones_kept(state_dir):
    me = psutil.Process()
    _write(state_dir, f"{me.pid}.1", me.pid, me.create_time())
    _write(state_dir, "1.2", _dead_pid(), 1.0)
    (state_dir / "3.3.json").write_text('{"pid": 3, "sta')  # cut short: unreadable
    assert emulation.sweep() == ["made by 1.2"]
    assert sorted(os.listdir(state_dir)) == [f"{me.pid}.1.json"]


def test_a_state_being_written_is_not_read_and_one_a_killed_writer_left_is_removed(state_dir):
    me = psutil.Process()
    (state_dir / f".{me.pid}.4.json.part").write_text('{"pid": ')
    (state_dir / f".{_dead_pid()}.5.json.part").write_text('{"pid": ')
    assert emulation.sweep() == []
    assert os.listdir(state_dir) == [f".{me.pid}.4.json.part"]


def test_sweeps_side_by_side_each_end_well(state_dir):
    for i in range(200):
        _write(state_dir, f"{i}.{i}", _dead_pid() if i == 0 else 10**7 + i, 1.0)
    errors: list[BaseException] = []

    def sweep() -> None:
        try:
            emulation.sweep()
        except BaseException as exc:  # what the test reports
            errors.append(exc)

    sweepers = [threading.Thread(target=sweep) for _ in range(4)]
    for t in sweepers:
        t.start()
    for t in sweepers:
        t.join(30)
    assert not errors and os.listdir(state_dir) == []
