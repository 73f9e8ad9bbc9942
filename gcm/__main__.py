"""``python -m gcm``: run one global configuration manager (leader or standby) until SIGTERM."""

from __future__ import annotations

import sys

from gcm import main

if __name__ == "__main__":
    sys.exit(main())
