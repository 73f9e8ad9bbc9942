"""The KPI shipper's record of the files it shipped: kept across restarts, appended to, forgiving of damage."""

from __future__ import annotations

from client.shipper import Shipped

A, B, C = (f"queue=q/date=2026-11-28/{n}.jsonl" for n in "abc")


def test_the_files_shipped_are_kept_and_forgotten_once_removed_from_the_archive(tmp_path):
    path = tmp_path / ".shipped-h"
    shipped = Shipped(str(path))
    assert shipped.files == set()
    shipped.add(A)
    shipped.add(B)
    assert path.read_text() == f"{A}\n{B}\n"  # appended, a line each
    assert Shipped(str(path)).files == {A, B}
    shipped.keep_only({B, C})
    assert Shipped(str(path)).files == {B} and path.read_text() == f"{B}\n"
    assert not (tmp_path / ".shipped-h.part").exists()


def test_damage_names_no_file_so_at_worst_a_file_is_shipped_again(tmp_path):
    path = tmp_path / ".shipped-h"
    path.write_bytes(f"{A}\n".encode() + b"\xff\xfe garbage\nqueue=q/date=2026-11-28/b.js")  # torn last line
    assert A in Shipped(str(path)).files and B not in Shipped(str(path)).files
    shipped = Shipped(str(path))
    shipped.keep_only({A, B})  # the garbage goes when the record is written anew
    assert Shipped(str(path)).files == {A}
