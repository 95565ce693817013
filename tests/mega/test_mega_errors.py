"""The two MEGA error codes a healthy single broker does not give on its own, made to happen on a
real broker process: NETWORK_ERROR (8) for a PRODUCE to a stream the stream directory says
another broker holds, and INTERNAL_ERROR (7) for a CREATE_TOPIC whose directory cannot be
made. Both leave the connection serving. (test_mega.py sends every other code.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streamlet.client.mega import MegaClient, MegaError
from streamlet.core.names import dir_name
from streamlet.mega import ErrorCode
from tests.mega.test_mega import _mega_broker, client, expect
from tests.support.waiting import eventually

pytestmark = pytest.mark.process


async def produce_code(c: MegaClient, topic: str, body: bytes) -> ErrorCode | int | None:
    """None when the produce succeeded, else its error code."""
    try:
        await c.produce(topic, body)
    except MegaError as e:
        return e.code
    return None


async def test_network_error_for_a_stream_held_elsewhere(tmp_path: Path) -> None:
    directory = tmp_path / "streams.json"
    directory.write_text(json.dumps({"streams": {}}))
    b = _mega_broker(tmp_path, f'[cluster]\ndirectory_file = "{directory}"\n')
    b.start()
    try:
        here = f"127.0.0.1:{b.port}"
        directory.write_text(json.dumps({"streams": {"m-moved": here}}))
        async with await client(b) as c:
            await c.create_topic("m-moved")
            assert await c.produce("m-moved", b"kept") == 0
            # the directory now names another broker: MEGA has no redirection, so 8
            directory.write_text(json.dumps({"streams": {"m-moved": "elsewhere:5552"}}))

            # (the broker re-reads the directory about once a second: until then it takes them)
            taken_before = 0

            async def refused() -> bool:
                nonlocal taken_before
                code = await produce_code(c, "m-moved", b"before the switch was seen")
                taken_before += code is None
                return code == ErrorCode.NETWORK_ERROR
            await eventually(refused, 30, "PRODUCE answered NETWORK_ERROR")
            assert (await c.consume("m-moved", 0))[1] == b"kept"  # reads go on
            end = 1 + taken_before
            await expect(ErrorCode.INVALID_OFFSET, c.consume("m-moved", end))  # none taken since

            directory.write_text(json.dumps({"streams": {"m-moved": here}}))  # moved back

            async def taken() -> bool:
                return await produce_code(c, "m-moved", b"again") is None
            await eventually(taken, 30, "PRODUCE taken again")
            assert (await c.consume("m-moved", end))[1] == b"again"
    finally:
        b.stop()


async def test_internal_error_when_a_create_fails(tmp_path: Path) -> None:
    b = _mega_broker(tmp_path)
    b.start()
    try:
        async with await client(b) as c:
            await c.create_topic("m-probe")
            (probe,) = [p for p in b.data_dir.rglob(dir_name("m-probe")) if p.is_dir()]
            # a file where the stream's directory must go: the create fails on the disk
            blocker = probe.parent / dir_name("m-broken")
            blocker.write_bytes(b"not a directory")
            await expect(ErrorCode.INTERNAL_ERROR, c.create_topic("m-broken"))
            await expect(ErrorCode.TOPIC_NOT_FOUND, c.produce("m-broken", b"x"))  # no stream
            assert await c.produce("m-probe", b"still serving") == 0
            blocker.unlink()
            await c.create_topic("m-broken")
            assert await c.produce("m-broken", b"x") == 0
        assert "m-broken" in b.log_text()
    finally:
        b.stop()
