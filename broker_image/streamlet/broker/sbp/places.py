"""Where SBP's ids and ranges come from: stream ids to names (the hash of streamlet.sbp.ids over
the streams this broker holds and the ones its directory names), and a stream's one range
(docs/protocols/sbp.md: a stream is one range, index 0, that never seals; its servers are the
stream's members, its leader the primary).

``range_of`` is a pure function of what the broker knows of a stream (``RangeFacts``), tested
with tables; ``Names`` is the id lookup, rebuilt when an id is not in it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ...sbp import stream_id
from ...sbp.fbs.RangeInfo import RangeInfoT as RangeT
from ...sbp.fbs.RangeServer import RangeServerT
from ...sbp.fbs.ReplicaServer import ReplicaServerT

Address = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Server:
    """A range server: a broker, by its member id (-1 unknown) and its SBP address."""

    server_id: int
    addr: str


@dataclass(frozen=True, slots=True)
class RangeFacts:
    stream_id: int
    #: None: held elsewhere, its offsets unknown here
    first_offset: int | None
    next_offset: int | None
    sealed: bool
    primary: Server | None  # None while a leader is elected
    secondaries: tuple[Server, ...] = ()


def server_of(address: Address, peers: tuple[Address, ...], sbp_port: int) -> Server:
    """The SBP range server at a broker's RabbitMQ address: its member id is its index in
    ``cluster.peers`` (-1 if not there); its SBP port is this broker's (a cluster's brokers
    share their configuration)."""
    sid = peers.index(address) if address in peers else -1
    return Server(sid, f"{address[0]}:{sbp_port}")


def range_server(server: Server) -> RangeServerT:
    t = RangeServerT()
    t.serverId, t.advertiseAddr = server.server_id, server.addr
    return t


def range_of(facts: RangeFacts) -> RangeT:
    """The stream's range 0: start at its first offset, next at its commit point, open unless
    the stream is sealed (moved away: its end is the commit point); -1 where not known here."""
    r = RangeT()
    r.streamId = facts.stream_id
    r.rangeIndex = 0
    r.startOffset = -1 if facts.first_offset is None else facts.first_offset
    r.nextOffset = -1 if facts.next_offset is None else facts.next_offset
    r.endOffset = r.nextOffset if facts.sealed and facts.next_offset is not None else -1
    servers = []
    for server, primary in ([(facts.primary, True)] if facts.primary else []) + [
            (s, False) for s in facts.secondaries]:
        rs = ReplicaServerT()
        rs.server, rs.isPrimary = range_server(server), primary
        servers.append(rs)
    r.servers = servers
    return r


class Names:
    """Stream ids to names over a set of names (held here, and the directory's). An id two
    names share is ambiguous: ``name`` answers None for it, ``ambiguous`` says so."""

    def __init__(self) -> None:
        self._by_id: dict[int, str | None] = {}
        self._known: set[str] = set()

    def name(self, sid: int, names: Callable[[], Iterable[str]]) -> str | None:
        """``sid``'s name; ``names`` is asked for the names only when ``sid`` is not known (a
        request per frame must not list every stream)."""
        if self._by_id.get(sid) is None:  # unknown, or ambiguous: the names may have changed
            self._rebuild(names())
        return self._by_id.get(sid)

    def ambiguous(self, sid: int) -> bool:
        return sid in self._by_id and self._by_id[sid] is None

    def _rebuild(self, names: Iterable[str]) -> None:
        fresh = set(names)
        if fresh == self._known:
            return
        by_id: dict[int, str | None] = {}
        for n in fresh:
            sid = stream_id(n)
            by_id[sid] = None if sid in by_id and by_id[sid] != n else n
        self._by_id, self._known = by_id, fresh
