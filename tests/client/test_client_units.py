"""streamlet.client pieces that need no peer: offset specs, frame building, filtering, and
the connection's dispatch of delivered chunks fed as bytes."""

from __future__ import annotations

import asyncio
import gzip
import struct

import pytest

from streamlet.client import OffsetSpec, StreamletError
from streamlet.client.connection import Connection, parse_version
from streamlet.client.consumer import chunk_records
from streamlet.client.errors import ConnectionClosed
from streamlet.rabbitmq import Code, OffsetType, frames
from streamlet.rabbitmq.client import negotiate, plain_credentials
from streamlet.storage.chunk import (
    HEADER,
    ChunkError,
    ChunkHeader,
    encode_chunk,
    iter_records,
    simple_entry,
)


def test_offset_spec_parse() -> None:
    assert OffsetSpec.parse("first") == OffsetSpec(OffsetType.FIRST)
    assert OffsetSpec.parse("LAST") == OffsetSpec.last()
    assert OffsetSpec.parse("next") == OffsetSpec.next()
    assert OffsetSpec.parse(7) == OffsetSpec(OffsetType.OFFSET, 7)
    assert OffsetSpec.parse(OffsetSpec.timestamp(123)) == OffsetSpec(OffsetType.TIMESTAMP, 123)
    with pytest.raises(ValueError):
        OffsetSpec.parse("middle")
    with pytest.raises(ValueError):
        OffsetSpec.parse(-1)
    with pytest.raises(TypeError):
        OffsetSpec.parse(True)
    with pytest.raises(TypeError):
        OffsetSpec.parse(1.5)  # type: ignore[arg-type]


def test_chunk_records_skips_before_requested_offset() -> None:
    data = b"".join(simple_entry(b"r%d" % i) for i in range(10))
    header, _ = encode_chunk(data, chunk_id=100, num_entries=10, num_records=10, timestamp=5)
    first, recs = chunk_records(header, data, 104)
    assert first == 104
    assert [bytes(r) for r in recs] == [b"r%d" % i for i in range(4, 10)]
    first, recs = chunk_records(header, data, 0)  # before the chunk: nothing skipped
    assert first == 100 and len(list(recs)) == 10
    first, recs = chunk_records(header, data, 200)  # past the chunk: nothing left
    assert list(recs) == []


def test_version_and_tuning_helpers() -> None:
    assert parse_version("3.13.7") == (3, 13, 7)
    assert parse_version("4.0.0-beta.1") == (4, 0, 0)
    assert parse_version("3.10.8") < (3, 13) <= parse_version("3.13.0")
    assert parse_version("streamlet") == ()
    assert negotiate(0, 60) == 60 and negotiate(30, 0) == 30 and negotiate(30, 60) == 30
    assert negotiate(0, 0) == 0
    assert plain_credentials("u", "p\u00e9") == b"\0u\0p\xc3\xa9"


def test_streamlet_error_keeps_codes() -> None:
    e = StreamletError(2, "gone")
    assert e.code is Code.STREAM_DOES_NOT_EXIST and "gone" in str(e)
    unknown = StreamletError(999)
    assert unknown.code == 999
    assert isinstance(unknown, Exception)


def test_iter_records_mixes_simple_entries_and_sub_batches() -> None:
    """The consumer's decoder (storage.chunk.iter_records, with its inline fast path)."""
    def batch(records: list[bytes], gzipped: bool) -> bytes:
        inner = b"".join(struct.pack(">I", len(r)) + r for r in records)
        body = gzip.compress(inner) if gzipped else inner
        flags = 0x80 | ((1 if gzipped else 0) << 4)
        return struct.pack(">BHII", flags, len(records), len(inner), len(body)) + body

    data = (simple_entry(b"a") + batch([b"b", b"cc"], False) + simple_entry(b"")
            + batch([b"d"] * 3, True) + simple_entry(b"e"))
    assert [bytes(r) for r in iter_records(data)] == [b"a", b"b", b"cc", b"", b"d", b"d", b"d", b"e"]
    for bad in (data[:-1], data[:3], simple_entry(b"abc")[:5]):
        with pytest.raises(ChunkError):
            list(iter_records(bad))


class _Heads:
    """A header subscriber: keeps (chunk id, records) per chunk from the header bytes."""

    stream = "s"

    def __init__(self) -> None:
        self.seen: list[tuple[int, int]] = []
        self.closed: StreamletError | None = None

    def _on_chunk_header(self, frame: memoryview, pos: int) -> None:
        h = HEADER.unpack_from(frame, pos)
        self.seen.append((h[6], h[3]))

    def _on_consumer_update(self, correlation_id: int, active: bool) -> None:
        pass

    def _on_closed(self, exc: StreamletError) -> None:
        self.closed = exc


class _Chunks(_Heads):
    """An ordinary subscriber: the connection builds the header and slices the data."""

    def _on_chunk(self, header: ChunkHeader, data: memoryview) -> None:
        self.seen.append((header.chunk_id, header.num_records))
        assert bytes(data) == b"".join(simple_entry(b"m") for _ in range(header.num_records))


async def test_header_subscribers_get_the_header_position_in_v1_and_v2_delivers() -> None:
    conn = Connection(asyncio.get_running_loop())
    heads, chunks = _Heads(), _Chunks()
    conn.header_subscribers[1] = heads
    conn.subscribers[2] = chunks
    data = b""
    for i, (sub, version) in enumerate([(1, 1), (2, 1), (1, 2), (2, 2), (3, 1)]):
        body = simple_entry(b"m") * (i + 1)
        _, chunk = encode_chunk(body, chunk_id=10 * i, num_entries=i + 1, num_records=i + 1,
                                timestamp=0)
        data += frames.encode(frames.Deliver(sub, chunk, 7 if version == 2 else None,
                                             version=version))
    conn.data_received(data)  # subscription 3 is nobody's: its chunk is dropped
    assert heads.seen == [(0, 1), (20, 3)] and chunks.seen == [(10, 2), (30, 4)]
    conn._shutdown(ConnectionClosed(Code.OK, "closed by the client"))
    assert heads.closed is not None and not conn.header_subscribers
