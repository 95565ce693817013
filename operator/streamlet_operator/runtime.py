"""What the handlers work with, gathered in one object kopf hands them as `memo.runtime`.

Production builds it at startup; tests build their own (an emulated API server, brokers on
127.0.0.1) and pass it in kopf's memo.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from . import lease, names
from .brokers import (
    AddressResolver,
    BrokerAdmin,
    ClientBrokerAdmin,
    ClientTls,
    operator_tls,
    pod_dns_address,
)
from .builders.common import owner_reference
from .kube import ApiError, Kube
from .model import BrokerModel

if TYPE_CHECKING:
    from .builders.directory import Placed

#: (namespace, broker) -> (user, password) the operator logs into that broker's pods with.
CredentialsFn = Callable[[str, str], Awaitable[tuple[str, str]]]
#: (broker, pod ordinal) -> the "host:port" that pod advertises to clients (None: unknown).
AdvertisedFn = Callable[[BrokerModel, int], Awaitable[str | None]]


@dataclass
class Runtime:
    kube: Kube
    admin: BrokerAdmin = field(default_factory=ClientBrokerAdmin)
    resolve: AddressResolver = pod_dns_address
    credentials: CredentialsFn | None = None
    #: Tests, whose pods listen on 127.0.0.1 ports, say where; else the Broker's advertise spec.
    advertised: AdvertisedFn | None = None
    #: Placements decided but maybe not yet seen by kopf's index: (ns, broker) -> name -> ordinals.
    recent: dict[tuple[str, str], dict[str, list[int]]] = field(
        default_factory=lambda: collections.defaultdict(dict))
    placement_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: Stream directory entries not yet seen in a listing: (ns, broker) -> name -> placement.
    directory_recent: dict[tuple[str, str], dict[str, Placed | None]] = field(
        default_factory=lambda: collections.defaultdict(dict))
    #: Each pod's zone as the placement driver last read it: (ns, broker) -> ordinal -> zone,
    #: written into the stream directory for the brokers' placement of new streams.
    pod_zones: dict[tuple[str, str], dict[int, str]] = field(default_factory=dict)
    #: The placement driver's fencing token (lease.py; None: no Lease), read per request.
    fencing_token: Callable[[], int | None] = lease.fencing_token
    _locks: dict[tuple[str, str, str], asyncio.Lock] = field(default_factory=dict)

    def lock(self, kind: str, namespace: str, name: str) -> asyncio.Lock:
        """One reconciliation at a time per object (change handlers and timers both run)."""
        return self._locks.setdefault((kind, namespace, name), asyncio.Lock())

    async def broker_credentials(self, namespace: str, broker: str) -> tuple[str, str]:
        if self.credentials is not None:
            return await self.credentials(namespace, broker)
        return names.OPERATOR_USER, await operator_password(self.kube, namespace, broker)

    async def broker_tls(self, broker: BrokerModel) -> ClientTls | None:
        """How the operator connects to the Broker's pods (brokers.operator_tls): None for
        plaintext on spec.port, else TLS on spec.tls.port. Read on each use: a renewed
        certificate is used from the next connection on."""
        tls = broker.tls
        if tls is None:
            return None
        wanted = {tls.secret, tls.ca_secret, tls.operator_client_secret} - {None}
        found = {name: await self.kube.get("Secret", broker.namespace, name)
                 for name in sorted(n for n in wanted if n)}
        return operator_tls(broker, found)

    async def broker_address(self, broker: BrokerModel, ordinal: int
                             ) -> tuple[tuple[str, int], ClientTls | None]:
        """Where the operator reaches pod ``ordinal`` (the TLS port when it uses TLS), and how."""
        tls = await self.broker_tls(broker)
        return self.resolve(broker.namespace, broker.name, ordinal, operator_port(broker, tls)), tls


def operator_port(broker: BrokerModel, tls: ClientTls | None) -> int:
    """The port the operator reaches a pod on: the TLS one when it connects with TLS."""
    return broker.tls_port if tls is not None else broker.port


async def _owners(kube: Kube, namespace: str, broker: str) -> list[dict[str, object]]:
    """The Broker as the owner of an object made for it (none while it cannot be read)."""
    body = await kube.get("Broker", namespace, broker)
    return [owner_reference(BrokerModel.from_body(body))] if body is not None else []


async def operator_password(kube: Kube, namespace: str, broker: str) -> str:
    """The operator's password on a broker, kept in a Secret made once, on first use, and
    owned by the Broker (deleting the Broker deletes it; one made before is adopted)."""
    secret_name = names.operator_secret(broker)
    secret = await kube.get("Secret", namespace, secret_name)
    if secret is not None and not secret["metadata"].get("ownerReferences"):
        owners = await _owners(kube, namespace, broker)
        if owners:
            await kube.patch("Secret", namespace, secret_name,
                             {"metadata": {"ownerReferences": owners}})
    if secret is None:
        password = secrets.token_urlsafe(24)
        owners = await _owners(kube, namespace, broker)
        try:
            await kube.create({
                "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": secret_name, "namespace": namespace,
                             "labels": names.labels(broker),
                             **({"ownerReferences": owners} if owners else {})},
                "data": {"password": base64.b64encode(password.encode()).decode()},
            })
            return password
        except ApiError as e:
            if e.status != 409:  # made meanwhile by another reconciliation: read that one
                raise
            secret = await kube.get("Secret", namespace, secret_name)
            if secret is None:
                raise
    return base64.b64decode(secret["data"]["password"]).decode()
