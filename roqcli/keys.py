"""``roq keys``: CURVE key pairs (``new``), a client's credentials in a cluster's keys (``client``), and taking a
client's key back (``revoke``); see :mod:`roq.security.keys`."""

from __future__ import annotations

import argparse
import os
import time

from roq.errors import ConfigError
from roq.security.keys import PUBLIC_SUFFIX, ClusterKeys, expiry, new_keypair
from roq.runtime import ExitCode
from roq.settings import parse_duration

__all__ = ["DEFAULT_DIR", "DEFAULT_CLUSTER_KEYS", "keys"]

DEFAULT_DIR = os.path.join("~", ".roq", "keys")
#: where ``roq cluster up`` keeps the keys of the cluster it runs
DEFAULT_CLUSTER_KEYS = os.path.join("~", ".roq", "cluster")


def keys(args: argparse.Namespace) -> int:
    if args.action == "new":
        directory = os.path.expanduser(args.dir or DEFAULT_DIR)
        pair = new_keypair(directory, args.name, overwrite=args.force)
        print(f"public key {pair.public_path}  (give it to the peers that must know this key)")
        print(f"secret key {pair.secret_path}  (mode 600: this process's or client's alone)")
        return ExitCode.OK
    cluster = ClusterKeys(os.path.expanduser(args.keys or DEFAULT_CLUSTER_KEYS))
    if not os.path.exists(cluster.secret_key):
        raise ConfigError(f"{cluster.directory} holds no cluster keys (cluster.key_secret); roq cluster up makes them")
    if args.action == "client":
        expires = time.time() + parse_duration(args.valid_for) if getattr(args, "valid_for", None) else None
        path = cluster.client(args.name, expires)
        print(f"credentials {path}  (use with --credentials, or export ROQ_CREDENTIALS=...)")
        when = expiry(os.path.join(path, args.name + PUBLIC_SUFFIX))
        if when is not None:
            print(f"expires {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(when))}: the key stops working then")
        return ExitCode.OK
    if not cluster.revoke(args.name):
        raise ConfigError(f"no key named {args.name!r} in {cluster.keyring}")
    print(f"revoked: {args.name}'s key is out of {cluster.keyring}; it opens no more connections")
    return ExitCode.OK
