"""``python -m exchange.journal``: run one queue's journal until SIGTERM."""

from __future__ import annotations

import sys

from exchange.journal._journal import Journal
from roq.config import JournalConfig
from roq.runtime import run_main

DESCRIPTION = (
    "Run the journal of one durable RoQ queue: its exchanges send it every batch they forward, it appends them "
    "to segment files in --directory (each publisher's records once, in order), and acknowledges them once "
    "they are on disk (--durability always: one fdatasync covers every batch waiting) or written "
    "(--durability interval: synced every --sync-interval seconds). Recovery at start cuts a torn tail off the "
    "last segment and keeps the bytes cut beside it. With --monitor it reports to the queue's monitor and takes "
    "the queue's policy from it. SIGTERM syncs and stops it. It prints one line 'READY {json}' with its "
    "intake's endpoint when bound."
)


def make_journal(config: JournalConfig) -> Journal:
    return Journal(config, commands_fd=sys.stdin.fileno() if config.commands else None)


def main(argv: list[str] | None = None) -> int:
    return run_main("journal", JournalConfig, make_journal, argv, description=DESCRIPTION, module="exchange.journal")


if __name__ == "__main__":
    sys.exit(main())
