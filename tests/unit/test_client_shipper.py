"""The KPI shipper's record of the files it shipped: kept across restarts, forgiving of damage."""

from __future__ import annotations

import json

from client.shipper import Shipped


def test_the_files_shipped_are_kept_and_forgotten_once_removed_from_the_archive(tmp_path):
    path = str(tmp_path / ".shipped-h.json")
    shipped = Shipped(path)
    assert shipped.files == set()
    shipped.add("queue=q/date=2026-11-28/a.jsonl")
    shipped.add("queue=q/date=2026-11-28/b.jsonl")
    assert Shipped(path).files == {"queue=q/date=2026-11-28/a.jsonl", "queue=q/date=2026-11-28/b.jsonl"}
    shipped.keep_only({"queue=q/date=2026-11-28/b.jsonl", "queue=q/date=2026-11-28/c.jsonl"})
    assert Shipped(path).files == {"queue=q/date=2026-11-28/b.jsonl"}
    assert not (tmp_path / ".shipped-h.json.part").exists()


def test_a_damaged_record_starts_again_empty_and_every_file_is_shipped_again(tmp_path):
    for damage in (b"{not json", b"[]", json.dumps({"files": [1, 2]}).encode(), b"\xff\xfe"):
        path = tmp_path / ".shipped-h.json"
        path.write_bytes(damage)
        assert Shipped(str(path)).files == set()
