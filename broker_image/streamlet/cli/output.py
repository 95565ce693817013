"""Standard output that a closed pipe ends quietly: `streamlet consume S | head -2`.

A write is whole even when a signal interrupts it part-way. A write to a pipe whose reader
went away raises OutputClosed (and stdout is pointed at
/dev/null, so the exit does not complain). A command that waits for more to write (consume
following a stream) asks :func:`reader_gone` now and then: once the pipe's reader has gone,
it ends as if a write had failed, instead of waiting for a message that may never come."""

from __future__ import annotations

import asyncio
import os
import select
import sys
from collections.abc import AsyncIterator
from typing import BinaryIO, TypeVar

T = TypeVar("T")

#: how often a waiting command checks that its output's reader is still there
WATCH_S = 0.5


class OutputClosed(Exception):
    """The reader of standard output went away (EPIPE)."""


def silence_stdout() -> None:
    """Point the stdout descriptor at /dev/null, so the interpreter's own flush at exit does not
    hit the closed pipe again (and print "Exception ignored ... BrokenPipeError")."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def reader_gone(fd: int | None = None) -> bool:
    """True when ``fd`` (standard output's by default) is a pipe or socket whose reader has
    gone (poll says POLLERR or POLLHUP); a file or a terminal is never gone."""
    poller = select.poll()
    poller.register(sys.stdout.fileno() if fd is None else fd, select.POLLOUT)
    return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))


async def until_reader_gone(fd: int | None = None, every: float = WATCH_S) -> None:
    """Returns once :func:`reader_gone`: a task to race against a wait for more output."""
    while not reader_gone(fd):
        await asyncio.sleep(every)


async def next_while_read(items: AsyncIterator[T], gone: asyncio.Future[None],
                          timeout: float | None) -> T:
    """The next of ``items``; raises OutputClosed once ``gone`` (:func:`until_reader_gone`)
    is done first, TimeoutError after ``timeout`` seconds without one, StopAsyncIteration at
    their end."""
    step: asyncio.Future[T] = asyncio.ensure_future(anext(items))
    try:
        done, _ = await asyncio.wait((step, gone), timeout=timeout,
                                     return_when=asyncio.FIRST_COMPLETED)
    finally:
        step.cancel()  # nothing when it is done
    if step in done:
        return step.result()
    if gone in done:
        silence_stdout()
        raise OutputClosed
    raise TimeoutError


class Output:
    def __init__(self, stream: BinaryIO | None = None) -> None:
        self._stream = stream if stream is not None else sys.stdout.buffer

    def write(self, data: bytes) -> None:
        """All of ``data``: a buffered write interrupted by a signal (Ctrl-C while a full pipe
        blocks it) returns having written part of it, and the rest is written here."""
        view = memoryview(data)
        try:
            while view:
                view = view[self._stream.write(view):]
        except BrokenPipeError:
            silence_stdout()
            raise OutputClosed from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            silence_stdout()
            raise OutputClosed from None
