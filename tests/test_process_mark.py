"""The ``process`` mark is enforced: a test without it cannot start a process.

tests/conftest.py swaps every way to start one (subprocess, asyncio's subprocesses, os.fork,
os.system, multiprocessing) for a refusal while an unmarked test runs, and fails the test even
when it swallowed the refusal. This test is itself unmarked: each start is refused with the
message naming the mark, and is recorded; it clears the record, since refusals are its point.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import subprocess
from collections.abc import Callable

import pytest

from tests.conftest import _NOT_MARKED, UnmarkedProcess


def _asyncio_exec() -> None:
    asyncio.run(asyncio.create_subprocess_exec("true"))


def _asyncio_shell() -> None:
    asyncio.run(asyncio.create_subprocess_shell("true"))


STARTS: list[tuple[str, Callable[[], object]]] = [
    ("subprocess.Popen", lambda: subprocess.run(["true"], check=False)),
    ("subprocess.Popen", lambda: subprocess.check_output(["true"])),
    ("subprocess.Popen", _asyncio_exec),
    ("subprocess.Popen", _asyncio_shell),
    ("os.system", lambda: os.system("true")),
    ("os.fork", lambda: os.fork()),  # looked up when called: the swapped one
    ("os.posix_spawn", lambda: os.posix_spawn("/bin/true", ["true"], {})),
    ("multiprocessing", lambda: multiprocessing.get_context("spawn").Process(target=print).start()),
    ("os.fork", lambda: multiprocessing.get_context("fork").Process(target=print).start()),
]


@pytest.mark.parametrize("called, start", STARTS)
def test_an_unmarked_test_cannot_start_a_process(request: pytest.FixtureRequest, called: str,
                                                 start: Callable[[], object]) -> None:
    with pytest.raises(UnmarkedProcess, match="this test starts a process: mark it process"):
        start()
    refused = request.node.stash.get(_NOT_MARKED, [])
    assert len(refused) == 1 and refused[0].endswith(f"it called {called}"), refused
    request.node.stash[_NOT_MARKED] = []  # refused as it should be: this test passes
