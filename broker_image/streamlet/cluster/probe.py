"""Looking at processes and ports from outside: is a pid alive, does a port accept, is it free."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import socket
from pathlib import Path


def pid_alive(pid: int) -> bool:
    """True when process ``pid`` exists and is not a zombie (exited, not yet reaped)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, someone else's
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc (or it went just now): os.kill said it was there
    # "pid (comm) S ...": the state follows the last ')' (comm may hold parentheses)
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


async def port_accepts(host: str, port: int, timeout: float = 1.0) -> bool:
    """True when a TCP connection to ``host:port`` is accepted within ``timeout`` seconds."""
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


def bind_error(host: str, port: int) -> str | None:
    """None when a listener could bind ``host:port`` now (as the broker binds: SO_REUSEADDR),
    else why not, naming the port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
            s.listen(1)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                return f"port {port} is busy: something already listens on {host}:{port}"
            return f"cannot listen on {host}:{port} (port {port}): {e.strerror}"
    return None
