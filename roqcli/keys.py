"""``roq keys new NAME``: a CURVE key pair for a process or a client of the cluster (see :mod:`roq.keys`)."""

from __future__ import annotations

import argparse
import os

from roq.keys import new_keypair
from roq.runtime import ExitCode

__all__ = ["DEFAULT_DIR", "keys"]

DEFAULT_DIR = os.path.join("~", ".roq", "keys")


def keys(args: argparse.Namespace) -> int:
    directory = os.path.expanduser(args.dir or DEFAULT_DIR)
    pair = new_keypair(directory, args.name, overwrite=args.force)
    print(f"public key {pair.public_path}  (give it to the peers that must know this key)")
    print(f"secret key {pair.secret_path}  (mode 600: this process's or client's alone)")
    return ExitCode.OK
