"""The broker gives freed heap pages back (glibc's malloc_trim), where the C library has it."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from streamlet.broker.memory import return_free_memory


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_free_memory_is_returned_on_glibc() -> None:
    assert return_free_memory() is True


_FAULTS = """
import resource, sys
from streamlet.broker.memory import keep_large_blocks
if sys.argv[1] == "keep":
    assert keep_large_blocks()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(50):  # a chunk read and the pieces cut from it, then all freed
    blocks = [bytearray(4 << 20) for _ in range(3)]  # zero-filled: every page touched
    del blocks
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.process
@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_large_blocks_are_reused_instead_of_faulted_in_again() -> None:
    """Three blocks of 4 MiB at a time, 50 times: glibc trims the freed 12 MiB off the heap's
    top (past its raised trim threshold, 8 MiB) and the next ones are faulted in again, a page
    fault per 4 KiB; once the broker keeps large blocks they land on the same pages."""
    def faults(mode: str) -> int:
        out = subprocess.run([sys.executable, "-c", _FAULTS, mode], capture_output=True,
                             text=True, check=True, timeout=60)
        return int(out.stdout)
    assert faults("keep") * 5 < faults("default")


_COLLECTOR = """
import gc
from streamlet.broker.memory import GC_YOUNG, settle_collector
objects = [[i] for i in range(1000)]  # what startup made
settle_collector()
young, *rest = gc.get_threshold()
print(young == GC_YOUNG, gc.get_freeze_count() >= len(objects), rest == [10, 10])
"""


@pytest.mark.process
def test_the_collector_is_settled_once_serving() -> None:
    """Startup's objects are frozen (full collections skip them) and the young generation is
    collected every GC_YOUNG allocations instead of 700; the older generations keep Python's."""
    out = subprocess.run([sys.executable, "-c", _COLLECTOR], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.split() == ["True", "True", "True"]
