"""A module whose imports start a thread: never forked from (for test_prefork.py)."""

from __future__ import annotations

import sys

import tests.integration.prefork_thread  # noqa: F401 - starts a thread

if __name__ == "__main__":
    print("ran", flush=True)
    sys.exit(0)
