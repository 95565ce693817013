"""SIGINT and SIGTERM end a client command with its summary, not a traceback.

The first signal cancels the command's task; the command catches the cancellation (see
:meth:`Stop.caught`), finishes what keeps data safe (waits briefly for confirms, stores a
consumer's offset), prints its summary, and the process exits 128 + the signal's number (130
for Ctrl-C, 143 for SIGTERM), as shells report a command killed by it. A second signal while
that runs ends the process at once."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Awaitable, Callable

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stop:
    def __init__(self) -> None:
        #: the signal that stopped the command, None while none came
        self.signum: int | None = None
        self._task: asyncio.Task[object] | None = None

    def install(self) -> None:
        """Catch the signals for the running task (call from inside it)."""
        self.signum = None
        self._task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        for s in SIGNALS:
            loop.add_signal_handler(s, self._on_signal, s)

    def _on_signal(self, signum: int) -> None:
        if self.signum is not None:  # the second one: the user means it
            sys.stderr.write("streamlet: interrupted again, exiting now\n")
            sys.stderr.flush()
            os._exit(128 + signum)
        self.signum = signum
        if self._task is not None:
            self._task.cancel()

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def caught(self, exc: asyncio.CancelledError) -> None:
        """Called where a command catches CancelledError: re-raises one that is not ours, else
        lets the command await its clean-up (the task is no longer being cancelled)."""
        if self.signum is None:
            raise exc
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()

    @property
    def exit_code(self) -> int:
        return 128 + (self.signum or 0)


#: the one per process: a CLI runs one command
stop = Stop()


async def stoppable(command: Callable[[], Awaitable[int]]) -> int:
    """Run a command (a coroutine function, called once the signals are caught) and return its
    exit code: 128 + the signal's number when a signal stopped it, and "interrupted" said for
    it when it ended before it had anything to sum up."""
    stop.install()
    try:
        code = await command()
    except asyncio.CancelledError as e:
        stop.caught(e)
        print("streamlet: interrupted", file=sys.stderr)
        return stop.exit_code
    return stop.exit_code if stop.requested else code


def run_client(command: Callable[[], Awaitable[int]]) -> int:
    """A client command run to its exit code (:func:`stoppable`, in its own event loop)."""
    from .output import silence_stdout

    try:
        return asyncio.run(stoppable(command))
    except KeyboardInterrupt:  # before the command caught signals (it sums up after that)
        print("streamlet: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `streamlet streams list | head -1`: the reader had enough
        silence_stdout()
        return 0
