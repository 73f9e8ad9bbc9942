"""gcm._tokens: bearer tokens and the principals they stand for."""

from __future__ import annotations

import os

from gcm._tokens import Tokens

ADMIN = "a" * 32


def _write(directory, name: str, token: str, mode: int = 0o600) -> None:
    path = directory / f"{name}.token"
    path.write_text(token + "\n")
    os.chmod(path, mode)


def test_the_admins_token_and_a_directory_of_tokens_read_again_when_it_changes(tmp_path):
    now = [0.0]
    tokens = Tokens(ADMIN, "root", str(tmp_path), clock=lambda: now[0])
    assert tokens.principal(ADMIN) == "root" and tokens.principal("b" * 32) is None
    _write(tmp_path, "alice", "b" * 32)
    _write(tmp_path, "loose", "c" * 32, mode=0o644)  # readable by others: skipped
    _write(tmp_path, "short", "d" * 8)
    _write(tmp_path, "bad name!", "e" * 32)
    now[0] += 1
    assert tokens.principal("b" * 32) == "alice"
    assert tokens.principal("c" * 32) is None and tokens.principal("d" * 8) is None
    assert len(tokens.skipped) == 3
    os.remove(tmp_path / "alice.token")
    assert tokens.principal("b" * 32) == "alice"  # not read again before REFRESH_S
    now[0] += 1
    assert tokens.principal("b" * 32) is None and tokens.principal(ADMIN) == "root"


def test_no_token_at_all():
    tokens = Tokens("")
    assert not tokens and tokens.principal("") is None
