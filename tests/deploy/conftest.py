"""A Docker engine of the tests' own: dockerd with its data and exec roots in a temporary directory, on a
private unix socket, without a bridge or iptables (containers use host networking on loopback), stopped
at the end with everything it ran. The base image is made offline from Debian's packages (debootstrap,
docker import), and the RoQ image is built on it from a wheelhouse made here."""

from __future__ import annotations

import shutil
import subprocess
import time

import docker
import psutil
import pytest

from deploy.image import build_image

BASE = "roq-base:local"
IMAGE = "roq-test:local"
PACKAGES = "python3,python3-venv,zookeeper,default-jre-headless"


def _mirror() -> str:
    """The Debian mirror this machine's apt uses (debootstrap fetches from it)."""
    for path in ("/etc/apt/sources.list.d/debian.sources", "/etc/apt/sources.list"):
        try:
            for line in open(path):
                words = line.split()
                if words[:1] == ["URIs:"] or (words[:1] == ["deb"] and len(words) > 1):
                    url = words[1]
                    if "security" not in url:
                        return url
        except OSError:
            continue
    return "http://deb.debian.org/debian"


@pytest.fixture(scope="session")
def dockerd(tmp_path_factory):
    for tool in ("dockerd", "docker", "debootstrap"):
        assert shutil.which(tool), f"{tool} is missing: 'make test-deploy' installs docker.io and debootstrap"
    root = tmp_path_factory.mktemp("dockerd")
    sock = f"unix://{root}/docker.sock"
    log = open(root / "dockerd.log", "ab")
    proc = subprocess.Popen(
        ["dockerd", "--data-root", str(root / "data"), "--exec-root", str(root / "exec"),
         "--pidfile", str(root / "docker.pid"), "--host", sock, "--bridge=none", "--iptables=false",
         "--ip-masq=false"], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                client = docker.DockerClient(base_url=sock, version="auto", timeout=120)
                client.ping()
                break
            except docker.errors.DockerException:
                assert proc.poll() is None, f"dockerd exited: {(root / 'dockerd.log').read_text()[-2000:]}"
                assert time.monotonic() < deadline, "dockerd did not answer within 60 s"
                time.sleep(0.2)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    yield sock, client
    for container in client.containers.list(all=True):
        container.remove(force=True)
    client.close()
    proc.terminate()  # dockerd stops its containerd and shims
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()
    left = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        if str(root) in " ".join(p.info["cmdline"] or []):
            left.append(p.info)
    assert not left, f"processes of the test's dockerd left behind: {left}"
    mounts = [line.split()[1] for line in open("/proc/mounts") if line.split()[1].startswith(str(root))]
    for mount in sorted(mounts, key=len, reverse=True):  # dockerd leaves its network namespace mounted
        subprocess.run(["umount", mount], capture_output=True)
    shutil.rmtree(root, ignore_errors=True)
    assert not [line for line in open("/proc/mounts") if str(root) in line], "mounts of the test's dockerd left"


@pytest.fixture(scope="session")
def base_image(dockerd, tmp_path_factory):
    """``roq-base:local``: a minimal Debian with Python and ZooKeeper, from debootstrap; no registry."""
    sock, client = dockerd
    rootfs = tmp_path_factory.mktemp("rootfs")
    started = time.monotonic()
    done = subprocess.run(["debootstrap", "--variant=minbase", f"--include={PACKAGES}", "bookworm", str(rootfs),
                           _mirror()], capture_output=True, text=True)
    assert done.returncode == 0, f"debootstrap failed: {done.stdout[-1500:]}{done.stderr[-1500:]}"
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
    imported = subprocess.run(["docker", "-H", sock, "import", "-", BASE], stdin=tar.stdout, capture_output=True,
                              text=True)
    tar.stdout.close()
    assert tar.wait() == 0 and imported.returncode == 0, imported.stderr
    shutil.rmtree(rootfs, ignore_errors=True)
    print(f"base image made in {time.monotonic() - started:.0f} s")
    yield BASE
    client.images.remove(BASE, force=True)
    assert client.images.list(name=BASE) == []


@pytest.fixture(scope="session")
def roq_image(dockerd, base_image):
    """``roq-test:local``: deploy/Dockerfile on the base above, installed offline from a wheelhouse, with PySpark
    (the Spark roles; the base has Java)."""
    _, client = dockerd
    build_image(client, IMAGE, base=base_image, offline=True, extras="kpi", progress=print)
    yield IMAGE
    client.images.remove(IMAGE, force=True)
    assert client.images.list(name=IMAGE) == []
