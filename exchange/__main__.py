"""``python -m exchange``: run one exchange until SIGTERM (graceful drain) or a second signal."""

from __future__ import annotations

import sys

from exchange import main

if __name__ == "__main__":
    sys.exit(main())
