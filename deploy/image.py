"""Build the RoQ image: ``python -m deploy.image [--tag roq:latest] [--base IMAGE] [--offline]``.

The build context is a fresh directory holding ``deploy/Dockerfile`` and ``wheelhouse/``: the project's
wheel, built here, and with ``--offline`` the wheels of every dependency too (made with ``pip wheel``
from this machine's index or cache), so that the image installs without reaching any index: for Docker
hosts without a network, or a base image made offline (``debootstrap`` + ``docker import``).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Callable

from roq.errors import ConfigError, RoQError

__all__ = ["wheelhouse", "build_image", "main", "REPO"]

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCKERFILE = os.path.join(REPO, "deploy", "Dockerfile")


def wheelhouse(directory: str, *, dependencies: bool, extras: str = "",
               progress: Callable[[str], None] = print) -> list[str]:
    """Put the project's wheel (and with ``dependencies`` its dependencies' wheels, those of ``extras`` too) in
    ``directory``.

    Raises:
        RoQError: pip failed (its output's tail is in the message).
    """
    os.makedirs(directory, exist_ok=True)
    command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", directory]
    if not dependencies:
        command.append("--no-deps")
    progress(f"building wheels{' with every dependency' if dependencies else ''} into {directory}")
    done = subprocess.run([*command, f"{REPO}[{extras}]" if extras and dependencies else REPO], capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise RoQError(f"pip wheel failed: {(done.stderr or done.stdout)[-1500:]}")
    return sorted(os.listdir(directory))


def build_image(client: Any, tag: str, *, base: str | None = None, offline: bool = False, extras: str = "",
                progress: Callable[[str], None] = print) -> str:
    """Build the image ``tag`` with the Docker client ``client``; return its id. ``extras``: the project's optional
    dependencies to install too (``kpi``: PySpark, for the Spark roles; the base needs a Java runtime when offline).

    Raises:
        RoQError: the wheels or the build failed (the build log's tail is in the message).
    """
    import docker.errors

    context = tempfile.mkdtemp(prefix="roq-image-")
    try:
        shutil.copy(DOCKERFILE, os.path.join(context, "Dockerfile"))
        if extras and not re.fullmatch(r"[a-z]+(,[a-z]+)*", extras):
            raise ConfigError(f"extras {extras!r}: names of the project's optional dependencies, e.g. kpi or kpi,deploy")
        wheelhouse(os.path.join(context, "wheelhouse"), dependencies=offline, extras=extras, progress=progress)
        args = {"OFFLINE": "1" if offline else "0", "EXTRAS": extras, **({"BASE_IMAGE": base} if base else {})}
        progress(f"docker build {tag} (base {base or 'the Dockerfile default'}{', offline' if offline else ''}"
                 f"{', extras ' + extras if extras else ''})")
        try:
            image, logs = client.images.build(path=context, tag=tag, buildargs=args, rm=True, forcerm=True,
                                              pull=False)
        except docker.errors.BuildError as exc:
            tail = "".join(str(line.get("stream") or line.get("error") or "") for line in exc.build_log)[-1500:]
            raise RoQError(f"docker build of {tag} failed: {exc.msg}\n{tail}") from None
        except docker.errors.APIError as exc:
            raise RoQError(f"docker build of {tag} failed: {exc.explanation or exc}") from None
        return str(image.id)
    finally:
        shutil.rmtree(context, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m deploy.image", description=__doc__.split("\n\n")[0])
    p.add_argument("--tag", default="roq:latest", help="the image's tag (default roq:latest)")
    p.add_argument("--base", help="BASE_IMAGE build argument (default: the Dockerfile's, an official slim Python)")
    p.add_argument("--offline", action="store_true", help="install from the wheelhouse only (no index in the build)")
    p.add_argument("--extras", default="", help="optional dependencies to install too: kpi (PySpark, for the Spark "
                                                "master and workers of roq deploy; adds a Java runtime if the base "
                                                "has none)")
    p.add_argument("--docker", default=None, help="Docker daemon URL (default $DOCKER_HOST or the local socket)")
    args = p.parse_args(argv)
    try:
        import docker
    except ImportError:
        print("deploy.image: the Docker SDK is missing: pip install 'roq-py[deploy]'", file=sys.stderr)
        return 3
    try:
        client = docker.DockerClient(base_url=args.docker, version="auto") if args.docker else docker.from_env()
        image = build_image(client, args.tag, base=args.base, offline=args.offline, extras=args.extras)
    except (RoQError, ConfigError) as exc:
        print(f"deploy.image: {exc}", file=sys.stderr)
        return 1
    except docker.errors.DockerException as exc:
        print(f"deploy.image: cannot reach Docker: {exc}", file=sys.stderr)
        return 1
    print(f"built {args.tag} ({image[:19]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
