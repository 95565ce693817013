"""Daily use: `streamlet ping`, and credentials kept off the command line (a password file,
the environment), in the order --password, --password-file, $STREAMLET_PASSWORD, guest."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.brokers import BrokerProcess, free_port

from .support import cli, conn, stderr_line, wait_until

pytestmark = pytest.mark.process


def test_ping_answers_with_the_server_and_the_time(shared_broker: BrokerProcess) -> None:
    r = cli("ping", *conn(shared_broker))
    line = r.stdout.decode().strip()
    assert line.startswith(f"ping {shared_broker.host}:{shared_broker.port}: streamlet ")
    assert line.endswith(" ms") and r.returncode == 0


def test_ping_says_why_it_failed() -> None:
    port = free_port()
    r = cli("ping", "--port", str(port), "--timeout", "5", check=False)
    assert r.returncode == 1 and r.stdout == b""
    assert stderr_line(r.stderr).startswith(f"streamlet: cannot connect to 127.0.0.1:{port}")


def test_credentials_from_a_file_or_the_environment(shared_broker: BrokerProcess,
                                                    tmp_path: Path) -> None:
    c = conn(shared_broker)
    wrong, right = tmp_path / "wrong", tmp_path / "right"
    wrong.write_text("not-the-password\n")
    right.write_text("guest\n")
    assert cli("ping", *c, env={"STREAMLET_PASSWORD": "guest"}).returncode == 0
    refused = cli("ping", *c, env={"STREAMLET_PASSWORD": "nope"}, check=False)
    assert refused.returncode == 1 and b"AUTHENTICATION" in refused.stderr.upper()
    # the file wins over the environment, a flag over both
    assert cli("ping", *c, "--password-file", str(right),
               env={"STREAMLET_PASSWORD": "nope"}).returncode == 0
    assert cli("ping", *c, "--password-file", str(wrong), check=False).returncode == 1
    assert cli("ping", *c, "--password", "guest", "--password-file", str(wrong)).returncode == 0
    # the user too
    assert cli("ping", *c, env={"STREAMLET_USER": "nobody"}, check=False).returncode == 1
    missing = cli("ping", *c, "--password-file", str(tmp_path / "none"), check=False)
    assert missing.returncode == 2 and b"--password-file" in missing.stderr


async def test_format_amqp_both_ways_with_rstream(shared_broker: BrokerProcess) -> None:
    """--format amqp: what the CLI sends, rstream's AMQP decoder reads; what rstream publishes
    (AMQP 1.0), the CLI prints as its body; a raw message is printed as stored, with a warning."""
    import asyncio

    from rstream import (
        AMQPMessage,
        Consumer,
        ConsumerOffsetSpecification,
        OffsetType,
        Producer,
        amqp_decoder,
    )

    b = shared_broker
    c = conn(b)
    cli("produce", *c, "amqp-in", "--create", "--format", "amqp", stdin=b"alpha\nbeta\n")
    got: list[bytes] = []
    consumer = Consumer(b.host, b.port, username="guest", password="guest")
    await consumer.start()
    await consumer.subscribe("amqp-in", lambda msg, ctx: got.append(bytes(msg.body)),
                             decoder=amqp_decoder,
                             offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST))
    for _ in range(300):
        if len(got) >= 2:
            break
        await asyncio.sleep(0.1)
    await consumer.close()
    assert got == [b"alpha", b"beta"]

    async with Producer(b.host, b.port, username="guest", password="guest") as producer:
        await producer.create_stream("amqp-out", exists_ok=True)
        await producer.send_wait("amqp-out", AMQPMessage(body=b"from rstream"))
    out = cli("consume", *c, "amqp-out", "--format", "amqp", "--count", "1")
    assert out.stdout == b"0\tfrom rstream\n"

    cli("produce", *c, "raw-in", "--create", stdin=b"plain\n")
    raw = cli("consume", *c, "raw-in", "--format", "amqp", "--count", "1")
    assert raw.stdout == b"0\tplain\n" and b"not AMQP 1.0" in raw.stderr
    refused = cli("produce", *c, "x", "--protocol", "mega", "--format", "amqp", check=False)
    assert refused.returncode == 2 and b"--format amqp" in refused.stderr


def test_a_second_broker_on_the_same_data_directory_is_refused(tmp_path: Path) -> None:
    first = BrokerProcess(tmp_path / "data", port=free_port()).start()
    try:
        second = cli("serve", "--port", str(free_port()), "--data-dir", str(tmp_path / "data"),
                     check=False)
        assert second.returncode == 2
        assert stderr_line(second.stderr) == (
            f"streamlet: another broker (pid {first.pid}) serves from {tmp_path / 'data'}: one "
            "broker per data directory")
        assert first.alive()
    finally:
        first.stop()
    # once it stopped, the directory is free again
    again = BrokerProcess(tmp_path / "data", port=free_port()).start()
    again.stop()


def test_tls_and_external_from_the_cli(broker_factory: Callable[..., BrokerProcess],
                                       tmp_path: Path, certs: Path) -> None:
    """--tls with --ca-cert (the server verified), PLAIN over it, and EXTERNAL with --cert:
    the certificate's CN (app) is the user, with app's permissions."""
    from tests.broker.test_access import _tls_broker

    b, tls_port, d = _tls_broker(broker_factory, tmp_path, certs, verify_peer=False)
    tls = ["--host", b.host, "--port", str(tls_port), "--tls", "--ca-cert", str(d / "ca.crt")]
    cli("produce", *tls, "--user", "admin", "--password", "admin-pw", "app-cli", "--create",
        stdin=b"over tls\n")
    external = [*tls, "--cert", str(d / "client.crt"), "--key", str(d / "client.key"),
                "--sasl-mechanism", "EXTERNAL"]
    cli("produce", *external, "app-cli", stdin=b"as app\n")
    out = cli("consume", *external, "app-cli", "--count", "2")
    assert out.stdout == b"0\tover tls\n1\tas app\n"
    refused = cli("streams", *external, "create", "not-app", check=False)
    assert refused.returncode == 1 and b"ACCESS_REFUSED" in refused.stderr
    # the server's certificate is checked: without the CA it is refused, in one line
    untrusted = cli("ping", "--host", b.host, "--port", str(tls_port), "--tls", check=False)
    assert untrusted.returncode == 1
    assert stderr_line(untrusted.stderr).startswith(f"streamlet: TLS with {b.host}:{tls_port} failed")
    misuse = cli("ping", "--cert", str(d / "client.crt"), check=False)
    assert misuse.returncode == 2 and b"--cert: only with --tls" in misuse.stderr


def test_produce_to_a_super_stream_by_routing_key(shared_broker: BrokerProcess) -> None:
    c = conn(shared_broker)
    cli("streams", *c, "create-super", "regions", "--binding-keys", "eu,us")
    cli("produce", *c, "regions", "--routing-key", "us", stdin=b"to us\n")
    assert cli("consume", *c, "regions-us", "--count", "1").stdout == b"0\tto us\n"
    assert cli("consume", *c, "regions-eu", "--timeout", "1").stdout == b""
    nowhere = cli("produce", *c, "regions", "--routing-key", "asia", stdin=b"x\n", check=False)
    assert nowhere.returncode == 2
    assert stderr_line(nowhere.stderr) == (
        "streamlet: routing key 'asia' routes to 0 partitions of regions (none): --routing-key "
        "needs exactly one")


def test_a_user_over_its_connection_limit_is_told_why(
        broker_factory: Callable[..., BrokerProcess], tmp_path: Path) -> None:
    from tests.support.raw import RawPeer

    cfg = tmp_path / "limit.toml"
    cfg.write_text("[limits]\nmax_connections_per_user = 1\n")
    b = broker_factory(config=cfg)
    with RawPeer(b.host, b.port) as held:
        held.handshake()
        refused = cli("ping", *conn(b), check=False)
    assert refused.returncode == 1
    assert b"ACCESS_REFUSED" in refused.stderr and b"at its connection limit" in refused.stderr
    # the held one closed: room again, once the broker has seen it go
    wait_until(lambda: cli("ping", *conn(b), check=False).returncode == 0, timeout=60)
