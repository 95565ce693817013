"""The examples of README.md and docs/, run as a reader would run them.

Each fenced block of shell, Python, TOML, JSON or YAML carries a marker on the line before its
fence, an HTML comment readers do not see: ``<!-- example: KIND [note] -->``, KIND one of
``run``, ``output``, ``serve PORT...``, ``file NAME``, ``setup``, ``k8s REASON``, ``bench
REASON``, ``fragment``, ``api``, ``config``. Each page runs in a folder of its own, in a network
namespace of its own where namespaces are allowed (loopback only), with the environment of a
reader who has not activated the virtual environment. The kinds: docs/development.md#docs-examples.
"""

from __future__ import annotations

import ast
import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from streamlet.broker.config.model import ConfigError
from streamlet.broker.protocols import load

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINKED = (".venv", "spark-on-k8s", "examples", "crds")
MARKER = re.compile(r"^\s*<!--\s*example:\s*([a-z0-9-]+)\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)```\s*([A-Za-z0-9_+-]*)\s*$")
CHECKED_LANGS = {"sh", "bash", "shell", "console", "python", "py", "toml", "json", "yaml", "yml"}
KINDS = {"run", "output", "serve", "file", "setup", "k8s", "bench", "fragment", "api", "config"}
NEEDS_REASON = {"k8s", "bench", "setup"}
RUN_TIMEOUT = 420  # seconds for one block: the Spark examples start a JVM on 2 busy cores
SERVE_TIMEOUT = 90


@dataclass
class Block:
    page: Path
    line: int  # the fence's line, 1-based
    lang: str
    text: str
    kind: str | None
    note: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def parse(page: Path) -> list[Block]:
    lines = page.read_text().splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang = len(m.group(1)), m.group(2).lower()
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
            body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
            i += 1
        i += 1
        mark = MARKER.match(lines[start - 1]) if start > 0 else None
        blocks.append(Block(page, start + 1, lang, "\n".join(body) + "\n",
                            mark.group(1) if mark else None, mark.group(2) if mark else ""))
    return blocks


ALL = [b for page in PAGES for b in parse(page)]


# --- every example is marked, and what is not run is at least checked ----------------------

def test_every_example_says_what_it_is() -> None:
    unmarked = [b.where for b in ALL if b.lang in CHECKED_LANGS and b.kind is None]
    assert not unmarked, f"blocks without an <!-- example: KIND --> marker: {unmarked}"
    unknown = [(b.where, b.kind) for b in ALL if b.kind and b.kind not in KINDS]
    assert not unknown
    unexplained = [b.where for b in ALL if b.kind in NEEDS_REASON and len(b.note) < 10]
    assert not unexplained, f"say why these are not run: {unexplained}"
    orphans = [b.where for prev, b in zip(ALL, ALL[1:], strict=False)
               if b.kind == "output" and (prev.kind != "run" or prev.page != b.page)]
    assert not orphans, f"an output block must follow a run block: {orphans}"
    assert sum(b.kind == "run" for b in ALL) >= 8


def _check_syntax(b: Block) -> None:
    if b.lang in ("sh", "bash", "shell"):
        done = subprocess.run(["bash", "-n"], input=b.text, capture_output=True, text=True)
        assert done.returncode == 0, f"{b.where}: {done.stderr}"
    elif b.lang in ("python", "py"):
        compile(b.text, b.where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    elif b.lang == "toml":
        tomllib.loads(b.text)
        # a whole broker configuration: the broker's own loader takes it (keys, values, users)
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "streamlet.toml"
            path.write_text(b.text)
            try:
                load(path)
            except ConfigError as e:
                raise AssertionError(f"{b.where}: streamlet serve would refuse it: {e}") from e
    elif b.lang == "json":
        json.loads(b.text)
    elif b.lang in ("yaml", "yml"):
        assert list(yaml.safe_load_all(b.text))


CHECKED = [b for b in ALL if b.kind in ("k8s", "bench", "fragment", "config", "file")]


@pytest.mark.process
@pytest.mark.parametrize("block", CHECKED, ids=[b.where for b in CHECKED])
def test_examples_not_run_here_are_well_formed(block: Block) -> None:
    _check_syntax(block)


# --- running a page's examples ------------------------------------------------------------

class ExampleFailed(AssertionError):
    pass


def port_open(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
        return True
    return False


def wait_for_port(port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ExampleFailed(f"exited {proc.returncode} before port {port} listened:\n"
                                f"{log.read_text()[-3000:]}")
        if port_open(port):
            return
        time.sleep(0.2)
    raise ExampleFailed(f"port {port} not listening after {timeout} s:\n"
                        f"{log.read_text()[-3000:]}")


def reader_env() -> dict[str, str]:
    """A reader's shell: the virtual environment not activated."""
    venv_bin = (ROOT / ".venv" / "bin").resolve()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYSPARK_", "STREAMLET_", "PYTEST_"))
           and k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p and Path(p).resolve() != venv_bin)
    return env


@dataclass
class Page:
    path: Path
    folder: Path
    env: dict[str, str]
    servers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self, cmd: list[str], name: str, ports: list[int]) -> None:
        busy = [p for p in ports if port_open(p)]
        if busy:
            raise ExampleFailed(f"{name}: port(s) {busy} already taken")
        log = self.folder / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(cmd, cwd=self.folder, env=self.env, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        self.servers.append(proc)
        for port in ports:
            wait_for_port(port, proc, log, SERVE_TIMEOUT)

    def stop(self) -> None:
        for proc in reversed(self.servers):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(10)

    def make_up(self) -> None:
        """The broker "a broker running (make up in another terminal)" means: ``make up``,
        with a data directory of the page's own."""
        cmd = ["make", "-s", "-C", str(ROOT), "-o", ".venv/.installed-core", "up",
               f"DATA={self.folder / 'data'}"]
        self.start(cmd, "make-up", [5552, 5553, 5554, 5555])

    def run(self, b: Block) -> str:
        if b.lang in ("python", "py"):
            script = self.folder / f"example_{b.line}.py"
            script.write_text(b.text)
            cmd = [".venv/bin/python", script.name]
        else:
            cmd = ["bash", "-e", "-o", "pipefail", "-c", b.text]
        try:
            done = subprocess.run(cmd, cwd=self.folder, env=self.env, capture_output=True,
                                  text=True, timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired as e:
            raise ExampleFailed(f"{b.where}: still running after {RUN_TIMEOUT} s:\n{b.text}\n"
                                f"{e.stderr!r}") from None
        if done.returncode != 0:
            raise ExampleFailed(
                f"{b.where} exited {done.returncode}:\n{b.text}\n--- stdout:\n"
                f"{done.stdout[-3000:]}\n--- stderr:\n{done.stderr[-6000:]}")
        print(f"ok {b.where}", flush=True)
        return done.stdout


def run_page(path: Path, folder: Path) -> None:
    """Every ``run``, ``serve``, ``file`` and ``output`` block of ``path``, in order."""
    blocks = parse(path)
    page = Page(path, folder, reader_env())
    for name in LINKED:
        (folder / name).symlink_to(ROOT / name)
    try:
        if not any(b.kind == "serve" for b in blocks):
            page.make_up()
        last: tuple[Block, str] | None = None
        for b in blocks:
            if b.kind == "file":
                _check_syntax(b)
                (folder / b.note).write_text(b.text)
            elif b.kind == "serve":
                ports = [int(t) for t in b.note.split()]
                if not ports:
                    raise ExampleFailed(f"{b.where}: serve needs the ports to wait for")
                page.start(["bash", "-c", "exec " + b.text.strip()], f"serve-{b.line}", ports)
            elif b.kind == "run":
                last = (b, page.run(b))
            elif b.kind == "output":
                assert last is not None
                got = [x.rstrip() for x in last[1].strip("\n").splitlines()]
                want = [x.rstrip() for x in b.text.strip("\n").splitlines()]
                if got != want:
                    raise ExampleFailed(f"{last[0].where} printed {got}; {b.where} shows {want}")
    finally:
        page.stop()


def loopback_up() -> None:
    """Bring up ``lo`` in a new network namespace (it starts down)."""
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifreq = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(s, siocgifflags, ifreq))[1]
        fcntl.ioctl(s, siocsifflags, struct.pack("16sH22x", b"lo", flags | iff_up))


def netns_prefix() -> list[str]:
    """``unshare`` into a network namespace of its own, if this machine allows it."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return []
    cmd = [unshare, "--net", "--map-root-user"]
    ok = subprocess.run([*cmd, "true"], capture_output=True, timeout=30).returncode == 0
    return cmd if ok else []


RUN_PAGES = [p for p in PAGES if any(b.kind in ("run", "serve") for b in parse(p))]


@pytest.mark.process
@pytest.mark.timeout(1500)
@pytest.mark.parametrize("path", RUN_PAGES, ids=[str(p.relative_to(ROOT)) for p in RUN_PAGES])
def test_the_examples_of_a_page_run(path: Path, tmp_path: Path) -> None:
    ns = netns_prefix()
    cmd = [*ns, sys.executable, "-m", "tests.docs.test_examples", str(path), str(tmp_path),
           "--netns" if ns else "--host"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1400)
    assert done.returncode == 0, f"{done.stdout[-2000:]}\n{done.stderr[-12000:]}"
    ran = [b.where for b in parse(path) if b.kind == "run"]
    assert done.stdout.split() == [w for where in ran for w in ("ok", where)]


def test_the_reader_environment_is_a_fresh_shell() -> None:
    env = reader_env()
    assert "PYSPARK_PYTHON" not in env
    assert str(ROOT / ".venv" / "bin") not in env["PATH"].split(os.pathsep)


if __name__ == "__main__":
    page_path, folder_path, where = sys.argv[1:4]
    if where == "--netns":
        loopback_up()
    try:
        run_page(Path(page_path).resolve(), Path(folder_path).resolve())
    except ExampleFailed as failure:
        print(failure, file=sys.stderr)
        sys.exit(1)
