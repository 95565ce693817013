"""The bytes StreamLog writes, checked field by field against the Osiris layout."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest

from streamlet.storage import LogConfig, StreamLog
from streamlet.storage.chunk import ChunkHeader, iter_records, simple_entry


def entries(*bodies: bytes) -> bytes:
    return b"".join(simple_entry(b) for b in bodies)


def seg_bytes(d: Path, seg_id: int = 0) -> bytes:
    return (d / f"{seg_id:020d}.segment").read_bytes()


def idx_bytes(d: Path, seg_id: int = 0) -> bytes:
    return (d / f"{seg_id:020d}.index").read_bytes()


def test_new_log_files_have_osiris_headers(tmp_path: Path) -> None:
    log = StreamLog(tmp_path / "s")
    log.close()
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == [
        "00000000000000000000.index", "00000000000000000000.segment"]
    assert seg_bytes(tmp_path / "s") == b"OSIL\x00\x00\x00\x01"
    assert idx_bytes(tmp_path / "s") == b"OSII\x00\x00\x00\x01"


def test_user_chunk_field_by_field(tmp_path: Path) -> None:
    d = tmp_path / "s"
    data = entries(b"hello", b"world!")
    bloom = bytes(range(16))
    with StreamLog(d) as log:
        ref = log.append(data, 2, 2, writer_sequences={"pub": 7}, timestamp=1_700_000_000_123,
                         bloom=bloom)
    raw = seg_bytes(d)
    assert raw[:8] == b"OSIL" + struct.pack(">I", 1)
    h = raw[8:56]
    assert h[0] == 0x50  # magic 5, version 0
    assert h[1] == 0  # user chunk
    assert struct.unpack(">H", h[2:4])[0] == 2  # entries
    assert struct.unpack(">I", h[4:8])[0] == 2  # records
    assert struct.unpack(">q", h[8:16])[0] == 1_700_000_000_123
    assert struct.unpack(">Q", h[16:24])[0] == 1  # epoch
    assert struct.unpack(">Q", h[24:32])[0] == 0  # chunk id
    assert struct.unpack(">I", h[32:36])[0] == zlib.crc32(data)
    assert struct.unpack(">I", h[36:40])[0] == len(data)
    trailer = b"\x00\x03pub" + struct.pack(">Q", 7)
    assert struct.unpack(">I", h[40:44])[0] == len(trailer)
    assert h[44] == 16  # bloom size
    assert h[45:48] == b"\x00\x00\x00"
    assert raw[56:72] == bloom
    assert raw[72 : 72 + len(data)] == data
    assert raw[72 + len(data) :] == trailer
    assert (ref.chunk_id, ref.num_records, ref.chunk_type, ref.segment, ref.pos) == (0, 2, 0, 0, 8)
    assert (ref.size, ref.bloom_size, ref.data_length) == (len(raw) - 8, 16, len(data))
    # index: header then one 29-byte record ChunkId, Timestamp, Epoch, FilePos, ChunkType
    idx = idx_bytes(d)
    assert idx[:8] == b"OSII" + struct.pack(">I", 1)
    assert len(idx) == 8 + 29
    assert struct.unpack(">QqQIB", idx[8:]) == (0, 1_700_000_000_123, 1, 8, 0)


def test_read_chunks_returns_header_and_data_only(tmp_path: Path) -> None:
    d = tmp_path / "s"
    with StreamLog(d) as log:
        a = log.append(entries(b"a" * 10), 1, 1, writer_sequences={"p": 1})
        b = log.append(entries(b"b" * 20, b"c"), 2, 2, bloom=b"\xff" * 16,
                       writer_sequences={"p": 3})
        got = log.read_chunks(a)
        assert [r for r, _ in got] == [a, b]
        raw = seg_bytes(d)
        for ref, view in got:
            whole = raw[ref.pos : ref.pos + ref.size]
            assert bytes(view) == whole[:48] + whole[48 + ref.bloom_size :
                                                     48 + ref.bloom_size + ref.data_length]
            header = ChunkHeader.unpack(view)
            assert header.chunk_id == ref.chunk_id and header.data_length == ref.data_length
            assert header.trailer_length > 0  # the header still states the trailer size
        assert [bytes(r) for r in iter_records(got[1][1][48:])] == [b"b" * 20, b"c"]
        assert log.read_bloom(b) == b"\xff" * 16
        assert log.read_bloom(a) == b""


def test_tracking_delta_chunk_takes_one_offset(tmp_path: Path) -> None:
    d = tmp_path / "s"
    with StreamLog(d) as log:
        log.append(entries(b"x"), 1, 1)
        log.store_offset("consumer-1", 0)
        assert log.next_offset == 2
        r = log.append(entries(b"y"), 1, 1)
        assert r.chunk_id == 2
    raw = seg_bytes(d)
    pos = 8 + 48 + 5  # after the first chunk
    h = ChunkHeader.unpack(raw, pos)
    assert (h.chunk_type, h.num_entries, h.num_records, h.chunk_id) == (1, 1, 1, 1)
    assert (h.trailer_length, h.bloom_size, h.epoch) == (0, 0, 1)
    body = b"\x01\x0aconsumer-1" + struct.pack(">Q", 0)
    assert raw[pos + 48 : pos + 48 + h.data_length] == struct.pack(">I", len(body)) + body
    assert h.data_crc == zlib.crc32(raw[pos + 48 : pos + 48 + h.data_length])
    idx = idx_bytes(d)
    assert [struct.unpack_from(">QqQIB", idx, 8 + 29 * i)[4] for i in range(3)] == [0, 1, 0]
    assert struct.unpack_from(">QqQIB", idx, 8 + 29)[3] == pos


def test_snapshot_opens_each_new_segment(tmp_path: Path) -> None:
    d = tmp_path / "s"
    cfg = LogConfig(max_segment_chunks=2)
    with StreamLog(d, cfg) as log:
        log.append(entries(b"a"), 1, 1, writer_sequences={"w": 10})  # chunk 0
        log.store_offset("c", 0)  # chunk 1
        log.append(entries(b"b"), 1, 1, writer_sequences={"w": 11})  # roll: snapshot 2, chunk 3
    assert sorted(p.name for p in d.iterdir())[-1] == "00000000000000000002.segment"
    raw = seg_bytes(d, 2)
    h = ChunkHeader.unpack(raw, 8)
    assert (h.chunk_type, h.num_entries, h.num_records, h.chunk_id) == (2, 1, 1, 2)
    data = raw[56 : 56 + h.data_length]
    (n,) = struct.unpack(">I", data[:4])
    assert n == len(data) - 4
    # sequence record: 0, IdLen, Id, ChunkId u64 (chunk that stored it), Sequence u64
    seq = b"\x00\x01w" + struct.pack(">QQ", 0, 10)
    off = b"\x01\x01c" + struct.pack(">Q", 0)
    assert data[4:] in (seq + off, off + seq)
    user = ChunkHeader.unpack(raw, 8 + h.size)
    assert (user.chunk_type, user.chunk_id) == (0, 3)


def test_rstream_decodes_a_deliver_built_from_read_chunks(tmp_path: Path) -> None:
    """A real client's decoder accepts the stored chunk as a Deliver frame, CRC included."""
    encoding = pytest.importorskip("rstream.encoding")
    bodies = [b"first", b"", b"third" * 100]
    with StreamLog(tmp_path / "s") as log:
        log.append(entries(b"skip"), 1, 1)
        log.store_offset("c", 0)
        ref = log.append(entries(*bodies), 3, 3, writer_sequences={"p": 3}, bloom=b"\x01" * 16)
        ((got, view),) = log.read_chunks(ref)
    frame = encoding.decode_frame(struct.pack(">HHB", 8, 1, 7) + bytes(view))
    assert frame.subscription_id == 7
    assert frame.chunk_first_offset == ref.chunk_id == 2
    assert (frame.num_entries, frame.num_records, frame.epoch) == (3, 3, 1)
    assert frame.get_messages() == bodies


def test_crc32_is_zlibs_whichever_implementation() -> None:
    """Chunk CRCs come from zlib-ng when it is installed, else zlib: the same numbers, whole
    or continued part by part (a chunk's batches are CRC'd as they came)."""
    import random
    import zlib

    from streamlet.storage import chunk

    rng = random.Random(7)
    for size in (0, 1, 15, 16, 17, 255, 4096, 65_537, 1 << 20):
        data = rng.randbytes(size)
        assert chunk.crc32(data) == zlib.crc32(data)
        assert chunk.crc32(memoryview(data)[1:]) == zlib.crc32(data[1:])
        cut = size // 3
        assert chunk.crc32(data[cut:], chunk.crc32(data[:cut])) == zlib.crc32(data)
