"""The KPI archive writer: atomic files, rotation, recovery of abandoned parts, retention."""

from __future__ import annotations

import json
import os

import pytest

from roq.kpi.archive import ArchiveWriter, host_of, partition_dir, placed_files, writer_name
from roq.kpi.records import EventRecord

DAY = 86400.0
T0 = 1_790_000_000.0  # 2026-09-21 UTC, mid-day


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def visible(root) -> list[str]:
    """Files a reader sees (not hidden), relative to the archive's root."""
    out = []
    for d, _, files in os.walk(root):
        out += [os.path.relpath(os.path.join(d, f), root) for f in files if not f.startswith(".")]
    return sorted(out)


def lines(root) -> list[dict]:
    return [json.loads(line) for f in visible(root) for line in open(os.path.join(root, f))]


def test_records_become_visible_only_in_whole_files(tmp_path):
    clock = Clock()
    w = ArchiveWriter(str(tmp_path), "q", "host:1", rotate_s=30, clock=clock)
    w.append(EventRecord(event="started", text="x1", exchange="x1"))
    w.tick()
    assert visible(tmp_path) == []  # written, but in the hidden part
    hidden = os.listdir(partition_dir(str(tmp_path), "q", "2026-09-21"))
    assert len(hidden) == 1 and hidden[0].startswith(".host_1-") and hidden[0].endswith(".jsonl.part")
    clock.t += 31
    w.append(EventRecord(event="relocated", text="moved"))
    w.tick()  # the file is 31 s old: put in place, the new record starts the next one
    assert visible(tmp_path) == [f"queue=q/date=2026-09-21/{hidden[0][1:-5]}"]
    w.close()
    assert [r["kind"] for r in lines(tmp_path)] == ["event", "event"]
    assert lines(tmp_path)[0] == {"kind": "event", "time": T0, "event": "started", "text": "x1", "exchange": "x1",
                                  "publisher": None, "reason": None, "fields": {}}
    assert (w.records, w.files, w.errors) == (2, 2, 0)


def test_rotation_by_size_and_at_midnight(tmp_path):
    clock = Clock(T0 - T0 % DAY + DAY - 2)  # two seconds before midnight
    w = ArchiveWriter(str(tmp_path), "q", "w", rotate_bytes=200, clock=clock)
    for _ in range(10):
        w.append(EventRecord(event="pad", text="x" * 50))
        w.tick()
        clock.t += 1.0
    w.close()
    days = {f.split("/")[1] for f in visible(tmp_path)}
    assert days == {"date=2026-09-21", "date=2026-09-22"}
    assert len(visible(tmp_path)) >= 4 and len(lines(tmp_path)) == 10


def test_an_abandoned_part_is_recovered_up_to_its_last_whole_line(tmp_path):
    directory = partition_dir(str(tmp_path), "q", "2026-09-21")
    os.makedirs(directory)
    part = os.path.join(directory, ".dead-1-1.jsonl.part")
    with open(part, "w") as f:
        f.write('{"kind":"exchange","time":1}\n{"kind":"exch')  # the process died mid-line
    fresh = os.path.join(directory, ".alive-1-1.jsonl.part")
    open(fresh, "w").write('{"kind":"host","time":2}\n')
    os.utime(part, (T0 - 3600, T0 - 3600))
    ArchiveWriter(str(tmp_path), "q", "next", clock=Clock(os.stat(fresh).st_mtime))
    assert visible(tmp_path) == ["queue=q/date=2026-09-21/recovered-dead-1-1.jsonl"]
    assert lines(tmp_path) == [{"kind": "exchange", "time": 1}]
    assert os.path.exists(fresh)  # written recently: maybe a live writer's, left alone


def test_old_dates_are_pruned(tmp_path):
    for date in ("2026-09-01", "2026-09-15", "2026-09-20"):
        os.makedirs(partition_dir(str(tmp_path), "q", date))
    os.makedirs(partition_dir(str(tmp_path), "other", "2026-09-01"))
    w = ArchiveWriter(str(tmp_path), "q", "w", retention_days=7, clock=Clock())
    w.tick()
    assert sorted(os.listdir(tmp_path / "queue=q")) == ["date=2026-09-15", "date=2026-09-20"]
    assert os.path.isdir(partition_dir(str(tmp_path), "other", "2026-09-01"))  # another writer's partition


def test_a_failed_write_is_counted_and_the_writer_goes_on(tmp_path):
    w = ArchiveWriter(str(tmp_path), "q", "w", clock=Clock())
    (tmp_path / "queue=q" / "date=2026-09-21").write_text("a file where the directory should be")
    w.append(EventRecord(event="lost", text=""))
    w.tick()
    assert w.errors == 1
    os.remove(tmp_path / "queue=q" / "date=2026-09-21")
    w.append(EventRecord(event="kept", text="", fields={"n": 2}))
    w.close()
    assert [r["fields"].get("n") for r in lines(tmp_path)] == [2]


def test_names_with_a_trailing_newline_are_neither_pruned_nor_recovered(tmp_path):
    base = tmp_path / "queue=q"
    os.makedirs(base / "date=2026-09-01\n")  # not a date directory this writer made: never removed
    directory = partition_dir(str(tmp_path), "q", "2026-09-21")
    os.makedirs(directory)
    part = os.path.join(directory, ".dead-1-1.jsonl.part\n")
    open(part, "w").write('{"kind":"exchange","time":1}\n')
    os.utime(part, (T0 - 3600, T0 - 3600))
    w = ArchiveWriter(str(tmp_path), "q", "w", retention_days=7, clock=Clock())
    w.tick()
    assert os.path.isdir(base / "date=2026-09-01\n")
    assert os.listdir(directory) == [".dead-1-1.jsonl.part\n"]  # not a part this module names: left alone


def test_a_file_put_in_place_names_its_writers_host_and_only_such_files_are_listed(tmp_path):
    clock = Clock()
    for host in ("127.0.0.11", "web-1.example"):
        writer = ArchiveWriter(str(tmp_path), "q", writer_name("monitor", host, 4242), clock=clock)
        writer.append(EventRecord(event="e", text="t"))
        writer.close()
    hosts = ArchiveWriter(str(tmp_path), "@hosts", writer_name("host", "127.0.0.11", 7), clock=clock)
    hosts.append(EventRecord(event="e", text="t"))
    hosts.flush()  # written, not put in place: not listed
    files = placed_files(str(tmp_path))
    assert [(p, d) for p, d, _ in files] == [("q", "2026-09-21")] * 2
    assert sorted(host_of(name) for _, _, name in files) == ["127.0.0.11", "web-1.example"]
    assert host_of("recovered-" + files[0][2]) == host_of(files[0][2])
    assert host_of("synthetic-1-2.jsonl") is None and host_of(".monitor-h-1-2-3.jsonl.part") is None
    assert placed_files(str(tmp_path), since_date="2026-09-22") == []
    hosts.close()
    assert len(placed_files(str(tmp_path))) == 3
    with pytest.raises(ValueError):
        writer_name("exchange", "h", 1)
