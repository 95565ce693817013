"""Fixtures shared by every test folder: real broker processes on loopback, test certificates.

A test that starts a process (a broker, a `streamlet` command, openssl, node, Spark, ...) is
marked ``process``: ``make test-fast`` runs ``-m "not process and not slow"``. The mark is
enforced, not kept by hand: while an unmarked test runs (its fixtures' setup and teardown
included), starting a process (subprocess, asyncio's subprocesses, os.fork, os.posix_spawn,
os.system, multiprocessing) raises ``UnmarkedProcess`` and the test fails with "this test
starts a process: mark it process", also when the test swallowed that error. Under
pytest-xdist (``make test``: ``-n N --dist loadfile``) a module runs whole on one worker,
tests/spark/ counting as one, the longest handed out first.
"""

from __future__ import annotations

import multiprocessing.util
import os
import subprocess
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.brokers import BrokerProcess, PortTaken
from tests.support.certs import make_certs


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    """Start as many brokers as a test needs; each is stopped at the end."""
    started: list[BrokerProcess] = []

    def make(**kwargs: object) -> BrokerProcess:
        data = tmp_path / f"broker{len(started)}" / "data"
        data.parent.mkdir(parents=True, exist_ok=True)
        attempts = 3
        while True:
            b = BrokerProcess(data, **kwargs)  # type: ignore[arg-type]
            started.append(b)
            try:
                return b.start()
            except PortTaken:  # a port chosen free was taken before the broker bound it
                attempts -= 1
                if "port" in kwargs or not attempts:
                    raise

    yield make
    for b in started:
        b.stop()


@pytest.fixture
def broker(broker_factory: Callable[..., BrokerProcess]) -> BrokerProcess:
    """One broker for this test, with the default guest/guest user."""
    return broker_factory()


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for a whole test module (tests must use distinct stream names); no metrics
    or management API: it would hold their default ports for the whole module."""
    root = tmp_path_factory.mktemp("shared-broker")
    b = BrokerProcess(root / "data", extra_args=["--metrics-port", "0", "--http-port", "0"]).start()
    yield b
    b.stop()


@pytest.fixture
def certs(tmp_path: Path) -> Path:
    """tests/support/certs.py's set in ``tmp_path/certs``: ca, server (CN localhost, for
    127.0.0.1) and client (CN app, a user of the TLS tests); skips without openssl."""
    return make_certs(tmp_path / "certs", clients={"client": "app"})


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``-n N --dist loadfile`` (make test): a test module runs on one worker, so a
    module-scoped fixture (a broker, a rendered chart) starts once, and tests/spark/ counts as
    one module: SparkSessions side by side on 2 cores made Spark's Python workers miss their
    connect timeout. (xdist_group marks cannot do it: xdist 3.8 renames the node id for a
    group, which pytest 9 no longer lets it.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByModule(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return "tests/spark/" if module.startswith("tests/spark/") else module

    return ByModule(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In an xdist worker, the order its collection reports is the order modules are handed
    out (with --no-loadscope-reorder): the longest first."""
    if hasattr(config, "workerinput"):
        items[:] = _longest_first(items)


# the folders of the longest units (Spark's one session, the docs pages, clusters, operators)
_LONGEST = ("tests/spark/", "tests/docs/", "tests/cluster/", "tests/operator/")
# before them: an image build (minutes, most of it waiting on the network and on gcc)
_FIRST = ("tests/images/",)


def _longest_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """Modules that start processes or hold a slow test (a fuzz loop) first, the longest
    folders before them, quick in-memory tests last: they fill the workers' gaps at the end
    instead of a Spark module or a fuzz loop running alone. A module's tests stay together
    and in order."""
    starts = {i.nodeid.split("::")[0] for i in items
              if i.get_closest_marker("process") or i.get_closest_marker("slow")}

    def weight(item: pytest.Item) -> int:
        module = item.nodeid.split("::")[0]
        if module.startswith(_FIRST):
            return -1
        return 0 if module.startswith(_LONGEST) else 1 if module in starts else 2
    return sorted(items, key=weight)


class UnmarkedProcess(RuntimeError):
    """A test without the ``process`` mark tried to start a process."""


_NOT_MARKED = pytest.StashKey[list[str]]()

# (owner, attribute) of every way a test starts a process; subprocess.Popen covers
# subprocess.run/check_output and asyncio.create_subprocess_exec/shell.
_SPAWNERS: list[tuple[Any, str, str]] = [
    (subprocess.Popen, "_execute_child", "subprocess.Popen"), (os, "fork", "os.fork"),
    (os, "forkpty", "os.forkpty"), (os, "posix_spawn", "os.posix_spawn"),
    (os, "posix_spawnp", "os.posix_spawnp"), (os, "system", "os.system"),
    (multiprocessing.util, "spawnv_passfds", "multiprocessing"),
]


def _refusing(item: pytest.Item, how: str) -> Callable[..., Any]:
    def refuse(*args: object, **kwargs: object) -> Any:
        message = (f"this test starts a process: mark it process "
                   f"(pytestmark = pytest.mark.process); it called {how}")
        item.stash.setdefault(_NOT_MARKED, []).append(message)
        raise UnmarkedProcess(message)
    return refuse


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[
        None, object, object]:
    """Refuse to start processes while an item without the ``process`` mark runs."""
    if item.get_closest_marker("process") is not None:
        return (yield)
    mp = pytest.MonkeyPatch()
    for owner, name, label in _SPAWNERS:
        if hasattr(owner, name):
            mp.setattr(owner, name, _refusing(item, label))
    try:
        return (yield)
    finally:
        mp.undo()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[
        None, pytest.TestReport, pytest.TestReport]:
    """Fail the phase in which an unmarked test tried to start a process, even if it caught
    the error (a skip or a pass would hide it)."""
    report = yield
    refused = item.stash.get(_NOT_MARKED, [])
    if refused:
        report.outcome = "failed"
        report.longrepr = "\n".join(dict.fromkeys(refused))
        item.stash[_NOT_MARKED] = []
    return report
