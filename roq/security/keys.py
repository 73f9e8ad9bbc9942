"""CURVE keys: a key pair in pyzmq's certificate format, written safely, and the checks made when one is read.

A pair is two files in one directory, as ``zmq.auth.create_certificates`` writes them: ``NAME.key`` (the
public key, readable by anyone: peers are given it) and ``NAME.key_secret`` (public and secret key, mode
0600). A secret key file that its owner's group or others may read is refused when read, with the command
that fixes it: a secret that others can read is not a secret any more, and a process should not start with
one unnoticed. The cluster has a server key, every process of it a key of its own, and every client a key
of its own plus the cluster's public key.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import re
import secrets
import shutil
import stat

import zmq.auth

from roq.errors import ConfigError
from roq.zk import ZkAuth

__all__ = ["KeyPair", "new_keypair", "load_secret", "load_public", "load_credentials", "ClusterKeys", "expiry",
           "PUBLIC_SUFFIX", "SECRET_SUFFIX", "CLUSTER_KEY", "TOKEN_SUFFIX"]

PUBLIC_SUFFIX = ".key"
SECRET_SUFFIX = ".key_secret"
#: The cluster's public key in a client's credentials directory.
CLUSTER_KEY = "cluster" + ".key"
#: A principal's bearer token for the HTTP API.
TOKEN_SUFFIX = ".token"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")


@dataclasses.dataclass(frozen=True)
class KeyPair:
    """A CURVE key pair (Z85 text, 40 bytes each); ``secret`` is None when only the public key was read."""

    public: bytes
    secret: bytes | None
    public_path: str
    secret_path: str = ""


def new_keypair(directory: str, name: str, *, overwrite: bool = False, expires: float | None = None) -> KeyPair:
    """Write a new key pair ``NAME.key`` and ``NAME.key_secret`` into ``directory`` (made with mode 0700 if
    missing); the secret file is created readable by its owner only. With ``expires`` (seconds since the
    epoch), both carry it in their metadata: a keyring holding the public key stops admitting it then.

    Raises:
        ConfigError: a bad name, a pair of that name exists already (unless ``overwrite``), or the directory
            cannot be written.
    """
    if not _NAME.match(name):
        raise ConfigError(f"a key's name is 1-64 letters, digits, '.', '_' or '-' (not starting with one of "
                          f"the last three), got {name[:80]!r}")
    public_path = os.path.join(directory, name + PUBLIC_SUFFIX)
    secret_path = os.path.join(directory, name + SECRET_SUFFIX)
    if not overwrite and (os.path.exists(public_path) or os.path.exists(secret_path)):
        raise ConfigError(f"a key named {name!r} exists in {directory} already: remove it first, or choose "
                          "another name")
    old = os.umask(0o077)  # every file and directory made here: the owner's only
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        for path in (public_path, secret_path):
            if overwrite and os.path.exists(path):
                os.remove(path)
        zmq.auth.create_certificates(directory, name)
        if expires is not None:  # in both files (pyzmq writes metadata into the secret one only)
            for path in (public_path, secret_path):
                with open(path, encoding="utf-8") as f:
                    text = f.read()
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text.replace("metadata\n", f'metadata\n    expires = "{_iso(expires)}"\n', 1))
    except OSError as exc:
        raise ConfigError(f"cannot write a key pair into {directory}: {exc.strerror or exc}") from exc
    finally:
        os.umask(old)
    os.chmod(public_path, 0o644)  # the public half is meant to be handed out
    return load_secret(secret_path)


def load_secret(path: str) -> KeyPair:
    """The key pair in the secret key file ``path``.

    Raises:
        ConfigError: the file is missing or unreadable, its group or others may read or write it, or it holds
            no secret key.
    """
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise ConfigError(f"secret key file {path!r} cannot be read: {exc.strerror or exc}") from exc
    if mode & 0o077:
        raise ConfigError(f"secret key file {path!r} may be read by others (mode {stat.S_IMODE(mode):o}): refused; "
                          f"make it its owner's only (chmod 600 {path}) or make a new key (roq keys new)")
    public, secret = _load(path)
    if secret is None:
        raise ConfigError(f"{path!r} holds no secret key (a public key file? the secret one ends in "
                          f"{SECRET_SUFFIX})")
    public_path = path[: -len(SECRET_SUFFIX)] + PUBLIC_SUFFIX if path.endswith(SECRET_SUFFIX) else ""
    return KeyPair(public, secret, public_path, path)


def _iso(when: float) -> str:
    return datetime.datetime.fromtimestamp(when, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


_EXPIRES = re.compile(r'^\s*expires\s*=\s*"([^"]*)"\s*$', re.MULTILINE)


def expiry(path: str) -> float | None:
    """When the key in ``path`` expires (seconds since the epoch; its metadata's ``expires``, ISO 8601 in
    UTC), or None if it does not.

    Raises:
        ConfigError: the file cannot be read, or its ``expires`` is not a time.
        OSError: the file cannot be read.
    """
    with open(path, encoding="utf-8", errors="replace") as f:
        found = _EXPIRES.search(f.read(64 << 10))
    if found is None:
        return None
    try:
        when = datetime.datetime.strptime(found.group(1), "%Y-%m-%dT%H:%M:%SZ")
    except ValueError as exc:
        raise ConfigError(f"{path}: expires = {found.group(1)[:40]!r} is not a time like 2026-12-31T00:00:00Z") from exc
    return when.replace(tzinfo=datetime.timezone.utc).timestamp()


def load_public(path: str) -> bytes:
    """The public key in ``path`` (a public or a secret key file).

    Raises:
        ConfigError: the file is missing, unreadable or holds no key.
    """
    return _load(path)[0]


def _load(path: str) -> tuple[bytes, bytes | None]:
    try:
        public, secret = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"key file {path!r} cannot be read as a CURVE certificate: {exc}") from exc
    if not public or len(public) != 40:
        raise ConfigError(f"key file {path!r} holds no CURVE public key")
    return public, secret if secret else None


def load_credentials(path: str) -> tuple[bytes, KeyPair]:
    """A client's credentials: the cluster's public key and the client's own pair, from ``path``, a directory
    holding :data:`CLUSTER_KEY` and one ``NAME.key_secret`` (or that secret key file itself, beside
    :data:`CLUSTER_KEY`).

    Raises:
        ConfigError: no such directory or file, no cluster key, none or several secret keys, or a secret key
            others may read.
    """
    if not os.path.exists(path):
        raise ConfigError(f"credentials {path!r} cannot be read: no such file or directory")
    directory, secret = (path, "") if os.path.isdir(path) else (os.path.dirname(path) or ".", path)
    if not secret:
        try:
            found = sorted(n for n in os.listdir(directory) if n.endswith(SECRET_SUFFIX))
        except OSError as exc:
            raise ConfigError(f"credentials {path!r} cannot be read: {exc.strerror or exc}") from exc
        if len(found) != 1:
            raise ConfigError(f"credentials {path!r} must hold exactly one secret key (NAME{SECRET_SUFFIX}), found "
                              f"{len(found)}: {', '.join(found[:5]) or 'none'}")
        secret = os.path.join(directory, found[0])
    cluster = os.path.join(directory, CLUSTER_KEY)
    if not os.path.exists(cluster):
        raise ConfigError(f"credentials {path!r}: no {CLUSTER_KEY} (the cluster's public key) in {directory}")
    return load_public(cluster), load_secret(secret)


class ClusterKeys:
    """The keys of one cluster in one directory (made with mode 0700), each made when first asked for:

    * ``cluster.key`` and ``cluster.key_secret``: the cluster's pair, which its processes serve and talk to
      each other with (``--secret-key``);
    * ``keyring/``: the public key of every client that may connect, ``NAME.key`` for the principal NAME
      (``--keyring``; a key removed there stops opening connections);
    * ``clients/NAME/``: a client's credentials (its pair and ``cluster.key``), what
      ``client.connect(credentials=...)`` and ``roq --credentials`` take, and its bearer token for the HTTP API
      (``NAME.token``), which ``tokens/`` holds too (``--api-tokens``);
    * ``zookeeper.secret``: the cluster's identity in ZooKeeper (:class:`roq.zk.ZkAuth`, ``--zk-auth``).

    Raises:
        ConfigError: the directory cannot be made or written.
    """

    def __init__(self, directory: str) -> None:
        self.directory = os.path.abspath(directory)
        self.secret_key = os.path.join(self.directory, "cluster" + SECRET_SUFFIX)
        self.public_key = os.path.join(self.directory, CLUSTER_KEY)
        self.keyring = os.path.join(self.directory, "keyring")
        self.zk_auth = os.path.join(self.directory, "zookeeper.secret")
        self.tokens = os.path.join(self.directory, "tokens")

    def ensure(self) -> list[str]:
        """Make the cluster's pair and its keyring if missing; the paths made (none when all were there).

        Raises:
            ConfigError: they cannot be made, or the secret key found is unsafe.
        """
        made = []
        if not os.path.exists(self.secret_key):
            made += [new_keypair(self.directory, "cluster", overwrite=True).secret_path]
        load_secret(self.secret_key)  # an unsafe one is refused here, before any process starts with it
        for directory in (self.keyring, self.tokens):
            if not os.path.isdir(directory):
                try:
                    os.makedirs(directory, mode=0o700, exist_ok=True)
                except OSError as exc:
                    raise ConfigError(f"cannot make {directory}: {exc.strerror or exc}") from exc
                made.append(directory)
        if not os.path.exists(self.zk_auth):
            ZkAuth.new(self.zk_auth)
            made.append(self.zk_auth)
        ZkAuth.load(self.zk_auth)  # unsafe or malformed: refused here too
        return made

    def credentials(self, name: str) -> str:
        """The credentials directory of the client ``name``."""
        return os.path.join(self.directory, "clients", name)

    def client(self, name: str, expires: float | None = None) -> str:
        """The credentials directory of the client ``name``, its key made and admitted (its public key in the
        keyring) if it has none yet; ``expires`` (seconds since the epoch): a new key stops working then.

        Raises:
            ConfigError: a bad name, or the keys cannot be written.
        """
        path = self.credentials(name)
        if not os.path.exists(os.path.join(path, name + SECRET_SUFFIX)):
            pair = new_keypair(path, name, overwrite=True, expires=expires)
            try:
                shutil.copyfile(self.public_key, os.path.join(path, CLUSTER_KEY))
                shutil.copyfile(pair.public_path, os.path.join(self.keyring, name + PUBLIC_SUFFIX))
                token = secrets.token_urlsafe(32) + "\n"
                for where in (os.path.join(path, name + TOKEN_SUFFIX), os.path.join(self.tokens, name + TOKEN_SUFFIX)):
                    fd = os.open(where, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                    with os.fdopen(fd, "w", encoding="utf-8") as f:
                        f.write(token)
            except OSError as exc:
                raise ConfigError(f"cannot write {name}'s credentials: {exc.strerror or exc}") from exc
        return path

    def revoke(self, name: str) -> bool:
        """Take the client ``name``'s key out of the keyring and its token out of ``tokens/`` (its credentials
        stay); False if its key was not there."""
        try:
            os.remove(os.path.join(self.tokens, name + TOKEN_SUFFIX))
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise ConfigError(f"cannot remove {name}'s token from {self.tokens}: {exc.strerror or exc}") from exc
        try:
            os.remove(os.path.join(self.keyring, name + PUBLIC_SUFFIX))
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise ConfigError(f"cannot remove {name}'s key from {self.keyring}: {exc.strerror or exc}") from exc
        return True
