"""Reloading the users file and the TLS certificate in a running broker process (no restart):
the files live in folders laid out as the kubelet lays out a Secret volume and change as it
changes them, by swapping the ``..data`` symlink. Certificates come from the openssl CLI
(tests/support/certs.py)."""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import signal
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

import pytest

from streamlet.client import Client, StreamletError, connect
from streamlet.rabbitmq import Code
from tests.broker.test_access import _client_context
from tests.support.brokers import BrokerProcess, free_port
from tests.support.certs import issue
from tests.support.scrape import scrape, value
from tests.support.waiting import eventually

pytestmark = pytest.mark.process

#: generous: two shared, loaded cores; a reload is due within reload_interval (0.2 s here)
WAIT_S = 30.0


class SecretVolume:
    """A folder as the kubelet makes a Secret volume: each key a symlink to ``..data/<key>``,
    ``..data`` a symlink to a folder of this version's files, replaced by a rename."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.version = 0

    def write(self, files: dict[str, bytes]) -> None:
        self.version += 1
        folder = self.root / f"..v{self.version}"
        folder.mkdir()
        for key, content in files.items():
            (folder / key).write_bytes(content)
        tmp = self.root / "..data_tmp"
        tmp.symlink_to(folder.name)
        data = self.root / "..data"
        old = data.resolve() if data.is_symlink() else None
        os.replace(tmp, data)  # the atomic swap
        for key in files:
            link = self.root / key
            if not link.is_symlink():
                link.symlink_to(f"..data/{key}")
        if old is not None:
            shutil.rmtree(old)

    def path(self, key: str) -> Path:
        return self.root / key


def users_toml(*users: tuple[str, str]) -> bytes:
    return "".join(f'[[users]]\nname = "{n}"\npassword = "{p}"\n\n' for n, p in users).encode()


async def login_code(port: int, user: str, password: str, **kwargs: object) -> int:
    """OK, or the code the broker refused the login with."""
    try:
        client = await connect("127.0.0.1", port, user=user, password=password, timeout=10,
                               **kwargs)  # type: ignore[arg-type]
    except StreamletError as e:
        return int(e.code)
    await client.close()
    return int(Code.OK)


def http_status(port: int, user: str, password: str) -> int:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/whoami",
                                     headers={"Authorization": f"Basic {token}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


async def logs_in(port: int, user: str, password: str) -> bool:
    return await login_code(port, user, password) == Code.OK


async def http_status_async(port: int, user: str, password: str) -> int:
    return await asyncio.to_thread(http_status, port, user, password)


class Setup:
    def __init__(self, tmp_path: Path) -> None:
        self.users = SecretVolume(tmp_path / "users")
        self.metrics_port = free_port()
        self.http_port = free_port()
        self.tls_port = free_port()
        self.https_port = free_port()  # the management API's, with tls
        self.metrics_tls_port = free_port()  # the metrics endpoint's HTTPS, with tls
        self.certs: SecretVolume | None = None
        self.ca: Path | None = None

    def config(self, tmp_path: Path, reload_interval: float, tls: bool = False,
               extra: str = "") -> Path:
        text = f'''
[server]
users_file = "{self.users.path('users.toml')}"
reload_interval = {reload_interval}

[[users]]
name = "admin"
password = "admin-pw"

[listeners.metrics]
port = {self.metrics_port}
''' + (f"tls_port = {self.metrics_tls_port}\n" if tls else "") + f'''
[listeners.http]
port = {self.http_port}
''' + (f"tls_port = {self.https_port}\n" if tls else "") + extra
        if tls:
            assert self.certs is not None and self.ca is not None
            text += f'''
[tls]
port = {self.tls_port}
certfile = "{self.certs.path('tls.crt')}"
keyfile = "{self.certs.path('tls.key')}"
cafile = "{self.certs.path('ca.crt')}"
'''
        path = tmp_path / "broker.toml"
        path.write_text(text)
        return path


async def closed_reason(client: Client) -> str | None:
    closed = client._conn.closed
    return str(closed) if closed is not None else None


# --- users -------------------------------------------------------------------------------------


async def test_users_added_and_removed_without_a_restart(
        broker_factory: Callable[..., BrokerProcess], tmp_path: Path) -> None:
    s = Setup(tmp_path)
    s.users.write({"users.toml": users_toml(("alice", "alice-pw"))})
    b = broker_factory(config=s.config(tmp_path, reload_interval=0.2))
    pid = b.pid
    assert await login_code(b.port, "bob", "bob-pw") == Code.AUTHENTICATION_FAILURE
    alice = await connect(b.host, b.port, user="alice", password="alice-pw")
    admin = await connect(b.host, b.port, user="admin", password="admin-pw")
    try:
        # bob added, alice removed, in one swap of the Secret volume
        s.users.write({"users.toml": users_toml(("bob", "bob-pw"))})
        await eventually(lambda: logs_in(b.port, "bob", "bob-pw"), WAIT_S, "bob can log in")
        assert b.pid == pid and b.alive()
        assert await login_code(b.port, "alice", "alice-pw") == Code.AUTHENTICATION_FAILURE
        # alice's open connection was closed with a Close saying why; admin's was not touched
        reason = await eventually(lambda: closed_reason(alice), WAIT_S, "alice's connection closed")
        assert "alice was removed" in reason
        await admin.create_stream("still-served")
        assert not admin.closed
        # the management API has the same users
        assert await http_status_async(s.http_port, "bob", "bob-pw") == 200
        assert await http_status_async(s.http_port, "alice", "alice-pw") == 401
        # a password changed: the new one logs in, the old one no more
        bob = await connect(b.host, b.port, user="bob", password="bob-pw")
        s.users.write({"users.toml": users_toml(("bob", "bob-new"))})
        await eventually(lambda: logs_in(b.port, "bob", "bob-new"), WAIT_S,
                         "bob's new password accepted")
        assert await login_code(b.port, "bob", "bob-pw") == Code.AUTHENTICATION_FAILURE
        # ... and bob's open connection stays (as RabbitMQ's on a password change)
        await bob.create_stream("bob-still-here")
        await bob.close()
    finally:
        await alice.close()
        await admin.close()
    samples = await scrape(s.metrics_port)
    assert value(samples, "streamlet_reload_failures_total", what="users") == 0
    assert value(samples, "streamlet_reload_last_success_timestamp_seconds", what="users")


async def test_a_broken_users_file_keeps_the_old_users(
        broker_factory: Callable[..., BrokerProcess], tmp_path: Path) -> None:
    s = Setup(tmp_path)
    s.users.write({"users.toml": users_toml(("alice", "alice-pw"))})
    b = broker_factory(config=s.config(tmp_path, reload_interval=0.2))
    for broken in (b'[[users]]\nname = "x"\npassword = ', b'[[users]]\nname = "nopassword"\n',
                   users_toml(("admin", "twice"))):  # admin is in the main config already
        failures = value(await scrape(s.metrics_port), "streamlet_reload_failures_total",
                         what="users") or 0
        s.users.write({"users.toml": broken})
        await eventually(partial(_failures_above, s.metrics_port, "users", failures), WAIT_S,
                         "the failed reload counted")
        assert await login_code(b.port, "alice", "alice-pw") == Code.OK
    assert b.alive()
    assert "users not reloaded, the old ones stay in force" in b.log_text()
    # a good file again is taken
    s.users.write({"users.toml": users_toml(("carol", "carol-pw"))})
    await eventually(lambda: logs_in(b.port, "carol", "carol-pw"), WAIT_S, "carol")


async def _failures_above(port: int, what: str, before: float) -> bool:
    return (value(await scrape(port), "streamlet_reload_failures_total", what=what) or 0) > before


async def test_a_removed_user_named_in_permissions_is_removed_its_permissions_dormant(
        broker_factory: Callable[..., BrokerProcess], tmp_path: Path) -> None:
    s = Setup(tmp_path)
    s.users.write({"users.toml": users_toml(("app", "app-pw"))})
    b = broker_factory(config=s.config(tmp_path, reload_interval=0.2, extra='''
[[permissions]]
user = "app"
vhost = "/"
configure = "^app-"
write = "^app-"
read = ".*"
'''))
    s.users.write({"users.toml": users_toml(("other", "other-pw"))})
    await eventually(lambda: logs_in(b.port, "other", "other-pw"), WAIT_S, "reloaded")
    assert await login_code(b.port, "app", "app-pw") == Code.AUTHENTICATION_FAILURE
    assert "stay in force" in b.log_text()
    # back again, it is restricted as before, not given full access
    s.users.write({"users.toml": users_toml(("app", "app-pw"))})
    await eventually(lambda: logs_in(b.port, "app", "app-pw"), WAIT_S, "app back")
    async with await connect(b.host, b.port, user="app", password="app-pw") as app:
        await app.create_stream("app-ok")
        with pytest.raises(StreamletError) as err:
            await app.create_stream("not-app")
        assert err.value.code == Code.ACCESS_REFUSED


async def test_sighup_reloads_at_once_with_polling_off(
        broker_factory: Callable[..., BrokerProcess], tmp_path: Path) -> None:
    s = Setup(tmp_path)
    s.users.write({"users.toml": users_toml(("alice", "alice-pw"))})
    b = broker_factory(config=s.config(tmp_path, reload_interval=0))
    s.users.write({"users.toml": users_toml(("bob", "bob-pw"))})
    assert await login_code(b.port, "bob", "bob-pw") == Code.AUTHENTICATION_FAILURE  # no polling
    os.kill(b.pid, signal.SIGHUP)
    await eventually(lambda: logs_in(b.port, "bob", "bob-pw"), WAIT_S, "bob after SIGHUP")
    assert b.alive()
    assert await login_code(b.port, "alice", "alice-pw") == Code.AUTHENTICATION_FAILURE


# --- permissions in the users file ---------------------------------------------------------------


def reader_toml(write: str = "", vhost: str = "/", read: str = "^x$") -> bytes:
    """The users file giving "reader" a password and, in the same file, its permission."""
    return users_toml(("reader", "reader-pw")) + (
        f'[[permissions]]\nuser = "reader"\nvhost = "{vhost}"\nconfigure = ""\n'
        f'write = "{write}"\nread = "{read}"\n').encode()


async def _code(call: Awaitable[object]) -> int:
    try:
        result = await call
    except StreamletError as e:
        return int(e.code)
    close = getattr(result, "close", None)
    if close is not None:
        await close()
    return int(Code.OK)


async def reader_rights(port: int) -> tuple[int, int, int, int] | None:
    """What "reader" may do on a fresh login: (subscribe x, subscribe y, publish x, create);
    None while it cannot log in yet."""
    try:
        client = await connect("127.0.0.1", port, user="reader", password="reader-pw", timeout=10)
    except StreamletError as e:
        assert e.code == Code.AUTHENTICATION_FAILURE
        return None
    async with client:
        return (await _code(client.consumer("x")), await _code(client.consumer("y")),
                await _code(client.producer("x")), await _code(client.create_stream("z")))


READ_X_ONLY = (Code.OK, Code.ACCESS_REFUSED, Code.ACCESS_REFUSED, Code.ACCESS_REFUSED)
READ_WRITE_X = (Code.OK, Code.ACCESS_REFUSED, Code.OK, Code.ACCESS_REFUSED)


async def _rights_are(port: int, expected: tuple[int, int, int, int]) -> bool:
    return await reader_rights(port) == expected


async def test_a_user_added_with_its_permission_is_restricted_from_its_first_login(
        broker_factory: Callable[..., BrokerProcess], tmp_path: Path) -> None:
    s = Setup(tmp_path)
    s.users.write({"users.toml": users_toml(("alice", "alice-pw"))})
    b = broker_factory(config=s.config(tmp_path, reload_interval=0.2))
    pid = b.pid
    async with await connect(b.host, b.port, user="admin", password="admin-pw") as admin:
        await admin.create_stream("x")
        await admin.create_stream("y")
    # the password and the permission arrive together; every login attempt until the reload
    # fails, and the first that succeeds is already restricted: no window of full access
    s.users.write({"users.toml": reader_toml()})
    first = await eventually(lambda: reader_rights(b.port), WAIT_S, "reader can log in")
    assert first == READ_X_ONLY
    assert b.pid == pid and b.alive()
    # the permission changed in the file (write on x granted): applied without a restart,
    # also to a connection opened before, at its next operation
    async with await connect(b.host, b.port, user="reader", password="reader-pw") as before:
        assert await _code(before.producer("x")) == Code.ACCESS_REFUSED
        s.users.write({"users.toml": reader_toml(write="^x$")})
        await eventually(lambda: _rights_are(b.port, READ_WRITE_X), WAIT_S, "write on x granted")
        assert await _code(before.producer("x")) == Code.OK
    assert b.pid == pid
    samples = await scrape(s.metrics_port)
    assert value(samples, "streamlet_reload_failures_total", what="users") == 0


ADMIN_PERMISSION = '''
[[permissions]]
user = "admin"
vhost = "/"
'''


async def test_a_bad_permission_in_the_users_file_keeps_the_old_users_and_permissions(
        broker_factory: Callable[..., BrokerProcess], tmp_path: Path) -> None:
    s = Setup(tmp_path)
    s.users.write({"users.toml": reader_toml()})
    b = broker_factory(config=s.config(tmp_path, reload_interval=0.2, extra=ADMIN_PERMISSION))
    async with await connect(b.host, b.port, user="admin", password="admin-pw") as admin:
        await admin.create_stream("x")
        await admin.create_stream("y")
    assert await reader_rights(b.port) == READ_X_ONLY  # loaded at the start
    newcomer = users_toml(("newcomer", "newcomer-pw"))
    granted = reader_toml(write="^x$") + newcomer
    for broken in (reader_toml(write="^x$", vhost="nope") + newcomer,  # vhosts: main config only
                   reader_toml(write="(") + newcomer,  # not a regular expression
                   granted + ADMIN_PERMISSION.encode(),  # the main config has admin's already
                   granted + b'[[permissions]]\nuser = "ghost"\nvhost = "/"\n'):  # no such user
        failures = value(await scrape(s.metrics_port), "streamlet_reload_failures_total",
                         what="users") or 0
        s.users.write({"users.toml": broken})
        await eventually(partial(_failures_above, s.metrics_port, "users", failures), WAIT_S,
                         "the failed reload counted")
        # neither the file's new user nor its new permission was taken
        assert await reader_rights(b.port) == READ_X_ONLY
        assert await login_code(b.port, "newcomer", "newcomer-pw") == Code.AUTHENTICATION_FAILURE
    assert b.alive()
    assert "users not reloaded, the old ones stay in force" in b.log_text()
    s.users.write({"users.toml": granted})
    await eventually(lambda: _rights_are(b.port, READ_WRITE_X), WAIT_S, "the good file taken")
    assert await login_code(b.port, "newcomer", "newcomer-pw") == Code.OK


# --- TLS ---------------------------------------------------------------------------------------


def _tls_files(d: Path, name: str) -> dict[str, bytes]:
    """A kubernetes.io/tls Secret's keys, as cert-manager writes them."""
    return {"tls.crt": (d / f"{name}.crt").read_bytes(), "tls.key": (d / f"{name}.key").read_bytes(),
            "ca.crt": (d / "ca.crt").read_bytes()}


def _der(pem: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(pem.read_text())


def peer_certificate(port: int, ctx: ssl.SSLContext) -> bytes:
    """The certificate a new TLS connection to the broker is shown (DER)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        der = tls.getpeercert(binary_form=True)
        assert der is not None
        return der


def client_peer_certificate(client: Client) -> bytes:
    assert client._conn.transport is not None
    return bytes(client._conn.transport.get_extra_info("ssl_object").getpeercert(True))


@pytest.fixture
def certs(certs: Path) -> Path:
    """tests/conftest.py's certificates and ``server2``, another server certificate of the CA."""
    issue(certs, "server2", "localhost", server=True)
    return certs


def _tls_setup(tmp_path: Path, certs: Path) -> tuple[Setup, SecretVolume]:
    """A user ``app`` and the certificate ``server`` (to be rotated), both in Secret volumes."""
    s = Setup(tmp_path)
    s.users.write({"users.toml": users_toml(("app", "app-pw"))})
    s.certs = volume = SecretVolume(tmp_path / "tls")
    volume.write(_tls_files(certs, "server"))
    s.ca = certs / "ca.crt"
    return s, volume


async def test_certificate_rotated_without_a_restart(
        broker_factory: Callable[..., BrokerProcess], tmp_path: Path, certs: Path) -> None:
    s, tls = _tls_setup(tmp_path, certs)
    sbp_port = free_port()  # another protocol's listener on [tls]'s certificate
    b = broker_factory(config=s.config(tmp_path, reload_interval=0.2, tls=True, extra=f'''
[listeners.sbp]
host = "127.0.0.1"
port = {sbp_port}
tls = true
'''))
    pid = b.pid
    ctx = _client_context(certs, with_cert=False)
    first, second = _der(certs / "server.crt"), _der(certs / "server2.crt")
    assert first != second
    assert await asyncio.to_thread(peer_certificate, s.tls_port, ctx) == first
    assert await asyncio.to_thread(peer_certificate, sbp_port, ctx) == first
    assert await asyncio.to_thread(peer_certificate, s.https_port, ctx) == first
    assert await asyncio.to_thread(peer_certificate, s.metrics_tls_port, ctx) == first
    old = await connect(b.host, s.tls_port, user="admin", password="admin-pw", ssl=ctx)
    try:
        tls.write(_tls_files(certs, "server2"))  # cert-manager renewed the Secret
        await eventually(lambda: _peer_is(s.tls_port, ctx, second), WAIT_S,
                         "the new certificate shown")
        assert await asyncio.to_thread(peer_certificate, sbp_port, ctx) == second
        # the management API's HTTPS too, which asks for no client certificate
        assert await asyncio.to_thread(peer_certificate, s.https_port, ctx) == second
        assert await asyncio.to_thread(peer_certificate, s.metrics_tls_port, ctx) == second
        assert b.pid == pid
        # a full login on the new certificate, and SASL EXTERNAL with a client certificate (the
        # CA of the reloaded context verifies it)
        assert await login_code(s.tls_port, "app", "app-pw", ssl=ctx) == Code.OK
        with_cert = _client_context(certs, with_cert=True)
        assert await login_code(s.tls_port, "", "", ssl=with_cert, mechanism="EXTERNAL") == Code.OK
        # the connection opened before goes on, on the certificate it shook hands with
        await old.create_stream("tls-before-rotation")
        assert client_peer_certificate(old) == first and not old.closed
    finally:
        await old.close()
    samples = await scrape(s.metrics_port)
    assert value(samples, "streamlet_reload_failures_total", what="tls") == 0


async def _peer_is(port: int, ctx: ssl.SSLContext, der: bytes) -> bool:
    return await asyncio.to_thread(peer_certificate, port, ctx) == der


async def test_a_broken_certificate_keeps_the_old_one(
        broker_factory: Callable[..., BrokerProcess], tmp_path: Path, certs: Path) -> None:
    s, tls = _tls_setup(tmp_path, certs)
    b = broker_factory(config=s.config(tmp_path, reload_interval=0.2, tls=True))
    ctx = _client_context(certs, with_cert=False)
    first = _der(certs / "server.crt")
    good = _tls_files(certs, "server2")
    mismatched = {**good, "tls.key": (certs / "server.key").read_bytes()}  # not server2's key
    garbage = {**good, "tls.crt": b"-----BEGIN CERTIFICATE-----\nnot one\n-----END CERTIFICATE-----\n"}
    for broken in (mismatched, garbage, {**good, "tls.key": b""}):
        failures = value(await scrape(s.metrics_port), "streamlet_reload_failures_total",
                         what="tls") or 0
        tls.write(broken)
        await eventually(partial(_failures_above, s.metrics_port, "tls", failures), WAIT_S,
                         "the failed reload counted")
        assert await asyncio.to_thread(peer_certificate, s.tls_port, ctx) == first
        assert await login_code(s.tls_port, "app", "app-pw", ssl=ctx) == Code.OK
    assert b.alive()
    assert "TLS certificate not reloaded, the old one stays in force" in b.log_text()
    tls.write(good)
    await eventually(lambda: _peer_is(s.tls_port, ctx, _der(certs / "server2.crt")), WAIT_S,
                     "the good certificate taken")


async def test_sighup_reloads_the_certificate(
        broker_factory: Callable[..., BrokerProcess], tmp_path: Path, certs: Path) -> None:
    s, tls = _tls_setup(tmp_path, certs)
    b = broker_factory(config=s.config(tmp_path, reload_interval=0, tls=True))
    ctx = _client_context(certs, with_cert=False)
    tls.write(_tls_files(certs, "server2"))
    assert await asyncio.to_thread(peer_certificate, s.tls_port, ctx) == _der(certs / "server.crt")
    os.kill(b.pid, signal.SIGHUP)
    await eventually(lambda: _peer_is(s.tls_port, ctx, _der(certs / "server2.crt")), WAIT_S,
                     "the new certificate after SIGHUP")
