"""Physical references on this machine: what loopback TCP and the disk can move at best."""

from __future__ import annotations

import multiprocessing as mp
import os
import socket
import time
from pathlib import Path
from typing import Any

BLOCK = 1 << 20


def loopback_mb_s(total: int) -> float:
    """Push ``total`` bytes through one loopback TCP connection (1 MB sends) to a reader in
    another process (as a broker and its consumer are: threads of one process would share
    its interpreter lock); MB/s (1e6 B) from the first send until the reader has it all."""
    ctx = mp.get_context("fork")
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        got = ctx.Value("q", 0)
        reader = ctx.Process(target=_drain, args=(server, total, got), daemon=True)
        reader.start()
        block = memoryview(os.urandom(BLOCK))
        with socket.create_connection(("127.0.0.1", port)) as out:
            t0 = time.perf_counter()
            sent = 0
            while sent < total:
                out.sendall(block[: min(BLOCK, total - sent)])
                sent += min(BLOCK, total - sent)
            reader.join(timeout=120)
            elapsed = time.perf_counter() - t0
        if reader.is_alive():
            reader.kill()
    received = got.value
    if received < total:
        raise RuntimeError(f"loopback reference received {received} of {total} bytes")
    return total / elapsed / 1e6


def _drain(server: socket.socket, total: int, got: Any) -> None:
    """The reader's side: receive ``total`` bytes into one reused buffer, say how many came."""
    conn, _ = server.accept()
    buf = bytearray(BLOCK)
    received = 0
    with conn:
        while received < total:
            n = conn.recv_into(buf)
            if not n:
                break
            received += n
    got.value = received


def disk_write_mb_s(directory: Path, total: int) -> float:
    """Sequential write of ``total`` bytes in 1 MB os.write calls, one fsync at the end."""
    path = directory / "bench-disk-reference.tmp"
    block = os.urandom(BLOCK)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        t0 = time.perf_counter()
        written = 0
        while written < total:
            written += os.write(fd, block[: min(BLOCK, total - written)])
        os.fsync(fd)
        elapsed = time.perf_counter() - t0
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return total / elapsed / 1e6
