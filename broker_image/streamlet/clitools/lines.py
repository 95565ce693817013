"""Standard input as messages, one a line, read in blocks: hundreds of thousands of lines a
second instead of one readline call per line.

A daemon thread reads (a blocked read of a terminal must not keep an interrupted command
from exiting, as a thread of the loop's default executor would); the event loop splits."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import AsyncIterator
from typing import BinaryIO

#: bytes asked of the input per read (a pipe hands over what it holds, up to this)
BLOCK = 1 << 20
#: blocks read ahead of the sender
AHEAD = 4


async def line_batches(stream: BinaryIO | None = None) -> AsyncIterator[list[bytes]]:
    """Lists of lines without their newline; a last line without one is a line too."""
    src = stream if stream is not None else sys.stdin.buffer
    read = getattr(src, "read1", src.read)
    loop = asyncio.get_running_loop()
    blocks: asyncio.Queue[bytes | BaseException] = asyncio.Queue(AHEAD)

    def reader() -> None:
        while True:
            try:
                block: bytes | BaseException = read(BLOCK)
            except (OSError, ValueError) as e:
                block = e
            try:
                asyncio.run_coroutine_threadsafe(blocks.put(block), loop).result()
            except (RuntimeError, asyncio.CancelledError, TimeoutError):
                return  # the loop is gone: nobody reads on
            if not block or isinstance(block, BaseException):
                return

    threading.Thread(target=reader, name="stdin", daemon=True).start()
    tail = b""
    while True:
        block = await blocks.get()
        if isinstance(block, BaseException):
            raise block
        if not block:
            break
        lines = (tail + block).split(b"\n")
        tail = lines.pop()
        if lines:
            yield lines
    if tail:
        yield [tail]
