"""One SBP connection (docs/protocols/sbp.md): frames cut by streamlet.sbp's splitter, each
request answered under its frame's stream identifier. Streams are those of virtual host "/",
named to SBP by the hash of their name (streamlet.sbp.ids).

PING, HEARTBEAT and GOAWAY are answered here; APPEND (appending.py), FETCH (fetching.py) and the
stream, range and placement driver opcodes (admin.py) go to their handlers. A failing handler
costs its request a system error, never the broker or another connection. No authentication,
every right on "/"; idle only with nothing unanswered. What is discarded, answered or closed:
docs/protocols/sbp.md#what-is-discarded-answered-closed.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...core.ports import Refusal
from ...core.registry import Streams
from ...core.streams import Stream
from ...sbp import (
    LAST,
    ErrorCode,
    Flags,
    Frame,
    FramingLost,
    Malformed,
    Opcode,
    SbpSplitter,
    decode,
    read,
    request_class,
    status,
    system_error,
    write,
)
from ...sbp.fbs.GoAway import GoAwayT
from ...sbp.flat import append_run
from ...sbp.frame import head
from ...wire.framing import FrameTooLarge
from ..replication.members import Refused
from ..transport import FramedConnection
from .appending import Appends
from .fetching import KEPT_READER_BYTES, MAX_FETCH_BYTES, PIECE, Fetch, Readers
from .places import Names, Server, server_of
from .settings import SbpSettings

if TYPE_CHECKING:
    from ..server import Broker

log = logging.getLogger("streamlet.broker")

_HEAD = struct.Struct(">HBI")  # opcode, flags, stream id: at byte 5 of a frame


class SbpConnection(FramedConnection):
    def __init__(self, broker: Broker, tls: bool = False) -> None:
        max_frame = broker.config.settings_of("sbp", SbpSettings).max_frame_bytes
        super().__init__(broker, tls, SbpSplitter(max_frame))
        self.streams: Streams = broker.vhosts["/"].streams
        #: a fetch answers at most MAX_FETCH_BYTES per stream, in frames of ``piece_bytes`` of
        #: records (half a frame at most: room for the results)
        self.max_fetch_bytes = MAX_FETCH_BYTES
        self.piece_bytes = max(min(PIECE, max_frame // 2), 1)
        #: a chunk sent whole from its file is at most this big (half a frame, as a piece)
        self.file_piece_bytes = max(max_frame // 2, 1)
        self.names = Names()
        self.appends = Appends(self)
        self.fetches: set[Fetch] = set()
        self.readers = Readers(KEPT_READER_BYTES)
        self.going_away = False  # the client's GOAWAY came: finish, then close
        self.said_goaway = False
        self.discarded = 0  # frames discarded (wrong magic, unknown opcode)

    # --- the transport's hooks ---------------------------------------------------------------

    def accepted(self) -> None:
        self.opened = True  # no handshake: the frame deadline applies from the first byte

    def handle_frame(self, raw: memoryview) -> None:
        run = append_run(raw)  # the usual APPEND frame, read in one C call: the hot path
        if run is not None:
            if not self.going_away:
                self._handle(Opcode.APPEND, run[0], self.appends.start_run, raw, run)
            return
        try:
            frame = decode(raw)
        except Malformed as e:
            opcode, _, sid = _HEAD.unpack_from(raw, 5)
            self.system_error(opcode, sid, ErrorCode.INVALID_REQUEST, str(e))
            return
        if frame is None:
            self.discarded += 1
            return
        if frame.is_response:  # answers to nothing we asked (we ask nothing but GOAWAY)
            return
        if self.going_away and frame.opcode != Opcode.GOAWAY:
            return  # after GOAWAY no new request is taken (HTTP/2's rule)
        opcode = frame.opcode  # an int: HANDLERS and RAW find it (no enum made per frame)
        cls = None if opcode in RAW else request_class(Opcode(opcode))
        try:
            header = frame.header if cls is None else read(cls, frame.header)
        except Malformed as e:
            self.system_error(opcode, frame.stream_id, ErrorCode.INVALID_REQUEST, str(e))
            return
        self._handle(opcode, frame.stream_id, HANDLERS[opcode], self, frame, header)

    def _handle(self, opcode: int, sid: int, handler: Callable[..., None], *args: Any) -> None:
        try:
            handler(*args)
        except Exception:  # a bug costs this request a system error, never the broker
            log.exception("connection %s: SBP %s failed", self.peer, Opcode(opcode).name)
            self.system_error(opcode, sid, ErrorCode.UNKNOWN, "internal error")

    def frame_too_large(self, error: FrameTooLarge) -> None:
        reason = error.reason if isinstance(error, FramingLost) else str(error)
        log.info("connection %s: %s, closing", self.peer, reason)
        self.goaway(ErrorCode.INVALID_REQUEST, reason)

    def writable(self) -> None:
        for fetch in list(self.fetches):  # answers waiting for the client to read
            fetch.pump()

    def busy(self) -> bool:
        return bool(self.fetches or self.appends.waiting)  # a long poll, an append unanswered

    def lost(self) -> None:
        for fetch in list(self.fetches):
            fetch.done = True
            if fetch.timer is not None:
                fetch.timer.cancel()
        self.fetches.clear()
        self.readers.clear()
        self.appends.release()

    def abort(self) -> None:
        """Close, with a GOAWAY first (the broker stops, or ends this connection)."""
        if not self.closing:
            self.goaway(ErrorCode.NONE, "the broker closes the connection")
        else:
            super().abort()

    # --- sending ---------------------------------------------------------------------------------

    def send(self, opcode: int, flags: int, sid: int, header: bytes = b"",
             payload: list[memoryview | bytes] | None = None) -> None:
        t = self.transport
        if t is None or t.is_closing():
            return
        body = payload or []
        size = sum(len(p) for p in body)
        t.writelines([head(opcode, flags, sid, len(header), size), header, *body])

    def answers_raw(self, opcode: int, answers: list[tuple[int, bytes, bool]]) -> None:
        """Answer frames without payload, (stream identifier, header written, end) each, in one
        write (one system call, where a frame each would make one each)."""
        t = self.transport
        if t is None or t.is_closing():
            return
        parts: list[bytes] = []
        for sid, header, end in answers:
            parts += (head(opcode, LAST if end else Flags.RESPONSE, sid, len(header), 0), header)
        t.writelines(parts)

    def answer(self, opcode: int, sid: int, table: Any,
               payload: list[memoryview | bytes] | None = None, end: bool = True) -> None:
        self.send(opcode, LAST if end else Flags.RESPONSE, sid, write(table), payload)

    def answer_raw(self, opcode: int, sid: int, header: bytes,
                   payload: list[memoryview | bytes] | None = None, end: bool = True) -> None:
        """``answer`` with a header already written (streamlet.sbp.flat)."""
        self.send(opcode, LAST if end else Flags.RESPONSE, sid, header, payload)

    def answer_file(self, opcode: int, sid: int, header: bytes, fd: int, pos: int, size: int,
                    payload: int, end: bool) -> None:
        """``answer_raw`` for a payload of ``payload`` bytes, the first ``size`` of them from
        the file ``fd`` at ``pos`` (a stored chunk's data section: sendfile where it can,
        transport.write_file); the rest follows by write_file."""
        flags = LAST if end else Flags.RESPONSE
        self.write_file(head(opcode, flags, sid, len(header), payload) + header, fd, pos, size)

    def system_error(self, opcode: int, sid: int, code: int, message: str) -> None:
        self.send(opcode, LAST | Flags.SYSTEM_ERROR, sid, system_error(code, message))

    def goaway(self, code: int, message: str) -> None:
        """Say GOAWAY (once), then close."""
        if not self.said_goaway:
            self.said_goaway = True
            t = GoAwayT()
            t.status = status(code, message)
            self.send(Opcode.GOAWAY, Flags.NONE, 0, write(t))
        self.closing = True
        if self.transport is not None:
            self.transport.close()

    def maybe_done(self) -> None:
        """After the client's GOAWAY: close once nothing it asked is left unanswered."""
        if self.going_away and not self.appends.waiting and not self.fetches:
            self.goaway(ErrorCode.NONE, "goodbye")

    def fetch_ended(self, fetch: Fetch) -> None:
        self.fetches.discard(fetch)
        self.maybe_done()

    # --- streams by id ------------------------------------------------------------------------

    def stream_name(self, sid: int) -> str | None:
        return self.names.name(sid, self._all_names)

    def _all_names(self) -> list[str]:
        names = list(self.streams.streams)
        names += [k for k in self.broker.directory().streams if "/" not in k]
        names += [k for k in self.broker.directory().replicated if "/" not in k]
        return names

    def local_stream(self, sid: int) -> Stream | tuple[int, str]:
        name = self.stream_name(sid)
        if name is None:
            if self.names.ambiguous(sid):
                return ErrorCode.INVALID_REQUEST, f"stream id {sid} names two streams"
            return ErrorCode.STREAM_NOT_FOUND, f"no stream has id {sid}"
        stream = self.streams.get(name)
        if stream is None:
            if self.broker.directory().leader("/", name) is not None:
                return ErrorCode.NOT_PRIMARY, f"stream {name!r} is on another broker (LIST_RANGES)"
            return ErrorCode.STREAM_NOT_FOUND, f"no stream has id {sid}"
        return stream

    def readable_stream(self, sid: int) -> Stream | tuple[int, str]:
        return self.local_stream(sid)

    def writable_stream(self, sid: int) -> Stream | tuple[int, str]:
        """The stream to append to, or why not: only its leader appends."""
        got = self.local_stream(sid)
        if isinstance(got, tuple):
            return got
        try:
            elsewhere = self.broker.members.leader_of(got) is not None
        except Refused:
            elsewhere = True
        if elsewhere or got.sealed or got.deleted:
            return ErrorCode.NOT_PRIMARY, f"stream {got.name!r} is not led by this broker (LIST_RANGES)"
        return got

    def server_at(self, address: tuple[str, int]) -> Server:
        """The range server of the broker advertised at ``address``. Its SBP port is this
        broker's shifted by the difference of their RabbitMQ ports: a cluster's brokers share
        their configuration (every pod the same ports: no shift), and ``cluster up
        --sbp-port`` gives node i SBP port P + i beside RabbitMQ port base + i."""
        cfg = self.broker.config
        return server_of(address, cfg.peers, self.sbp_port() + address[1] - cfg.advertised[1])

    def me(self) -> Server:
        cfg = self.broker.config
        here = cfg.advertised
        own = server_of(here, cfg.peers, self.sbp_port())
        if own.server_id < 0:
            own = Server(cfg.member if cfg.member is not None else 0, own.addr)
        return own

    def sbp_port(self) -> int:
        t = self.transport
        sock = t.get_extra_info("sockname") if t is not None else None
        return int(sock[1]) if isinstance(sock, tuple) else 0

    # --- the core's session roles (streamlet.core.ports): PublisherSession, Watcher --------------
    # (SBP reads by pull (fetch): no subscription, no ReaderSession)

    def confirmed(self, publisher_id: int, ids: list[bytes]) -> None:
        self.appends.confirmed(ids)

    def placed(self, publisher_id: int, first_id: int, offset: int) -> None:
        self.appends.placed(first_id, offset)

    def rejected(self, publisher_id: int, ids: list[int], why: Refusal) -> None:
        self.appends.rejected(ids, why)

    def stream_gone(self, stream: Stream) -> None:
        self.appends.drop(stream, ErrorCode.STREAM_NOT_FOUND, "the stream was deleted")

    def stream_moved(self, stream: Stream) -> None:
        self.appends.drop(stream, ErrorCode.NOT_PRIMARY, "the stream moved to another broker")


# --- the handlers of the connection's own opcodes; the rest are in admin.py -----------------

def on_ping(conn: SbpConnection, frame: Frame, _: None) -> None:
    conn.send(Opcode.PING, LAST, frame.stream_id, bytes(frame.header), [frame.payload])


def on_goaway(conn: SbpConnection, frame: Frame, _: GoAwayT) -> None:
    conn.going_away = True
    for fetch in list(conn.fetches):  # a long poll ends now, with what there is
        fetch.deadline()
    conn.maybe_done()


def on_append(conn: SbpConnection, frame: Frame, header: memoryview) -> None:
    conn.appends.start(frame.stream_id, header, memoryview(frame.payload))


def on_fetch(conn: SbpConnection, frame: Frame, req: Any) -> None:
    fetch = Fetch(conn, frame.stream_id, req)
    conn.fetches.add(fetch)
    fetch.start()


#: opcodes whose handler reads its header itself (streamlet.sbp.flat: the hot path)
RAW = frozenset({Opcode.APPEND})


def _handlers() -> dict[int, Callable[[SbpConnection, Frame, Any], None]]:
    from . import admin
    return {Opcode.PING: on_ping, Opcode.GOAWAY: on_goaway, Opcode.APPEND: on_append,
            Opcode.FETCH: on_fetch, **admin.HANDLERS}


HANDLERS = _handlers()
