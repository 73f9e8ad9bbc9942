"""``python -m monitor``: run the monitor of one logical queue until SIGTERM."""

from __future__ import annotations

import sys

from monitor import main

if __name__ == "__main__":
    sys.exit(main())
