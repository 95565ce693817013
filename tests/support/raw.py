"""A deliberately dumb, blocking protocol peer for tests that send what no client would."""

from __future__ import annotations

import socket
import struct

from streamlet.rabbitmq import frames as f
from streamlet.rabbitmq.client import ClientHandshake, HandshakeFailed, State


class RawPeer:
    # A generous default: a read that waits this long has failed anyway, and a loaded 2-core
    # machine (a broker restarting, CI beside other work) can take seconds to answer.
    def __init__(self, host: str, port: int, timeout: float = 30.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buf = b""
        self.corr = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawPeer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def next_corr(self) -> int:
        self.corr += 1
        return self.corr

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, cmd: f.Command) -> None:
        self.sock.sendall(f.encode(cmd))

    def recv_frame(self) -> bytes | None:
        """The next frame's bytes (without size), or None when the server closed."""
        while True:
            if len(self.buf) >= 4:
                (size,) = struct.unpack_from(">I", self.buf)
                if len(self.buf) >= 4 + size:
                    frame, self.buf = self.buf[4 : 4 + size], self.buf[4 + size :]
                    return frame
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:
                return None
            if not data:
                return None
            self.buf += data

    def recv(self) -> f.Command | f.FrameError | None:
        frame = self.recv_frame()
        return None if frame is None else f.decode(frame)

    def recv_until(self, cls: type[f.Command]) -> f.Command:
        while True:
            cmd = self.recv()
            if cmd is None:
                raise ConnectionError(f"closed while waiting for {cls.__name__}")
            if isinstance(cmd, cls):
                return cmd

    def closed(self) -> bool:
        """True once the server has closed the connection (draining what it sent first)."""
        while True:
            if self.recv_frame() is None:
                return True

    def handshake(self, user: str = "guest", password: str = "guest") -> None:
        """The whole handshake through Open, echoing the broker's Tune (its values)."""
        self._handshake(user, password, stop_at_tune=False)

    def authenticate(self, user: str = "guest", password: str = "guest") -> f.Tune:
        """The handshake up to the broker's Tune, returned for the caller to answer (and Open)."""
        tune = self._handshake(user, password, stop_at_tune=True)
        assert tune is not None
        return tune

    def _handshake(self, user: str, password: str, stop_at_tune: bool) -> f.Tune | None:
        """Drive the client's handshake machine; a refused login raises PermissionError(code),
        any other failure HandshakeFailed."""
        hs = ClientHandshake(properties={"product": "raw-test"}, user=user, password=password,
                             correlation=self.corr)
        try:
            for cmd in hs.start():
                self.send(cmd)
            while hs.opened is None:
                got = self.recv()
                if got is None:
                    raise ConnectionError(f"closed while waiting for {hs.waiting_for}")
                if stop_at_tune and hs.state is State.TUNE and isinstance(got, f.Tune):
                    return got
                for cmd in hs.receive(got):
                    self.send(cmd)
        except HandshakeFailed as e:
            if e.state is State.SASL_AUTHENTICATE and not e.closed_by_server:
                raise PermissionError(e.code) from e
            raise
        finally:
            self.corr = hs.correlation
        return None

    def request(self, cmd: f.Command, response: type[f.Command]) -> f.Command:
        self.send(cmd)
        return self.recv_until(response)
