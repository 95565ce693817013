"""The asyncio side of a connection, whatever its protocol: frames in, bytes out, back-pressure.

A protocol adapter subclasses ``FramedConnection`` and implements ``handle_frame`` (one whole
frame), ``frame_too_large``, ``lost`` (release what it held) and ``busy`` (not idle). This class
knows no protocol: it splits frames with the splitter it is given, counts connections against
the broker's and its listener's limits, closes a connection too slow to send its first frame or
silent and not ``busy`` too long, gives a quiet connection's read arena back, and bounds what a
peer can make the broker hold (frames in pieces, unread writes): docs/reliability.md#limits.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from ..wire.framing import FrameTooLarge, ReadBuffer, Splitter
from .config.model import NO_LIMITS, ListenerLimits

if TYPE_CHECKING:
    from .server import Broker

log = logging.getLogger("streamlet.broker")

#: Past this many bytes buffered for a peer that does not read, deliveries stop and the peer is
#: not read either; below WRITE_LOW both resume. The kernel's socket buffer, not this one, is
#: what keeps a reading consumer fed.
WRITE_HIGH = 2 << 20
WRITE_LOW = 512 << 10
#: spawned work, referenced until it ends (the loop keeps only weak references to tasks)
_tasks: set[asyncio.Task[None]] = set()
#: A connection is looked at this often (more often with an idle_timeout under a minute: a
#: quarter of it): one that received nothing since the last look gives its read arena back,
#: an idle one is closed.
QUIET_CHECK_S = 15.0
#: ``send_file``: of a file part the socket did not take, this much goes through the transport
#: (read), whose drained buffer tells when the socket has room for the rest (sent from the file)
FILE_PIECE = 64 << 10


def check_interval(idle_timeout: float) -> float:
    """Seconds between two looks at a connection."""
    return min(idle_timeout / 4, QUIET_CHECK_S) if idle_timeout > 0 else QUIET_CHECK_S


def refusal(open_total: int, total_limit: int, open_here: int, budget: int) -> str | None:
    """Why a new connection is refused (None: it is taken): ``open_total`` connections open
    against limits.max_connections ``total_limit``, ``open_here`` of its listener's protocol
    against its ``budget`` (0: none)."""
    if total_limit and open_total >= total_limit:
        return f"the broker has {open_total} connections (limits.max_connections)"
    if budget and open_here >= budget:
        return f"its protocol has {open_here} connections (its listener's max_connections)"
    return None


def idle_since(last_received: float, last_busy: float) -> float:
    """When the connection went idle: the later of its last byte and the last look that found
    it busy (a subscriber that heard nothing for an hour is idle from its subscription's end,
    not from an hour ago)."""
    return max(last_received, last_busy)


def _ended(task: asyncio.Task[None], what: str, peer: str | None) -> None:
    _tasks.discard(task)
    if not task.cancelled() and task.exception() is not None:
        log.error("connection %s: %s failed", peer, what, exc_info=task.exception())


class FramedConnection(asyncio.BufferedProtocol):
    #: the adapter's view of the connection: past its handshake / going away
    opened = False
    closing = False
    #: its listener's budget and deadlines (from the broker when made; NO_LIMITS: no listener
    #: made it, no budget, deadlines or looks: a connection a test builds)
    limits: ListenerLimits = NO_LIMITS

    def __init__(self, broker: Broker, tls: bool, splitter: Splitter) -> None:
        self.broker = broker
        self.tls = tls
        self.splitter: Splitter = splitter  # its limit is the adapter's to change
        self.reader = ReadBuffer(splitter)  # reads land there, frames are views of it
        self.transport: asyncio.Transport | None = None
        self.peer: str | None = None
        self.user: str | None = None  # once authenticated (limits and permissions are per user)
        self.paused = False  # the peer does not read what we write
        self.last_received = time.monotonic()
        self._waiting = False  # for FrameBudget space for the incomplete frame
        self._reading = True
        self._held = False  # not read on the adapter's word (a relay's upstream is full)
        self._reserved = 0  # FrameBudget bytes held for the incomplete frame
        self._begun = 0  # the splitter's count when the incomplete frame began
        self._frame_deadline: asyncio.TimerHandle | None = None
        self._buffered_at_tick = 0  # the write buffer at the last liveness check
        self._sock_fd = -1  # the socket's descriptor, for write_file
        #: send_file's part the socket did not take yet: (a dup of the file's fd, pos, size)
        self._file_rest: tuple[int, int, int] | None = None
        self._holding = False  # send_file waits for the transport to drain (paused meanwhile)
        self._counted = False  # against the broker's limit and its listener's budget
        self._first_frame: asyncio.TimerHandle | None = None  # no complete frame yet
        self._look: asyncio.TimerHandle | None = None  # the next look (quiet, idle)
        self._looked_at = 0.0  # when the last look was
        self._busy_at = 0.0  # when a look last found it busy
        self._released_at = 0.0  # when a look last gave its read arena back

    # --- what the adapter implements -----------------------------------------------------------

    def handle_frame(self, frame: memoryview) -> None:
        raise NotImplementedError

    def frames_done(self) -> None:
        """The frames of one read were handed to ``handle_frame`` (views of the read buffer,
        valid until now): act on what they gathered (e.g. append them as one batch)."""

    def frame_too_large(self, error: FrameTooLarge) -> None:
        """Tell the peer, in its protocol, then close."""
        raise NotImplementedError

    def accepted(self) -> None:
        """The connection counts against the broker's limit now (e.g. start a handshake timer)."""

    def lost(self) -> None:
        """The connection is gone: release everything it held (called once)."""

    def writable(self) -> None:
        """The peer reads again: resume what waited for room."""

    def busy(self) -> bool:
        """Whether the peer waits on the broker (a subscription, a long poll, an answer not
        sent yet): however silent, the connection is not idle."""
        return False

    # --- asyncio callbacks ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = t = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        t.set_write_buffer_limits(high=WRITE_HIGH, low=WRITE_LOW)  # type: ignore[attr-defined]
        peer = transport.get_extra_info("peername")
        self.peer = peer[0] if isinstance(peer, tuple) else None
        broker = self.broker
        self.limits = limits = broker.limits_of(self)
        why = refusal(len(broker.connections), broker.config.max_connections,
                      broker.listener_connections[limits.protocol], limits.max_connections)
        if why is not None:
            log.warning("%s connection %s refused: %s", limits.protocol or "a", self.peer, why)
            self.abort()
            return
        broker.connections.add(self)
        broker.listener_connections[limits.protocol] += 1
        self._counted = True
        if limits is not NO_LIMITS:
            self._watch()
        self.accepted()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        if self._counted:
            self._counted = False
            self.broker.connections.discard(self)
            self.broker.listener_connections[self.limits.protocol] -= 1
        self.broker.freed_since_trim += 1
        for timer in (self._first_frame, self._look):
            if timer is not None:
                timer.cancel()
        self._first_frame = self._look = None
        self._release_frame()
        if self._waiting:
            self.broker.frame_budget.cancel(self)
        self.reader.clear()  # frees a partial frame now
        if self._file_rest is not None:
            os.close(self._file_rest[0])
            self._file_rest = None
        self.lost()

    def pause_writing(self) -> None:
        self.paused = True
        self._set_reading()

    def resume_writing(self) -> None:
        if self._holding:  # send_file's piece went out: the socket takes more
            t = self.transport
            assert t is not None
            self._holding = False
            t.set_write_buffer_limits(high=WRITE_HIGH, low=WRITE_LOW)  # type: ignore[attr-defined]
            rest, self._file_rest = self._file_rest, None
            if rest is not None and t.is_closing():
                os.close(rest[0])
            elif rest is not None:
                try:
                    if not self._send_part(rest[0], rest[1], rest[2]):
                        return  # the socket is full again: still paused
                finally:
                    os.close(rest[0])
        self.paused = False
        self._set_reading()
        self.writable()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.reader.space()

    def buffer_updated(self, nbytes: int) -> None:
        self.last_received = time.monotonic()
        try:
            # Pulled one by one: each frame is held to the limit in force when its turn comes
            # (a handshake may raise it for the frames after it in the same read).
            for frame in self.reader.filled(nbytes):
                if self.closing:
                    break
                if self._first_frame is not None:  # a whole first frame ends its deadline
                    self._first_frame.cancel()
                    self._first_frame = None
                self.handle_frame(frame)
        except FrameTooLarge as e:
            self.frames_done()
            self.frame_too_large(e)
            return
        self.frames_done()
        if self.closing:
            return
        self._track_incomplete()

    def data_received(self, data: bytes | memoryview) -> None:
        """Bytes read elsewhere (tests feed them so): as if read into the buffer, in pieces of
        the room it offers."""
        view = memoryview(data)
        while view and not self.closing:
            room = self.reader.space()
            n = min(len(room), len(view))
            room[:n] = view[:n]
            view = view[n:]
            self.buffer_updated(n)

    # --- writing and closing ----------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.flush_file_rest()
            self.transport.write(data)

    def flush_file_rest(self) -> None:
        """What ``send_file`` kept of a file part goes into the transport now (read), so that
        what is written next comes after it. Whoever writes to the transport other than by
        ``write`` or ``write_file`` calls this first."""
        rest, self._file_rest = self._file_rest, None
        if rest is None or self.transport is None:
            return
        fd, pos, size = rest
        try:
            data = self.read_exact(fd, size, pos)
        finally:
            os.close(fd)
        if data is not None:
            self.transport.write(data)

    def write_file(self, head: bytes, fd: int, pos: int, size: int) -> None:
        """``head``, then ``size`` bytes of the file ``fd`` from ``pos`` (a follower's feed:
        stored chunks). Over plain TCP with nothing waiting in the transport's buffer they go
        straight to the socket, the file's part with sendfile: its bytes are not read into the
        process nor copied into the socket (loopback's receiver copies them once). What the
        socket does not take, and everything over TLS or behind buffered bytes, goes through
        the transport (a pread), after what is there: the order is kept either way."""
        t = self.transport
        if t is None or t.is_closing():
            return
        self.flush_file_rest()
        done, sent = 0, 0  # of head, of the file's part: written to the socket directly
        sock = -1 if self.tls or t.get_write_buffer_size() else self._socket_fd(t)
        if sock >= 0:
            try:
                done = os.write(sock, head)
                if done == len(head):
                    while sent < size:
                        n = os.sendfile(sock, fd, pos + sent, size - sent)
                        if n <= 0:
                            break  # the file is shorter than said: the pread below tells
                        sent += n
            except BlockingIOError:
                pass  # the socket's buffer is full: the rest waits in the transport's
            except OSError as e:
                self._write_failed(e)
                return
        if done < len(head):
            t.write(head[done:])
        if sent < size:
            rest = self.read_exact(fd, size - sent, pos + sent)
            if rest is not None:
                t.write(rest)

    def read_exact(self, fd: int, size: int, pos: int) -> bytes | None:
        """``size`` bytes of the file ``fd`` from ``pos``; None when it has fewer (logged, the
        connection aborted: a frame cut short would desynchronise the peer)."""
        data = os.pread(fd, size, pos)
        if len(data) == size:
            return data
        log.error("connection %s: short read of %d bytes at %d", self.peer, size, pos)
        if self.transport is not None:
            self.transport.abort()
        return None

    def _write_failed(self, e: OSError) -> None:
        """A write straight to the socket failed: the connection broke, the transport closes."""
        log.info("connection %s: write failed: %s", self.peer, e)
        if self.transport is not None:
            self.transport.abort()

    def can_send_file(self) -> bool:
        """Whether ``send_file`` may be used now: plain TCP, nothing buffered in the transport,
        nothing of an earlier file part waiting."""
        t = self.transport
        return (not self.tls and t is not None and not t.is_closing() and not self.paused
                and not t.get_write_buffer_size() and self._socket_fd(t) >= 0)

    def send_file(self, head: bytes, fd: int, pos: int, size: int) -> None:
        """``head``, then ``size`` bytes of the file ``fd`` from ``pos``, straight to the socket
        (only when ``can_send_file()``), the file's part with sendfile. What the socket does
        not take is not read into the process: a piece of it goes through the transport, the
        connection pauses (``paused``) until the transport has written it, then sends the rest
        from the file and resumes (``writable``). So a sender that stops while paused sends
        every byte of its chunks from the file, whatever its peer's pace."""
        t = self.transport
        assert t is not None
        sock = self._socket_fd(t)
        done = 0
        try:
            done = os.write(sock, head)
        except BlockingIOError:
            pass  # the socket's buffer is full
        except OSError as e:
            self._write_failed(e)
            return
        if done < len(head):
            t.write(head[done:])
            if t.get_write_buffer_size():
                if size:
                    self._file_rest = (os.dup(fd), pos, size)
                self._hold()
                return
        self._send_part(fd, pos, size)

    def _send_part(self, fd: int, pos: int, size: int) -> bool:
        """sendfile of ``size`` bytes of ``fd`` from ``pos`` to the socket: True when all went
        (or the connection broke); else a piece of the rest waits in the transport, the rest
        after it is kept, and the connection holds until the transport drains (False)."""
        t = self.transport
        assert t is not None
        sent = 0
        while True:
            try:
                while sent < size:
                    n = os.sendfile(self._sock_fd, fd, pos + sent, size - sent)
                    if n <= 0:
                        break
                    sent += n
            except BlockingIOError:
                pass  # the socket's buffer is full
            except OSError as e:
                self._write_failed(e)
                return True
            if sent == size:
                return True
            piece = min(size - sent, FILE_PIECE)
            data = self.read_exact(fd, piece, pos + sent)
            if data is None:  # the file is shorter than said (as a sendfile of 0 says)
                return True
            t.write(data)
            sent += piece
            if t.get_write_buffer_size():  # it waits: the transport says when it went
                if sent < size:
                    self._file_rest = (os.dup(fd), pos + sent, size - sent)
                self._hold()
                return False
            if sent == size:
                return True
            # the socket took the piece at once (it drained meanwhile): on from the file

    def hold_if_buffered(self) -> None:
        """After a write the socket did not take whole: pause until the transport has written
        it (``send_file``'s rule), so what follows can go straight to the socket again."""
        t = self.transport
        if t is not None and not t.is_closing() and not self._holding and \
                t.get_write_buffer_size() and not self.paused:
            self._hold()

    def _hold(self) -> None:
        """Pause until the transport's buffer (not empty) is written: uvloop calls
        ``pause_writing`` now and ``resume_writing`` then, which sends the file's rest first."""
        t = self.transport
        assert t is not None
        self._holding = True
        t.set_write_buffer_limits(high=0, low=0)  # type: ignore[attr-defined]

    def _socket_fd(self, t: asyncio.Transport) -> int:
        """The socket's descriptor; -1 for a transport without one (then write_file writes
        through the transport)."""
        fd: int = self._sock_fd
        if fd < 0:
            sock = t.get_extra_info("socket")
            fd = self._sock_fd = sock.fileno() if sock is not None else -1
        return fd

    def write_room(self) -> int:
        """Bytes that may be written before the peer counts as not reading (WRITE_HIGH); none
        once the transport closes (what is written then is dropped: nothing more to read)."""
        t = self.transport
        if t is None or t.is_closing():
            return 0
        return WRITE_HIGH - t.get_write_buffer_size()

    def abort(self) -> None:
        """Close: what is buffered is written first."""
        self.closing = True
        if self.transport is not None:
            self.transport.close()

    def hold_reading(self, held: bool) -> None:
        """Stop (or resume) reading the peer for the adapter's own reason."""
        self._held = held
        self._set_reading()

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> asyncio.TimerHandle:
        return asyncio.get_running_loop().call_later(delay, callback, *args)

    def spawn(self, work: Coroutine[Any, Any, None], what: str) -> None:
        """Run ``work`` beside the connection (a request that waits on other brokers); an
        exception is logged, never raised into the loop."""
        task = asyncio.get_running_loop().create_task(work)
        _tasks.add(task)
        task.add_done_callback(lambda t: _ended(t, what, self.peer))

    def silent_for(self) -> float:
        """Seconds since the peer last showed it is alive. While we are not reading it, its
        frames wait unread: it is alive if we hold its frame back for budget or it took some of
        what we wrote since the last call."""
        if not self._reading:
            buffered = self.transport.get_write_buffer_size() if self.transport else 0
            if self._waiting or buffered < self._buffered_at_tick:
                self.last_received = time.monotonic()
            self._buffered_at_tick = buffered
        return time.monotonic() - self.last_received

    # --- deadlines: the first frame, idleness; a quiet connection's arena ----------------------

    def _watch(self) -> None:
        """Start the listener's deadlines and the looks (accepted, counted)."""
        limits = self.limits
        if limits.first_frame_timeout > 0:
            self._first_frame = self.call_later(limits.first_frame_timeout, self._on_first_frame)
        self._looked_at = self._busy_at = self._released_at = time.monotonic()
        self._look = self.call_later(check_interval(limits.idle_timeout), self._on_look)

    def _on_first_frame(self) -> None:
        self._first_frame = None
        if not self.closing:
            log.info("%s connection %s: no complete first frame within %ds, closing",
                     self.limits.protocol, self.peer, self.limits.first_frame_timeout)
            self.abort()

    def _on_look(self) -> None:
        """A look: a connection that received nothing since the last one and holds no partial
        frame gives its read arena back (the next read takes a new one); one idle for its
        listener's idle_timeout is closed."""
        self._look = None
        if self.closing:
            return
        now = time.monotonic()
        self.silent_for()  # a peer draining what we wrote counts as heard from
        if self._released_at < self.last_received < self._looked_at and not self.reader.held:
            self.reader.clear()  # read into since the last release, quiet since the last look
            self._released_at = now
            self.broker.freed_since_trim += 1
        if self.busy():
            self._busy_at = now
        idle = self.limits.idle_timeout  # from the first frame on: before, its own deadline
        if idle > 0 and self._first_frame is None and \
                now - idle_since(self.last_received, self._busy_at) >= idle:
            log.info("%s connection %s: idle for %ds (silent, nothing outstanding), closing",
                     self.limits.protocol, self.peer, idle)
            self.abort()
            return
        self._looked_at = now
        self._look = self.call_later(check_interval(idle), self._on_look)

    # --- reading, and a frame in pieces ---------------------------------------------------------

    def _set_reading(self) -> None:
        """Read from the peer unless it does not read us or its frame waits for budget."""
        t = self.transport
        want = not (self.paused or self._waiting or self._held)
        if want != self._reading and t is not None and not t.is_closing():
            self._reading = want
            if want:
                t.resume_reading()
            else:
                t.pause_reading()

    def _track_incomplete(self) -> None:
        """After a read: a frame left incomplete has its whole length reserved in the broker's
        FrameBudget (or waits for it, not read meanwhile) and, once opened, a deadline."""
        s = self.reader
        if s.begun != self._begun or not s.held:  # the frame held before, if any, is done
            self._begun = s.begun
            self._release_frame()
            if s.held and self.opened:
                self._start_frame_deadline()
        if s.pending and not self._reserved and not self._waiting:
            if self.broker.frame_budget.reserve(self, s.pending):
                self._reserved = s.pending
            else:
                self._waiting = True
                self._set_reading()

    def granted(self, size: int) -> None:
        """FrameBudget: the space this connection waited for is reserved; read on."""
        self._waiting = False
        self._reserved = size
        if self.closing:
            self._release_frame()
            return
        self._set_reading()

    def _release_frame(self) -> None:
        if self._reserved:
            self.broker.frame_budget.release(self._reserved)
            self._reserved = 0
        if self._frame_deadline is not None:
            self._frame_deadline.cancel()
            self._frame_deadline = None

    def _start_frame_deadline(self) -> None:
        self._frame_deadline = self.call_later(self.broker.config.frame_timeout,
                                               self._on_frame_deadline)

    def _on_frame_deadline(self) -> None:
        self._frame_deadline = None
        if self.closing or not self.reader.held:
            return
        if not self._reading:  # we hold it back (budget, or it does not read): not its delay
            self._start_frame_deadline()
            return
        log.info("connection %s: a frame still incomplete after %ds (%d of %d bytes), closing",
                 self.peer, self.broker.config.frame_timeout, self.reader.held,
                 self.reader.pending)
        self.abort()
