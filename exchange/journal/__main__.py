"""``python -m exchange.journal``: run one queue's journal until SIGTERM."""

from __future__ import annotations

import sys

from exchange.journal import main

if __name__ == "__main__":
    sys.exit(main())
