"""Virtual hosts, per-user permissions and the TLS listener (SASL PLAIN and EXTERNAL), with
rstream and streamlet's client. Test certificates: tests/conftest.py's ``certs`` (openssl CLI)."""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import Callable
from pathlib import Path

import pytest
from rstream import Consumer as RConsumer
from rstream import Producer as RProducer
from rstream import RawMessage, SlasMechanism
from rstream.exceptions import AccessRefused, PublisherDoesNotExist, VirtualHostAccessFailure

from streamlet.client import StreamletError, connect
from streamlet.rabbitmq import Code
from tests.support.brokers import BrokerProcess, free_port

pytestmark = pytest.mark.process

CONFIG = '''
[[users]]
name = "admin"
password = "admin-pw"

[[users]]
name = "app"
password = "app-pw"

[[users]]
name = "reader"
password = "reader-pw"

[[vhosts]]
name = "/"

[[vhosts]]
name = "tenant"

[[permissions]]
user = "app"
vhost = "/"
configure = "^app-"
write = "^app-"
read = ".*"

[[permissions]]
user = "reader"
vhost = "/"
configure = ""
write = ""
read = "^shared$"
'''


@pytest.fixture
def access_broker(broker_factory: Callable[..., BrokerProcess], tmp_path: Path) -> BrokerProcess:
    cfg = tmp_path / "access.toml"
    cfg.write_text(CONFIG)
    return broker_factory(config=cfg)


async def _code(call) -> int:  # type: ignore[no-untyped-def]
    try:
        await call
    except StreamletError as e:
        return int(e.code)
    return int(Code.OK)


async def test_permissions_with_rstream(access_broker: BrokerProcess) -> None:
    b = access_broker
    async with RProducer(b.host, b.port, username="admin", password="admin-pw") as admin:
        await admin.create_stream("shared")
        await admin.create_stream("private")
        await admin.send_wait("shared", RawMessage(b"hello"))
    async with RProducer(b.host, b.port, username="app", password="app-pw") as app:
        await app.create_stream("app-orders")  # configure ^app-
        await app.send_wait("app-orders", RawMessage(b"order"))
        with pytest.raises(AccessRefused):
            await app.create_stream("orders")
        with pytest.raises(AccessRefused):
            await app.delete_stream("shared")
    # write only on ^app-: DeclarePublisher is refused with 16; rstream then deletes the publisher
    # it failed to declare, and raises that answer (18) instead
    app = RProducer(b.host, b.port, username="app", password="app-pw")
    await app.start()
    with pytest.raises((AccessRefused, PublisherDoesNotExist)):
        await app.send_wait("shared", RawMessage(b"not mine"))
    with contextlib.suppress(Exception):
        await app.close()
    # app may read everything in "/", but has no permissions in vhost "tenant"
    with pytest.raises(VirtualHostAccessFailure):
        async with RConsumer(b.host, b.port, vhost="tenant", username="app", password="app-pw") as c:
            await c.create_stream("x")


async def test_read_permission_and_vhosts(access_broker: BrokerProcess, tmp_path: Path) -> None:
    b = access_broker
    async with await connect(b.host, b.port, user="admin", password="admin-pw") as admin:
        await admin.create_stream("shared", exists_ok=True)
        await admin.create_stream("private", exists_ok=True)
    async with await connect(b.host, b.port, user="reader", password="reader-pw") as reader:
        assert await _code(reader.consumer("private")) == Code.ACCESS_REFUSED
        assert await _code(reader.query_offset("r", "private")) == Code.ACCESS_REFUSED
        assert await _code(reader.stream_stats("private")) == Code.ACCESS_REFUSED
        assert await _code(reader.producer("shared")) == Code.ACCESS_REFUSED  # write "" denies all
        assert await _code(reader.create_stream("shared-2")) == Code.ACCESS_REFUSED
        assert await _code(reader.create_super_stream("ss", ["ss-0"], ["0"])) == Code.ACCESS_REFUSED
        consumer = await reader.consumer("shared")
        await consumer.close()

    # streams are per vhost: the same name in "tenant" is another stream, in its own folder
    async with await connect(b.host, b.port, user="admin", password="admin-pw", vhost="tenant") as t:
        assert not await t.stream_exists("shared")
        await t.create_stream("shared")
        producer = await t.producer("shared")
        await producer.send(b"tenant-only")
        await t.create_super_stream("t-ss", ["t-ss-0"], ["0"])
    assert (b.data_dir / "vhosts" / "tenant" / "streams" / "shared" / "stream.json").is_file()
    assert (b.data_dir / "vhosts" / "tenant" / "superstreams.json").is_file()
    assert (b.data_dir / "streams" / "shared" / "stream.json").is_file()
    async with await connect(b.host, b.port, user="admin", password="admin-pw") as root:
        assert await root.stream_stats("shared") != {}  # untouched by the tenant's publish
        assert await _code(root.partitions("t-ss")) == Code.STREAM_DOES_NOT_EXIST
    with pytest.raises(StreamletError) as err:
        await connect(b.host, b.port, user="admin", password="admin-pw", vhost="nope")
    assert err.value.code == Code.VIRTUAL_HOST_ACCESS_FAILURE


# --- TLS ---------------------------------------------------------------------------------------


def _tls_broker(broker_factory: Callable[..., BrokerProcess], tmp_path: Path, d: Path,
                verify_peer: bool) -> tuple[BrokerProcess, int, Path]:
    """A TLS broker with the certificates ``d`` (tests/conftest.py's ``certs``)."""
    tls_port = free_port()
    cfg = tmp_path / "tls.toml"
    cfg.write_text(CONFIG + f'''
[tls]
port = {tls_port}
certfile = "{d / 'server.crt'}"
keyfile = "{d / 'server.key'}"
cafile = "{d / 'ca.crt'}"
verify_peer = {str(verify_peer).lower()}
''')
    return broker_factory(config=cfg), tls_port, d


@pytest.fixture
def tls_broker(broker_factory: Callable[..., BrokerProcess], tmp_path: Path,
               certs: Path) -> tuple[BrokerProcess, int, Path]:
    return _tls_broker(broker_factory, tmp_path, certs, verify_peer=False)


def _client_context(d: Path, with_cert: bool) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(d / "ca.crt"))
    if with_cert:
        ctx.load_cert_chain(d / "client.crt", d / "client.key")
    return ctx


async def test_tls_plain_and_external_with_rstream(tls_broker: tuple[BrokerProcess, int, Path]) -> None:
    b, tls_port, d = tls_broker
    # PLAIN over TLS
    async with RProducer(b.host, tls_port, username="admin", password="admin-pw",
                         ssl_context=_client_context(d, with_cert=False)) as p:
        await p.create_stream("app-tls")
        await p.send_wait("app-tls", RawMessage(b"over tls"))
    # EXTERNAL: the client certificate's CN (app) is the user, with app's permissions
    ctx = _client_context(d, with_cert=True)
    async with RProducer(b.host, tls_port, username="", password="", ssl_context=ctx,
                         sasl_configuration_mechanism=SlasMechanism.MechanismExternal) as p:
        await p.send_wait("app-tls", RawMessage(b"as app"))
        with pytest.raises(AccessRefused):
            await p.create_stream("not-app")
    # the plain listener still serves; EXTERNAL is not offered there
    async with await connect(b.host, b.port, user="admin", password="admin-pw") as c:
        stats = await c.stream_stats("app-tls")
        assert stats["last_chunk_id"] >= 1
    got = []
    async with await connect(b.host, tls_port, user="app", password="app-pw",
                             ssl=_client_context(d, with_cert=False)) as c:
        consumer = await c.consumer("app-tls")
        async for m in consumer:
            got.append(m.body)
            if len(got) == 2:
                break
    assert got == [b"over tls", b"as app"]


async def test_tls_verify_peer_requires_a_client_certificate(
        broker_factory: Callable[..., BrokerProcess], tmp_path: Path, certs: Path) -> None:
    b, tls_port, d = _tls_broker(broker_factory, tmp_path, certs, verify_peer=True)
    with pytest.raises((ssl.SSLError, ConnectionError, OSError, StreamletError)):
        c = await connect(b.host, tls_port, user="admin", password="admin-pw",
                          ssl=_client_context(d, with_cert=False), timeout=10)
        await c.stream_exists("x")  # TLS 1.3 may only report the refusal on first use
    async with await connect(b.host, tls_port, user="admin", password="admin-pw",
                             ssl=_client_context(d, with_cert=True)) as c:
        assert not await c.stream_exists("x")
