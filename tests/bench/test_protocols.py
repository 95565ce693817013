"""The protocols workload (bench/protocols.py): MEGA and RSIO load against a real streamlet
broker in --quick mode with exact counts, and the load's answer parsers fed bytes cut anywhere.
No timing is asserted."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from bench.protoload import MegaConsumer, MegaProducer, RsioSubscriber, SbpAppender, SbpFetcher
from bench.report import results_section, table, targets
from bench.workloads import Row
from streamlet.mega import ErrorCode, encode_error, encode_success
from streamlet.mega.codec import consumed, produced
from streamlet.rsio import (
    Message,
    OnComplete,
    OnNext,
    OnNextLastPart,
    OnNextPacked,
    OnNextPart,
    Position,
    encode,
)

REPO = Path(__file__).resolve().parents[2]


def cuts(data: bytes, rng: random.Random) -> list[bytes]:
    """``data`` in random pieces (as TCP may deliver it)."""
    out, at = [], 0
    while at < len(data):
        n = rng.randrange(1, 40)
        out.append(data[at : at + n])
        at += n
    return out


@pytest.mark.process
@pytest.mark.timeout(120)
def test_quick_protocols_run_counts_are_exact(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.run", "--quick", "--only", "streamlet", "--no-physical",
         "--workloads", "protocols", "--workdir", str(tmp_path), "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=110,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    rows = {r["workload"]: r for r in data["rows"]}
    runs = [(p, 100) for p in ("rabbitmq", "mega", "rsio", "sbp")] + [
        (p, 1000) for p in ("rabbitmq", "mega", "rsio", "sbp")]
    assert set(rows) == {f"{p}-{what}-{size}" for p, size in runs
                         for what in ("produce", "consume")}
    sizes = data["meta"]["sizes"]
    for p, size in runs:
        count = (max(sizes["proto_count"], sizes["sbp_bytes"] // size)
                 if p in ("rabbitmq", "mega", "rsio", "sbp") else sizes["proto_count"])
        pub = rows[f"{p}-produce-{size}"]
        assert (pub["sent"], pub["confirmed"], pub["errors"]) == (count, count, 0), (p, size)
        assert rows[f"{p}-consume-{size}"]["consumed"] == count, (p, size)
    assert all(r["exact"] and r["msg_s"] > 0 for r in rows.values())
    # each MEGA, RSIO and SBP row is compared with the RabbitMQ protocol's of its size
    assert sum("of the RabbitMQ protocol" in line for line in proc.stdout.splitlines()) == 12
    assert len([t for t in data["targets"] if "/ rabbitmq-" in t]) == 12
    # SBP's target (>= the RabbitMQ protocol), one line per size, met or not
    sbp = [t for t in data["targets"] if "SBP >= RabbitMQ protocol" in t]
    assert [t.split(" (")[0].split("at ")[1] for t in sbp] == ["100 B", "1,000 B"], sbp


async def test_mega_answers_cut_anywhere() -> None:
    rng = random.Random(7)
    prod = MegaProducer("t", 300, 10)
    stream = b"".join(encode_success(i + 1, 123, produced(i)) for i in range(299))
    stream += encode_error(300, ErrorCode.TOPIC_NOT_FOUND)
    for piece in cuts(stream, rng):
        prod.feed(piece)
    assert (prod.answered, prod.confirmed, prod.errors) == (300, 299, 1)
    assert prod.done.done() and prod.offsets_ok()  # the 299 successes got offsets 0..298
    twice = MegaProducer("t", 3, 10)  # an offset given twice is caught
    twice.feed(b"".join(encode_success(i + 1, 0, produced(o)) for i, o in enumerate((0, 2, 2))))
    assert twice.done.done() and twice.confirmed == 3 and not twice.offsets_ok()

    cons = MegaConsumer("t", 200)
    stream = b"".join(encode_success(i + 1, 5, consumed(b"x" * (i % 150))) for i in range(199))
    stream += encode_error(200, ErrorCode.INVALID_OFFSET)
    for piece in cuts(stream, rng):
        cons.feed(piece)
    assert (cons.records, cons.errors) == (199, 1)
    assert cons.data_bytes == sum(i % 150 for i in range(199)) and cons.done.done()


async def test_mega_answers_read_in_blocks_fall_back_where_the_layout_changes() -> None:
    prod = MegaProducer("t", 700, 10)
    answers = [encode_success(i + 1, 9, produced(i)) for i in range(699)]
    answers.insert(400, encode_error(700, ErrorCode.TOPIC_NOT_FOUND))
    prod.feed(b"".join(answers))  # whole: read in blocks, one by one from the error
    assert (prod.answered, prod.confirmed, prod.errors) == (700, 699, 1) and prod.offsets_ok()
    cons = MegaConsumer("t", 700, size=3)
    answers = [encode_success(i + 1, 5, consumed(b"x" * (3 if i != 500 else 7)))
               for i in range(699)]
    answers.insert(300, encode_error(700, ErrorCode.INVALID_OFFSET))
    cons.feed(b"".join(answers))
    assert (cons.records, cons.errors, cons.data_bytes) == (699, 1, 3 * 698 + 7)
    assert cons.done.done()


async def test_mega_consumer_patches_correlation_and_offset() -> None:
    cons = MegaConsumer("topic", 250, batch=100, window=200)
    sent: list[bytes] = []

    class Transport:
        def writelines(self, parts: list[bytes]) -> None:  # a write per batch of requests
            sent.extend(bytes(p) for p in parts)

    cons.transport = Transport()  # type: ignore[assignment]
    cons.start()
    assert len(sent) == 2  # the window holds two batches
    cons.feed(b"".join(encode_success(i + 1, 0, consumed(b"ab")) for i in range(100)))
    assert len(sent) == 3 and len(sent[2]) == 50 * cons.stride  # the last, shorter batch
    from streamlet.mega import MegaSplitter, decode_request
    requests = [decode_request(f) for f in MegaSplitter().feed(b"".join(sent))]
    assert [(r.correlation, r.offset, r.topic) for r in requests] == [
        (i + 1, i, b"topic") for i in range(250)]


async def test_rsio_subscriber_counts_every_kind_of_element() -> None:
    rng = random.Random(8)
    sub = RsioSubscriber("s", 10, demand=1000)
    sub.ready.set_result(None)  # past hello
    frames: list[Message] = [Position(1, 0), OnNext(1, b"abc"), OnNext(1, b"x" * 300),
              OnNextPacked(1, 3, b"123456789"), OnNextPart(1, 5, b"p" * 200),
              OnNextPart(1, 5, b"q" * 10), OnNextLastPart(1, 5, b"r"), Position(1, 9),
              OnNext(1, b""), OnComplete(1)]
    data = b"".join(encode(f) for f in frames)

    class Transport:
        def write(self, data: bytes) -> None:
            pass

    sub.transport = Transport()  # type: ignore[assignment]
    for piece in cuts(data, rng):
        sub.data_received(piece)
    assert sub.records == 1 + 1 + 3 + 1 + 1
    assert sub.data_bytes == 3 + 300 + 9 + 211 + 0
    assert sub.complete and sub.done.done() and sub.errors == 0


async def test_rsio_subscriber_counts_runs_of_its_size_a_column_at_a_time() -> None:
    rng = random.Random(9)
    frames: list[Message] = [Position(1, 0), *(OnNext(1, b"%03d" % i) for i in range(500)),
                             OnNext(1, b"long"), OnNextPacked(1, 2, b"abcdef"),
                             *(OnNext(1, b"%03d" % i) for i in range(300)), OnNext(1, b"xy"),
                             OnComplete(1)]
    data = b"".join(encode(f) for f in frames)

    class Transport:
        def write(self, data: bytes) -> None:
            pass

    for pieces, buffered in ((cuts(data, rng), False), ([data], False), (cuts(data, rng), True)):
        sub = RsioSubscriber("s", 10, demand=100_000, size=3)
        sub.ready.set_result(None)  # past hello
        sub.transport = Transport()  # type: ignore[assignment]
        for piece in pieces:
            if buffered:  # as the loop reads: into the subscriber's own buffer
                room = sub.get_buffer(len(piece))
                room[: len(piece)] = piece
                sub.buffer_updated(len(piece))
            else:
                sub.data_received(piece)
        assert sub.records == 500 + 1 + 2 + 300 + 1
        assert sub.data_bytes == 3 * 800 + 4 + 6 + 2
        assert sub.complete and sub.done.done() and sub.errors == 0


def test_protocols_is_in_the_default_run_and_streamlet_only() -> None:
    from bench.protocols import protocols
    from bench.run import parse_args
    from bench.servers import Server
    from bench.workloads import Sizes

    assert "protocols" in parse_args([]).workloads.split(",")
    # RabbitMQ speaks neither protocol: nothing is run (no connection is even tried)
    assert protocols(Server("rabbitmq", port=1), Sizes.quick()) == []


def test_the_report_compares_protocols_with_the_rabbitmq_protocol() -> None:
    def row(key: str, msg_s: float) -> Row:
        return Row(key, key, "streamlet", 100, 1000, sent=1000, confirmed=1000, seconds=1000 / msg_s)
    rows = [row("rabbitmq-produce-100", 1_000_000), row("mega-produce-100", 50_000),
            row("rsio-produce-100", 100_000)]
    text = table(rows)
    assert "0.05x msg/s of the RabbitMQ protocol" in text
    assert "0.1x msg/s of the RabbitMQ protocol" in text
    lines = targets(rows, {})
    assert any(line.startswith("INFO streamlet mega-produce-100 / rabbitmq-produce-100") and
               "0.05 (50,000 vs 1,000,000 msg/s)" in line for line in lines)
    section = results_section(rows, {}, {}, None)
    assert "Targets:" in section


def test_the_report_says_whether_sbp_met_its_target() -> None:
    def row(key: str, msg_s: float) -> Row:
        return Row(key, key, "streamlet", 100, 1000, sent=1000, confirmed=1000, seconds=1000 / msg_s)
    rows = [row("rabbitmq-produce-100", 1000), row("rabbitmq-consume-100", 1000),
            row("sbp-produce-100", 2000), row("sbp-consume-100", 999),
            row("rabbitmq-produce-1000", 100), row("rabbitmq-consume-1000", 100),
            row("sbp-produce-1000", 100), row("sbp-consume-1000", 150)]
    lines = targets(rows, {})
    assert "MISS SBP >= RabbitMQ protocol at 100 B (same broker, same run): produce 2.00x, " \
           "consume 1.00x" in lines  # 0.999 is short of it
    assert any(line.startswith("MET  SBP >= RabbitMQ protocol at 1,000 B") for line in lines)
    assert "Targets:" in results_section(rows, {}, {}, None)


def _sbp_frame(sid: int, flags: int, header: bytes, payload: bytes = b"") -> bytes:
    from streamlet.sbp import Opcode
    from streamlet.sbp import encode as sbp_encode
    return sbp_encode(Opcode.APPEND, flags, sid, header, payload)


class _Sink:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.sent.append(bytes(data))

    def writelines(self, parts: list[bytes]) -> None:
        self.sent.append(b"".join(parts))


async def test_sbp_appender_reads_answers_cut_anywhere() -> None:
    from streamlet.sbp import LAST, Flags
    from streamlet.sbp.flat import append_response

    rng = random.Random(9)
    app = SbpAppender("s", 250, 10, per_frame=100, window=200)
    sink = app.transport = _Sink()  # type: ignore[assignment]
    app.start()
    assert len(sink.sent) == 2  # the window: 2 frames
    # frame 1 answered over two frames, out of order; frame 2 at once
    data = (_sbp_frame(1, Flags.RESPONSE, append_response([(list(range(50, 100)), 0, 50, 1)]))
            + _sbp_frame(2, LAST, append_response([(list(range(100)), 0, 100, 1)]))
            + _sbp_frame(1, LAST, append_response([(list(range(50)), 0, 0, 1)])))
    for piece in cuts(data, rng):
        app.data_received(piece)
    assert app.answered == 200 and len(sink.sent) == 3
    app.data_received(_sbp_frame(3, LAST, append_response([(list(range(50)), 0, 200, 1)])))
    assert app.done.done() and app.confirmed == 250 and app.offsets_ok() and not app.errors


async def test_sbp_fetcher_checks_offsets_and_bytes() -> None:
    from streamlet.sbp import LAST, Opcode
    from streamlet.sbp import encode as sbp_encode
    from streamlet.sbp.flat import fetch_prefixed_response

    def answer(records: list[tuple[int, bytes]], total: int | None = None) -> bytes:
        runs: list[tuple[int, int]] = []
        for o, _ in records:  # consecutive offsets make one run, as the broker's answer
            if runs and sum(runs[-1]) == o:
                runs[-1] = (runs[-1][0], runs[-1][1] + 1)
            else:
                runs.append((o, 1))
        data = b"".join(len(b).to_bytes(4, "big") + b for _, b in records)  # length-prefixed
        return sbp_encode(Opcode.FETCH, LAST, 1, fetch_prefixed_response(
            [(0, 7, runs, [len(data) if total is None else total] if len(runs) == 1
              else [4 + len(b) for _, b in records])]), data)

    def feed(proto: SbpFetcher, data: bytes) -> None:  # as the event loop gives a buffered one
        while data:
            buf = proto.get_buffer(-1)
            n = min(len(buf), len(data))
            buf[:n] = data[:n]
            proto.buffer_updated(n)
            data = data[n:]

    rng = random.Random(10)
    fetch = SbpFetcher("s", 5)
    sink = fetch.transport = _Sink()  # type: ignore[assignment]
    fetch.start()
    for piece in cuts(answer([(0, b"ab"), (1, b"cde"), (2, b"")]), rng):
        feed(fetch, piece)
    assert (fetch.records, fetch.data_bytes, fetch.next_offset) == (3, 5, 3)
    assert len(sink.sent) == 2  # asked from 3
    feed(fetch, answer([(3, b"f"), (4, b"g")]))
    assert fetch.done.done() and fetch.records == 5 and not fetch.errors

    gap = SbpFetcher("s", 5)
    gap.transport = _Sink()  # type: ignore[assignment]
    gap.start()
    feed(gap, answer([(0, b"a"), (2, b"b")]))  # offset 1 missing: caught
    assert gap.errors == 1 and "a run from 2, expected 1" in gap.server_errors[0]

    short = SbpFetcher("s", 5)
    short.transport = _Sink()  # type: ignore[assignment]
    short.start()
    feed(short, sbp_encode(Opcode.FETCH, LAST, 1, fetch_prefixed_response(
        [(0, 7, [(0, 1)], [6])]), b"\0\0\0\1a"))  # a result of 6 bytes, a payload of 5
    assert short.errors == 1 and "a payload of 5" in short.server_errors[0]

    wrong = SbpFetcher("s", 5)
    wrong.transport = _Sink()  # type: ignore[assignment]
    wrong.start()
    feed(wrong, answer([(0, b""), (1, b"")], total=7))  # two batches cannot be in 7 bytes
    assert wrong.errors == 1 and "2 length-prefixed batches in 7 bytes" in wrong.server_errors[0]
