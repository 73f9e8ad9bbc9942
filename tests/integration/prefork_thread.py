"""A module that starts a thread when it is imported (for test_prefork.py, through prefork_threaded)."""

from __future__ import annotations

import threading
import time

_ticker = threading.Thread(target=lambda: time.sleep(3600), daemon=True)
_ticker.start()
