"""The project's images built and run with podman where Docker Hub and a Docker daemon are not.

``unavailable()`` says why this machine cannot (None: it can: root, podman, runc, debootstrap).
``Podman`` runs podman with a containers.conf of ours (runc, ulimits under the hard limits).
``python_base`` makes the base the Dockerfiles name (a Debian made by debootstrap, Debian's
python3 on it, tagged as that base) unless podman has it; ``build`` builds a Dockerfile of the
repository; ``Container`` runs an image with a loopback port and is removed on exit. What is
made once (the bases, in podman's store) is reused by the next run; ``cache_dir()`` holds the
conf and a lock. How and what it measured: docs/development.md#the-images.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

ROOT = Path(__file__).resolve().parents[2]
DEBIAN = "localhost/debian:bookworm"
MIRROR = "http://deb.debian.org/debian"
STAND_IN = "dev.streamlet.stand-in"  # the label on a base we made, naming what it stands for
TOOLS = ("podman", "runc", "debootstrap")
CONF = """\
[containers]
# podman's default ulimits are above this machine's hard limits; even root cannot raise them
default_ulimits = ["nofile=4096:4096", "nproc=4096:4096"]

[engine]
# crun 1.8 refuses a hybrid cgroup layout; runc runs on it
runtime = "runc"
"""
# Debian's Python in place of python:X-slim: python and pip on PATH (pip may install outside a
# venv, as there), venv, no compiler; the label names the base and this recipe's digest
STAND_IN_FILE = """\
FROM {debian}
RUN apt-get update \\
    && apt-get install -y --no-install-recommends python3 python3-venv python3-pip \\
       python-is-python3 ca-certificates \\
    && rm -rf /var/lib/apt/lists/* /usr/lib/python3.*/EXTERNALLY-MANAGED \\
    && ln -s /usr/bin/pip3 /usr/local/bin/pip
COPY ca.pem /etc/ssl/certs/host-ca.pem
ENV PIP_CERT=/etc/ssl/certs/host-ca.pem
LABEL {label}="{base} {recipe}"
"""
RECIPE = hashlib.sha256(STAND_IN_FILE.encode()).hexdigest()[:12]


def cache_dir() -> Path:
    """$STREAMLET_IMAGES_CACHE, else $XDG_CACHE_HOME/streamlet-images, else
    ~/.cache/streamlet-images (made)."""
    named = os.environ.get("STREAMLET_IMAGES_CACHE")
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    path = Path(named) if named else Path(xdg) / "streamlet-images"
    path.mkdir(parents=True, exist_ok=True)
    return path


def unavailable(euid: int | None = None,
                which: Callable[[str], str | None] = shutil.which) -> str | None:
    """Why podman images cannot be made here, or None. debootstrap and podman's bridge
    networking need root; .ci/install-system-deps installs the tools."""
    euid = os.geteuid() if euid is None else euid
    missing = [tool for tool in TOOLS if which(tool) is None]
    if euid != 0:
        return ("needs root (debootstrap makes the base; podman's bridge networking)"
                + (f" and {', '.join(missing)} (.ci/install-system-deps)" if missing else ""))
    if missing:
        return f"needs {', '.join(missing)}: run .ci/install-system-deps (installs them as root)"
    return None


def base_of(dockerfile: Path) -> str:
    """The image the Dockerfile's first FROM names (its build stage's base)."""
    for line in dockerfile.read_text().splitlines():
        if line.startswith("FROM "):
            return line.split()[1]
    raise ValueError(f"{dockerfile}: no FROM")


def qualified(image: str) -> str:
    """A short Docker Hub name as podman stores it: python:3 -> docker.io/library/python:3."""
    first = image.split("/", 1)[0]
    if "/" in image and ("." in first or ":" in first or first == "localhost"):
        return image
    return f"docker.io/{image}" if "/" in image else f"docker.io/library/{image}"


class Podman:
    """podman with our containers.conf; every command fails loudly with its output."""

    def __init__(self, cache: Path) -> None:
        conf = cache / "containers.conf"
        if not conf.exists() or conf.read_text() != CONF:
            conf.write_text(CONF)
        self.env = {**os.environ, "CONTAINERS_CONF": str(conf)}
        self.cache = cache

    def run(self, *args: str, timeout: float = 600, check: bool = True,
            stdin: int | None = None) -> subprocess.CompletedProcess[str]:
        # A build (compilers, pip) at the lowest CPU priority: the suite's other workers run
        # timed scenarios on the same two cores meanwhile. Containers run at the usual one.
        nice = ["nice", "-n", "19"] if args[0] == "build" else []
        result = subprocess.run([*nice, "podman", *args], env=self.env, capture_output=True,
                                text=True, timeout=timeout, stdin=stdin, cwd=ROOT)
        if check and result.returncode != 0:
            raise AssertionError(f"podman {' '.join(args)} failed ({result.returncode}):\n"
                                 f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
        return result

    def exists(self, image: str) -> bool:
        return self.run("image", "exists", image, check=False).returncode == 0

    def remove_image(self, image: str) -> None:
        self.run("rmi", "--force", image, check=False)

    @contextmanager
    def lock(self) -> Iterator[None]:
        """One maker of the bases at a time (two test runs side by side wait for each other)."""
        with open(self.cache / "lock", "w") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            yield


def debian(podman: Podman) -> str:
    """A minimal Debian bookworm image (debootstrap, about 90 s once), DEBIAN."""
    if podman.exists(DEBIAN):
        return DEBIAN
    with tempfile.TemporaryDirectory(dir=podman.cache) as tmp:
        rootfs = Path(tmp) / "rootfs"
        made = subprocess.run(["nice", "-n", "19", "debootstrap", "--variant=minbase", "bookworm",
                               str(rootfs), MIRROR], capture_output=True, text=True, timeout=1200)
        if made.returncode != 0:
            raise AssertionError(f"debootstrap failed:\n{made.stdout[-3000:]}\n{made.stderr}")
        tar = subprocess.Popen(["tar", "--numeric-owner", "-C", str(rootfs), "-c", "."],
                               stdout=subprocess.PIPE)
        assert tar.stdout is not None
        podman.run("import", "-", DEBIAN, stdin=tar.stdout.fileno())
        tar.stdout.close()
        assert tar.wait() == 0, "tar of the debootstrap root failed"
    return DEBIAN


def host_ca() -> bytes:
    """The host's CA bundle (where HTTPS leaves through a local CA, pip in a build needs it)."""
    for name in ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"):
        path = os.environ.get(name)
        if path and Path(path).is_file():
            return Path(path).read_bytes()
    bundle = Path("/etc/ssl/certs/ca-certificates.crt")
    return bundle.read_bytes() if bundle.is_file() else b""


def stale(label: str, base: str) -> bool:
    """Whether an image of ``base`` with this STAND_IN label is a stand-in of another recipe
    (made again); an image without the label is not ours and is kept."""
    made = label.split()
    return len(made) == 2 and made[0] == base and made[1] != RECIPE


def python_base(podman: Podman, dockerfile: Path) -> str:
    """The base ``dockerfile`` builds from: podman's own when it has it (pulled or made before),
    else a stand-in made on DEBIAN and tagged as it."""
    base = qualified(base_of(dockerfile))
    with podman.lock():
        if podman.exists(base):
            label = podman.run("image", "inspect", "--format",
                               f'{{{{index .Labels "{STAND_IN}"}}}}', base).stdout
            if not stale(label, base):
                return base
            podman.remove_image(base)
        source = debian(podman)
        with tempfile.TemporaryDirectory(dir=podman.cache) as tmp:
            (Path(tmp) / "ca.pem").write_bytes(host_ca())
            (Path(tmp) / "Containerfile").write_text(
                STAND_IN_FILE.format(debian=source, label=STAND_IN, base=base, recipe=RECIPE))
            podman.run("build", "--pull=never", "--network", "host", "--layers=false",
                       "-t", base, tmp, timeout=900)
    return base


def build(podman: Podman, dockerfile: str, tag: str) -> None:
    """Build ``dockerfile`` (relative to the repository root) from the root, as the docs say;
    nothing pulled (the bases are local), no intermediate image kept (removing ``tag`` removes
    all the build made, where a layer cache would grow by each run's changed sources)."""
    podman.run("build", "--pull=never", "--network", "host", "--layers=false",
               "-f", dockerfile, "-t", tag, ".", timeout=1500)


class Container:
    """``podman run -d`` of an image, each (container, host) port pair published on 127.0.0.1
    (bridge networking: podman turns on net.ipv4.ip_forward and adds its iptables chains);
    removed with its anonymous volumes on exit."""

    def __init__(self, podman: Podman, image: str, ports: dict[int, int],
                 options: tuple[str, ...] = (), args: tuple[str, ...] = ()) -> None:
        self.podman = podman
        self.name = f"streamlet-test-{uuid.uuid4().hex[:10]}"
        published = [f"--publish=127.0.0.1:{host}:{inside}" for inside, host in ports.items()]
        self.podman.run("run", "--detach", "--name", self.name, *published, *options, image,
                        *args)

    def exec(self, *command: str, timeout: float = 120) -> str:
        return self.podman.run("exec", self.name, *command, timeout=timeout).stdout

    def logs(self) -> str:
        result = self.podman.run("logs", self.name, check=False)
        return result.stdout + result.stderr

    def __enter__(self) -> Container:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.remove()

    def remove(self) -> None:
        self.podman.run("rm", "--force", "--volumes", "--time", "5", self.name, check=False)

    def exists(self) -> bool:
        return self.podman.run("container", "exists", self.name, check=False).returncode == 0


@contextmanager
def timed(times: dict[str, float], what: str) -> Iterator[None]:
    """``times[what]``: the seconds the block took."""
    start = time.monotonic()
    yield
    times[what] = round(time.monotonic() - start, 1)
