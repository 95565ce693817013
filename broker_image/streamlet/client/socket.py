"""What the further protocols' clients (MEGA, RSIO, SBP) share: an asyncio stream to the
broker, a reader task the subclass runs, and closing (also as an async context manager)."""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType
from typing import Self


class SocketClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def start_reading(self) -> None:
        """Run :meth:`_read` beside the caller (the subclass calls it once its state is set)."""
        self._task = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        raise NotImplementedError

    @classmethod
    async def connect(cls, host: str, port: int) -> Self:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, t: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        self._task.cancel()
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()
