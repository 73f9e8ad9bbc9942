"""LineReader: whole lines from a pipe, without blocking, long lines dropped, end of stream seen."""

from __future__ import annotations

import os

from roq.runtime import LineReader


def test_lines_come_whole_and_the_end_is_seen():
    r, w = os.pipe()
    reader = LineReader(r, limit=10)
    try:
        assert reader.read() == []  # nothing yet: no blocking
        os.write(w, b"one\ntw")
        assert reader.read() == [b"one"]
        os.write(w, b"o\nthree\n")
        assert reader.read() == [b"two", b"three"]
        os.write(w, b"x" * 11 + b"\nfour\n" + b"y" * 11)  # a whole line too long, and a partial one too long
        assert reader.read() == [b"four"]
        assert reader.dropped == 2
        os.close(w)
        w = -1
        assert reader.read() == [] and reader.closed
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
