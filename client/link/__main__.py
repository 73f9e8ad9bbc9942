"""``python -m client.link``: run one link until SIGTERM."""

from __future__ import annotations

import sys

from client.link import main

if __name__ == "__main__":
    sys.exit(main())
