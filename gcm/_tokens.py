"""The HTTP API's bearer tokens and the principals they stand for.

The administrator's token is the GCM's ``api_token_file`` (its principal is the GCM's ``admin``); every other
principal's is a file ``NAME.token`` in the ``api_tokens`` directory (``roq keys client`` writes one beside
the client's CURVE key), read again when the directory changes, so a token removed there stops working
within a second, nothing restarted. Tokens are compared by their SHA-256 digests: a look-up takes the same
time whichever token is asked about.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from typing import Callable

from roq.security.acl import Rule
from roq.errors import ConfigError

log = logging.getLogger(__name__)

__all__ = ["Tokens", "SUFFIX", "REFRESH_S", "MAX_TOKENS", "MIN_TOKEN"]

SUFFIX = ".token"
REFRESH_S = 0.25  # seconds between looks at the directory
MAX_TOKENS = 10_000
MIN_TOKEN = 16  # characters of a bearer token, at least


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class Tokens:
    """Bearer token -> principal.

    Args:
        admin_token: the administrator's token ("" = none).
        admin: the administrator's principal.
        directory: the directory of ``NAME.token`` files ("" = none).
        clock: monotonic time, for the directory's refresh.
    """

    def __init__(self, admin_token: str, admin: str = "admin", directory: str = "", *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.directory = directory
        self._admin = {_digest(admin_token): admin} if admin_token else {}
        self._by_digest = dict(self._admin)
        self._stamp: tuple[int, int] | None = None
        self._next = 0.0
        self._clock = clock
        self.skipped: list[str] = []

    def __bool__(self) -> bool:
        self._refresh()
        return bool(self._by_digest)

    def principal(self, token: str) -> str | None:
        """The principal of ``token``, or None if it is nobody's."""
        self._refresh()
        return self._by_digest.get(_digest(token))

    def _refresh(self) -> None:
        if not self.directory or self._clock() < self._next:
            return
        self._next = self._clock() + REFRESH_S
        try:
            st = os.stat(self.directory)
            names = sorted(n for n in os.listdir(self.directory) if n.endswith(SUFFIX))[:MAX_TOKENS]
        except OSError as exc:
            if self._stamp is not None:
                log.warning("api_tokens %s cannot be read (%s); the tokens known stay", self.directory, exc)
            return
        stamp = (st.st_mtime_ns, len(names))
        if stamp == self._stamp:
            return
        found, skipped = {}, []
        for name in names:
            path = os.path.join(self.directory, name)
            try:
                principal = Rule(name[: -len(SUFFIX)], "publish").principal  # a principal's name, checked
                if os.stat(path).st_mode & 0o077:
                    raise ConfigError("readable by others")
                with open(path, encoding="utf-8") as f:
                    token = f.read(4096).strip()
                if len(token) < MIN_TOKEN or any(c.isspace() for c in token):
                    raise ConfigError(f"not a token of {MIN_TOKEN} or more characters without spaces")
            except (OSError, UnicodeDecodeError, ConfigError) as exc:
                skipped.append(f"{name}: {exc}")
                continue
            found[_digest(token)] = principal
        if skipped and skipped != self.skipped:
            log.warning("api_tokens %s: %d files skipped: %s", self.directory, len(skipped), "; ".join(skipped[:5]))
        self._by_digest = {**found, **self._admin}
        self._stamp, self.skipped = stamp, skipped
