"""``python -m client.shipper``: run a host's KPI shipper until SIGTERM."""

from __future__ import annotations

import sys

from client.shipper import main

if __name__ == "__main__":
    sys.exit(main())
