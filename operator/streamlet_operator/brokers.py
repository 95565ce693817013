"""The operator's view of broker pods: where they are and the few admin calls it makes.

Handlers talk to a BrokerAdmin; ClientBrokerAdmin implements it with streamlet.client, one
connection per reconciliation. Tests may give the handlers another address resolver (pods
as 127.0.0.1:port) or, where no broker can run, another admin.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import ssl
import tempfile
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from . import names
from .model import BrokerModel, StreamStats

CA_KEY = "ca.crt"  # cert-manager's key for the issuing CA in a kubernetes.io/tls Secret

Address = tuple[str, int]
#: (namespace, broker name, pod ordinal, stream port) -> where the operator reaches that pod.
AddressResolver = Callable[[str, str, int, int], Address]

CONNECT_TIMEOUT = 5.0


def pod_dns_address(namespace: str, broker: str, ordinal: int, port: int) -> Address:
    return names.pod_dns(broker, ordinal, namespace), port


@dataclass(frozen=True)
class ClientTls:
    """How the operator connects to a Broker's TLS listener: the CA it trusts (PEM; None: the
    system's) and the client certificate it presents (PEM; None: none, as without verifyPeer).
    The server's name is checked: the pod's DNS name must be in its certificate."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = None

    def context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cadata=self.ca) if self.ca else (
            ssl.create_default_context())
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.cert and self.key:
            # load_cert_chain reads files only: a private directory, gone once loaded
            with tempfile.TemporaryDirectory(prefix="streamlet-tls-") as d:
                cert, key = os.path.join(d, "tls.crt"), os.path.join(d, "tls.key")
                for path, text in ((cert, self.cert), (key, self.key)):
                    with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
                        f.write(text)
                ctx.load_cert_chain(cert, key)
        return ctx


def _pem(secret: dict[str, Any] | None, key: str) -> str | None:
    value = ((secret or {}).get("data") or {}).get(key)
    return base64.b64decode(value).decode() if value else None


def operator_tls(broker: BrokerModel, secrets: dict[str, dict[str, Any] | None]
                 ) -> ClientTls | None:
    """How the operator connects to the Broker's pods, from the Secrets spec.tls names (by
    name; None: not found). None: plaintext on spec.port, as when TLS is off, and as when
    the plain listener is on but no CA is known (a Secret made by hand, without ca.crt, and
    no caSecretName): the operator could not verify the brokers, so it keeps to what worked
    before. TLS only, without a CA: the system's CAs (a publicly trusted certificate)."""
    tls = broker.tls
    if tls is None:
        return None
    ca = _pem(secrets.get(tls.ca_source), CA_KEY)
    if not tls.clients_use_tls(ca is not None):
        return None
    cert = key = None
    if tls.operator_client_secret:
        client = secrets.get(tls.operator_client_secret)
        if client is None:
            raise BrokerUnavailable(f"spec.tls.operatorClientSecret "
                                    f"{tls.operator_client_secret!r} not found")
        cert, key = _pem(client, "tls.crt"), _pem(client, "tls.key")
    return ClientTls(ca, cert, key)


class BrokerUnavailable(Exception):
    """The pod could not be reached (not running, not ready, wrong credentials)."""


class StreamWriter(Protocol):
    async def send(self, records: list[bytes], first_id: int) -> None:
        """Publish ``records`` with consecutive publishing ids from ``first_id``. Waits only
        while the window of unconfirmed messages is full, never for these records' confirms;
        raises if the broker rejected something sent before (nothing more goes out then)."""

    async def flush(self) -> None:
        """Wait until everything sent is confirmed; raise if the broker rejected any of it."""


class BrokerSession(Protocol):
    async def create_stream(self, name: str, arguments: dict[str, str]) -> bool:
        """Create the stream; False if it already existed."""

    async def create_super_stream(self, name: str, partitions: list[str],
                                  arguments: dict[str, str]) -> bool:
        """Create the super stream and its partitions; False if it already existed."""

    async def delete_stream(self, name: str) -> bool:
        """Delete the stream; False if there was none."""

    async def delete_super_stream(self, name: str, partitions: list[str]) -> bool: ...

    async def stream_exists(self, name: str) -> bool: ...

    async def stream_stats(self, name: str) -> StreamStats: ...

    async def sync_policies(self, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Send policy entries (PolicySync: the pod takes each newer one, version 0 as a change
        made there, and passes it to its peers); the pod's whole set after it took them."""

    async def publisher_sequence(self, name: str, reference: str) -> int:
        """The last publishing id the stream stored for ``reference`` (0 if none)."""

    def read(self, name: str, offset: int = 0) -> contextlib.AbstractAsyncContextManager[
            AsyncIterator[tuple[int, int, list[bytes]]]]:
        """The stream's chunks from the one holding ``offset``: (chunk id, offset of the first
        record, records at or after ``offset``), waiting for new ones."""

    def write(self, name: str,
              reference: str | None = None) -> contextlib.AbstractAsyncContextManager[StreamWriter]:
        """A publisher on the stream; with ``reference`` the broker drops ids it already has."""


class BrokerAdmin(Protocol):
    def session(self, address: Address, user: str, password: str, tls: ClientTls | None = None
                ) -> contextlib.AbstractAsyncContextManager[BrokerSession]: ...


def _code_name(exc: BaseException) -> str:
    code = getattr(exc, "code", None)
    return getattr(code, "name", str(code))


class _ClientWriter:
    def __init__(self, producer: Any) -> None:
        self._producer = producer

    async def send(self, records: list[bytes], first_id: int) -> None:
        if self._producer.error_count:  # a rejection came back: send nothing after it
            await self._producer.flush()  # raises PublishFailed, naming what was rejected
            raise RuntimeError(f"{self._producer.error_count} message(s) rejected before")
        await self._producer.send_many(records, first_id=first_id)

    async def flush(self) -> None:
        await self._producer.flush()


class _ClientSession:
    def __init__(self, client: Any) -> None:
        self._client = client

    async def create_stream(self, name: str, arguments: dict[str, str]) -> bool:
        if await self.stream_exists(name):
            return False
        await self._client.create_stream(name, arguments or None, exists_ok=True)
        return True

    async def create_super_stream(self, name: str, partitions: list[str],
                                  arguments: dict[str, str]) -> bool:
        if await self.stream_exists(partitions[0]):
            return False
        keys = [str(i) for i in range(len(partitions))]
        try:
            await self._client.create_super_stream(name, partitions, keys, arguments or None)
        except Exception as e:
            if "ALREADY_EXISTS" in _code_name(e):
                return False
            raise
        return True

    async def delete_stream(self, name: str) -> bool:
        if not await self.stream_exists(name):
            return False
        await self._client.delete_stream(name, missing_ok=True)
        return True

    async def delete_super_stream(self, name: str, partitions: list[str]) -> bool:
        deleter = getattr(self._client, "delete_super_stream", None)
        if deleter is not None:
            try:
                await deleter(name)
                return True
            except Exception as e:
                if "DOES_NOT_EXIST" not in _code_name(e):
                    raise
        found = False
        for partition in partitions:
            found = await self.delete_stream(partition) or found
        return found

    async def stream_exists(self, name: str) -> bool:
        """Whether this pod holds the stream. Not Metadata: with the stream directory, any pod
        answers Metadata for a stream another pod holds. StreamStats answers for its own only."""
        try:
            await self._client.stream_stats(name)
        except Exception as e:
            if "DOES_NOT_EXIST" in _code_name(e):
                return False
            raise
        return True

    async def publisher_sequence(self, name: str, reference: str) -> int:
        return int(await self._client.query_publisher_sequence(reference, name))

    @contextlib.asynccontextmanager
    async def read(self, name: str,
                   offset: int = 0) -> AsyncIterator[AsyncIterator[tuple[int, int, list[bytes]]]]:
        consumer = await self._client.consumer(name, offset=offset or "first", credit=4)

        async def chunks() -> AsyncIterator[tuple[int, int, list[bytes]]]:
            async for header, records, first in consumer.chunks():
                yield header.chunk_id, first, [bytes(r) for r in records]

        try:
            yield chunks()
        finally:
            with contextlib.suppress(Exception):
                await consumer.close()

    @contextlib.asynccontextmanager
    async def write(self, name: str, reference: str | None = None) -> AsyncIterator[StreamWriter]:
        producer = await self._client.producer(name, reference=reference)
        try:
            yield _ClientWriter(producer)
        finally:
            with contextlib.suppress(Exception):
                await producer.close()

    async def sync_policies(self, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        from streamlet.rabbitmq.frames import replication as rf

        body = json.dumps(entries).encode()
        answer = await self._client.request(lambda c: rf.PolicySync(c, body))
        found: list[dict[str, Any]] = json.loads(answer.policies)
        return found

    async def stream_stats(self, name: str) -> StreamStats:
        stats = await self._client.stream_stats(name)
        return StreamStats(
            first_offset=int(stats.get("first_chunk_id", -1)),
            committed_offset=int(stats.get("committed_chunk_id", -1)),
            last_offset=int(stats.get("last_chunk_id", -1)),
            sealed=bool(stats.get("sealed", 0)),  # brokers before the seal do not report it
        )


_Key = tuple[Address, str, str, ClientTls | None]


class ClientBrokerAdmin:
    """BrokerAdmin over streamlet.client (the RabbitMQ Stream protocol).

    One connection per pod and user, kept between reconciliations: timers visit every stream
    every few seconds, and a handshake per visit would cost both sides. A connection found
    closed is replaced; one that fails a call is dropped, so the next pass reconnects.
    """

    def __init__(self) -> None:
        self._clients: dict[_Key, Any] = {}
        self._locks: dict[_Key, asyncio.Lock] = {}

    async def _client(self, address: Address, user: str, password: str,
                      tls: ClientTls | None) -> Any:
        from streamlet.client import connect  # imported late: the operator image has it, tests too

        # the TLS settings are in the key: a renewed certificate makes a new connection
        key = (address, user, password, tls)
        async with self._locks.setdefault(key, asyncio.Lock()):
            client = self._clients.get(key)
            if client is not None and not client.closed:
                return client
            host, port = address
            try:
                context = tls.context() if tls is not None else None
            except (OSError, ssl.SSLError, ValueError) as e:
                raise BrokerUnavailable(f"the operator's TLS settings for {host}:{port} do not "
                                        f"load: {e}") from e
            try:
                client = await asyncio.wait_for(
                    connect(host, port, user=user, password=password, vhost="/", ssl=context),
                    CONNECT_TIMEOUT)
            except (OSError, TimeoutError) as e:  # ssl.SSLError too: an OSError
                raise BrokerUnavailable(f"cannot reach {host}:{port}: {e}") from e
            except Exception as e:  # authentication and handshake failures
                raise BrokerUnavailable(f"{host}:{port} refused the operator: {e}") from e
            self._clients[key] = client
            return client

    @contextlib.asynccontextmanager
    async def session(self, address: Address, user: str, password: str,
                      tls: ClientTls | None = None) -> AsyncIterator[BrokerSession]:
        client = await self._client(address, user, password, tls)
        try:
            yield _ClientSession(client)
        except BaseException as e:
            if client.closed or isinstance(e, OSError | TimeoutError | asyncio.CancelledError):
                await self._drop((address, user, password, tls), client)
            raise

    async def _drop(self, key: _Key, client: Any) -> None:
        if self._clients.get(key) is client:
            del self._clients[key]
        with contextlib.suppress(Exception):
            await client.close()

    async def close(self) -> None:
        for key, client in list(self._clients.items()):
            await self._drop(key, client)
