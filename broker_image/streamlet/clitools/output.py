"""Standard output that a closed pipe ends quietly: `streamlet consume S | head -2`."""

from __future__ import annotations

import os
import sys
from typing import BinaryIO


class OutputClosed(Exception):
    """The reader of standard output went away (EPIPE)."""


def silence_stdout() -> None:
    """Point the stdout descriptor at /dev/null, so the interpreter's own flush at exit does not
    hit the closed pipe again (and print "Exception ignored ... BrokenPipeError")."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


class Output:
    def __init__(self, stream: BinaryIO | None = None) -> None:
        self._stream = stream if stream is not None else sys.stdout.buffer

    def write(self, data: bytes) -> None:
        try:
            self._stream.write(data)
        except BrokenPipeError:
            silence_stdout()
            raise OutputClosed from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            silence_stdout()
            raise OutputClosed from None
