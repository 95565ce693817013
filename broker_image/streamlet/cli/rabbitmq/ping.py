"""`streamlet ping`'s line, and what answers on a port that does not speak the RabbitMQ Stream
protocol.

:func:`server_line` labels what the server announces: its product and version, and for
streamlet (which announces RabbitMQ's version, as clients gate features on it) its own version
beside the RabbitMQ version it announces. When the handshake fails without an answer the
protocol defines (the peer closed, sent what is not a frame, or said nothing),
:func:`what_answers` connects again and looks: an HTTP server (it answers a GET), TLS, AMQP,
or the first bytes the peer sent; :func:`identify` (pure) names them."""

from __future__ import annotations

import asyncio
import contextlib
import re
import struct

from ...rabbitmq import Key, frames
from ...rabbitmq.constants import RESPONSE_FLAG
from ...rabbitmq.frames import encode

#: seconds a probe waits for the peer's answer
PROBE_S = 2.0
#: bytes of an unknown answer shown
SHOWN = 16

_KEY = struct.Struct(">H")
#: a run of text in an answer (a reason a peer gave, in its own protocol)
_TEXT = re.compile(rb"[ -~]{12,}")
_PEER_PROPERTIES_RESPONSE = Key.PEER_PROPERTIES | RESPONSE_FLAG


def server_line(props: dict[str, str]) -> str:
    """``streamlet 0.1.0 (announcing RabbitMQ 3.13.0)``, ``RabbitMQ 3.13.7``."""
    product = props.get("product") or "a server without a product name"
    own = props.get("streamlet_version")
    version = props.get("version", "")
    if own:
        return f"{product} {own}" + (f" (announcing RabbitMQ {version})" if version else "")
    return f"{product} {version}".rstrip()


def identify(handshake: bytes, http: bytes) -> str | None:
    """What a peer is, from its answer to a PeerProperties frame (``handshake``) and to an HTTP
    GET on another connection (``http``); bytes not answered are empty. None when it answered
    as a RabbitMQ Stream server does (its failure is another one)."""
    if len(handshake) >= 6 and _KEY.unpack_from(handshake, 4)[0] == _PEER_PROPERTIES_RESPONSE:
        return None
    if http.startswith(b"HTTP/"):
        status = http.split(b"\r\n", 1)[0].decode("latin-1")
        server = next((line.split(b":", 1)[1].strip().decode("latin-1")
                       for line in http.split(b"\r\n")[1:]
                       if line.lower().startswith(b"server:")), "")
        return (f"an HTTP server answers there ({status}{f', {server}' if server else ''}): "
                "a management API or metrics port?")
    if handshake[:1] in (b"\x15", b"\x16") and handshake[1:2] == b"\x03":
        return "a TLS listener answers there: add --tls"
    if handshake.startswith(b"AMQP"):
        return "an AMQP listener answers there (RabbitMQ's AMQP port; its stream port is 5552)"
    if handshake:
        shown = handshake[:SHOWN].hex(" ") + (" ..." if len(handshake) > SHOWN else "")
        texts = sorted(_TEXT.findall(handshake), key=len)
        saying = f", saying {texts[-1].decode()!r}" if texts else ""
        return (f"it answered {len(handshake)} bytes that are not a frame of it "
                f"({shown}){saying}")
    return "no answer to its handshake"


async def _answer(host: str, port: int, send: bytes) -> bytes:
    """What the peer sends back to ``send`` within PROBE_S (until it closes), or b""."""
    got = b""
    with contextlib.suppress(OSError, TimeoutError):
        async with asyncio.timeout(PROBE_S):
            reader, writer = await asyncio.open_connection(host, port)
            try:
                writer.write(send)
                while len(got) < 4096 and (data := await reader.read(4096)):
                    got += data
            finally:
                writer.close()
    return got


async def what_answers(host: str, port: int) -> str | None:
    """A line saying that ``host:port`` does not speak the RabbitMQ Stream protocol, and what
    was found there; None when a new connection is answered as that protocol answers."""
    hello = encode(frames.PeerProperties(1, {"product": "streamlet-ping"}))
    handshake, http = await asyncio.gather(
        _answer(host, port, hello),
        _answer(host, port, f"GET / HTTP/1.0\r\nHost: {host}\r\n\r\n".encode()))
    found = identify(handshake, http)
    if found is None:
        return None
    return f"{host}:{port} does not speak the RabbitMQ Stream protocol: {found}"
