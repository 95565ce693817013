"""Standard input as messages, one a line, read in blocks: hundreds of thousands of lines a
second instead of one readline call per line.

A daemon thread reads the file descriptor with ``os.read`` (a blocked read of a terminal or an
open pipe must not keep an interrupted command from exiting, as a thread of the loop's default
executor would). It never touches ``sys.stdin``'s buffered reader: a daemon thread inside that
reader's lock when the interpreter exits aborts it ("Fatal Python error:
_enter_buffered_busy"). The thread hands blocks to the loop, at most AHEAD unread, and stops
quietly once the loop is gone; the event loop splits them into lines."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import AsyncIterator

#: bytes asked of the input per read (a pipe hands over what it holds, up to this)
BLOCK = 1 << 20
#: blocks read ahead of the sender
AHEAD = 4


async def line_batches(fd: int | None = None) -> AsyncIterator[list[bytes]]:
    """Lists of lines without their newline; a last line without one is a line too. ``fd``:
    the descriptor to read (default standard input's)."""
    source = sys.stdin.fileno() if fd is None else fd
    loop = asyncio.get_running_loop()
    blocks: asyncio.Queue[bytes | OSError] = asyncio.Queue()
    room = threading.Semaphore(AHEAD)  # taken per block read, given back as the loop takes one

    def reader() -> None:
        while True:
            room.acquire()
            try:
                block: bytes | OSError = os.read(source, BLOCK)
            except OSError as e:
                block = e
            try:
                loop.call_soon_threadsafe(blocks.put_nowait, block)
            except RuntimeError:
                return  # the loop is closed: nobody reads on
            if not block or isinstance(block, OSError):
                return

    threading.Thread(target=reader, name="stdin", daemon=True).start()
    tail = b""
    while True:
        block = await blocks.get()
        room.release()
        if isinstance(block, OSError):
            raise block
        if not block:
            break
        lines = (tail + block).split(b"\n")
        tail = lines.pop()
        if lines:
            yield lines
    if tail:
        yield [tail]
