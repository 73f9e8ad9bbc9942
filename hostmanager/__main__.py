"""``python -m hostmanager``: run the host manager of one host until SIGTERM."""

from __future__ import annotations

import sys

from hostmanager import main

if __name__ == "__main__":
    sys.exit(main())
