"""The policy pages' work (RabbitMQ's /api/policies, api.py answers): list, show, set and
delete a policy, for a user with every right (RabbitMQ's administrator or policymaker). A set
is 201 (new) or 204 (changed), a refused definition the reason as RabbitMQ words it; the
change is saved, applied to the streams here and sent to the peers (broker/policies) before
the answer."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..policies.model import parse

if TYPE_CHECKING:
    from ..server import Broker
    from .identity import Identity

REFUSED = "Access refused: policies are an administrator's"


def refused(who: Identity) -> str | None:
    return None if who.administrator else REFUSED


def listed(broker: Broker, vhost: str | None) -> list[dict[str, Any]]:
    return [p.view() for p in broker.policies.set.live(vhost)]


def shown(broker: Broker, vhost: str, name: str) -> dict[str, Any] | None:
    found = broker.policies.set.get(vhost, name)
    return None if found is None else found.view()


def put(broker: Broker, vhost: str, name: str, body: bytes) -> int | str:
    """201 (a new policy) or 204, or why it is refused (400)."""
    if not name:
        return "a policy needs a name"
    try:
        doc = json.loads(body or b"{}")
    except (UnicodeDecodeError, ValueError):
        return "the body is not JSON"
    found = parse(doc, vhost, name)
    if isinstance(found, str):
        return found
    return 201 if broker.policies.put(found) else 204


def delete(broker: Broker, vhost: str, name: str) -> bool:
    """False: no such policy (404)."""
    return broker.policies.delete(vhost, name)
