"""The broker gives freed heap pages back (glibc's malloc_trim), where the C library has it."""

from __future__ import annotations

import platform

import pytest

from streamlet.broker.memory import return_free_memory


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_free_memory_is_returned_on_glibc() -> None:
    assert return_free_memory() is True
