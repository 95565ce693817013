"""`make soak`'s harness with tiny counts against a real broker: every phase runs, passes and
reports its figures. Only counts are asserted (never timings: a loaded machine is slow)."""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from bench.soak.fuzz_stream import StreamFuzzer
from streamlet.rabbitmq import frames as f

REPO = Path(__file__).resolve().parents[2]


def test_stream_fuzzer_sessions_are_frames() -> None:
    """The generator never raises and keeps to its count; unmutated sessions decode."""
    fuzzer = StreamFuzzer()
    rng = random.Random(7)
    for i in range(2_000):
        opened, rate = bool(i % 2), (0.0, 0.3, 1.0)[i % 3]
        frames, mutated = fuzzer.session(rng, opened, 20, rate)
        assert len(frames) == 20 and all(isinstance(b, bytes) and b for b in frames)
        assert mutated == 0 if rate == 0.0 else 0 <= mutated <= 20
        if rate == 0.0:
            for b in frames:
                assert not isinstance(f.decode(b[4:]), f.FrameError), b[:16]


@pytest.mark.process
@pytest.mark.timeout(150)
def test_tiny_soak_passes(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.soak", "--fuzz-frames", "2000", "--connections", "50", "--rss-wait", "0",
         "--hold-seconds", "2", "--kills", "1", "--seed", "1", "--workdir", str(tmp_path / "w"),
         "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=140,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    phases = {p["name"]: p for p in data["phases"]}
    assert list(phases) == ["fuzz", "hold", "kills"] and data["ok"]
    fuzz, hold, kills = phases["fuzz"]["figures"], phases["hold"]["figures"], phases["kills"]["figures"]
    assert fuzz["frames_stream"] >= 2000 and fuzz["connections"] > 0 and fuzz["bystander_msgs"] > 0
    assert hold["connections"] == hold["answered_at_end"] == 50 and hold["bystander_msgs"] > 0
    assert hold["rss_returned_mb"] > 0 and hold["returned_s"] >= 0  # the storm rule was checked
    assert kills["kills"] == 1 and kills["stored"] >= kills["confirmed"] > 0
    assert all(p["rss_start"] > 0 and p["rss_end"] > 0 for p in data["phases"])
    assert "| kills | ok |" in proc.stdout


@pytest.mark.process
@pytest.mark.timeout(90)
def test_kill_check_catches_a_repeated_message(tmp_path: Path) -> None:
    """The checker is not vacuous: a message stored twice (or a confirmed one missing) fails."""
    from bench.soak.common import Broker
    from bench.soak.kills import Publisher, SoakFailure, _verify
    from streamlet.client import connect

    async def scenario(port: int) -> list[str]:
        repeated, short = Publisher(0, "t"), Publisher(1, "t")  # one stream each
        client = await connect("127.0.0.1", port)
        for pub, ids in ((repeated, [1, 2, 2]), (short, [1, 2])):
            await client.create_stream(pub.stream)
            producer = await client.producer(pub.stream)
            await producer.send_many([pub.body(i) for i in ids])
            await producer.flush()
        await client.close()
        short.confirmed = 5  # as if 5 had been confirmed: 3 are missing
        failures = []
        for pub in (repeated, short):
            try:
                await _verify(port, [pub], None)
            except SoakFailure as e:
                failures.append(str(e))
        return failures

    broker = Broker(tmp_path).start()
    try:
        failures = asyncio.run(scenario(broker.port))
    finally:
        broker.stop()
    assert len(failures) == 2
    assert "after publisher 0's message 2" in failures[0] and "repeated" in failures[0]
    assert "publisher 1 had 5 confirmed, only 2 are in the stream" in failures[1]
