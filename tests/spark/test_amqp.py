"""format=amqp: AMQP 1.0 messages as rstream publishes them by default, decoded."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from rstream import AMQPMessage, Producer
from rstream._pyamqp.message import Properties  # type: ignore[attr-defined]

from streamlet.amqp import AmqpError, decode_message, decode_value
from tests.spark.helpers import publish
from tests.support.brokers import BrokerProcess


def _message(i: int) -> AMQPMessage:
    return AMQPMessage(
        body=b"payload-%d" % i,
        properties=Properties(message_id=f"id-{i}", subject="greeting",
                                   content_type="text/plain"),
        application_properties={"n": i, "kind": "even" if i % 2 == 0 else "odd"},
    )


def test_decoder_reads_rstream_encoding() -> None:
    msg = decode_message(bytes(_message(7)))
    assert msg.body == b"payload-7"
    assert msg.properties["message_id"] == "id-7" and msg.properties["subject"] == "greeting"
    assert msg.properties["content_type"] == "text/plain"
    assert msg.application_properties == {"n": 7, "kind": "odd"}
    with pytest.raises(AmqpError):
        decode_message(b"\x00\x53\x75\xa0\x05ab")  # a data section cut short
    assert decode_value(b"\xd1\x00\x00\x00\x09\x00\x00\x00\x02\xa1\x01k\x55\x05") == {"k": 5}


@pytest.mark.process
def test_amqp_format_read(spark: Any, shared_broker: BrokerProcess) -> None:
    port = shared_broker.port
    publish(port, "amqp-in", [], create=True)

    async def produce() -> None:
        async with Producer("127.0.0.1", port, username="guest", password="guest") as p:
            await p.send_batch("amqp-in", [_message(i) for i in range(50)])
    asyncio.run(produce())
    publish(port, "amqp-in", [b"not amqp"], create=False)  # kept, but not decoded
    rows = (spark.read.format("streamlet").option("port", str(port)).option("stream", "amqp-in")
            .option("format", "amqp").load().orderBy("offset").collect())
    assert len(rows) == 51
    for i, r in enumerate(rows[:50]):
        assert bytes(r.body) == b"payload-%d" % i
        assert r.properties["message_id"] == f"id-{i}"
        assert r.application_properties == {"n": str(i), "kind": "even" if i % 2 == 0 else "odd"}
        assert bytes(r.value) == bytes(_message(i))
    assert rows[50].body is None and bytes(rows[50].value) == b"not amqp"
