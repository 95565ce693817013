"""PolicySync (a private command, docs/protocol.md): a peer's policy set, or the operator's
entries, merged into this broker's (broker/policies/store.py) and answered with the whole
set. Only the replication and placement driver users may send it (else 16); entries that are
not valid policies are refused whole (17)."""

from __future__ import annotations

import json
import logging

from ...rabbitmq import Code
from ...rabbitmq.frames import replication as rf
from ..policies.model import PolicySet
from .replication import trusted
from .state import ConnectionState

log = logging.getLogger("streamlet.broker")


def on_policy_sync(conn: ConnectionState, cmd: rf.PolicySync) -> None:
    if not trusted(conn, "PolicySync"):
        conn.send(rf.PolicySyncResponse(cmd.correlation_id, Code.ACCESS_REFUSED))
        return
    policies = conn.broker.policies
    try:
        entries = PolicySet.from_json(json.loads(cmd.policies)).entries.values()
    except (UnicodeDecodeError, ValueError) as e:
        log.warning("connection %s: PolicySync refused: %s", conn.peer, e)
        conn.send(rf.PolicySyncResponse(cmd.correlation_id, Code.PRECONDITION_FAILED))
        return
    try:
        policies.merge(entries)
    except OSError as e:
        log.error("policies: cannot save %s: %s", policies.path, e)
        conn.send(rf.PolicySyncResponse(cmd.correlation_id, Code.INTERNAL_ERROR))
        return
    conn.send(rf.PolicySyncResponse(cmd.correlation_id, Code.OK,
                                    json.dumps(policies.set.to_json()).encode()))
