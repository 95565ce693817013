"""The JSON shapes, named as RabbitMQ's management API names them (so scripts written for it
read what streamlet lists); keys RabbitMQ has no counterpart for are streamlet's own. Pure
functions of snapshot.py's values."""

from __future__ import annotations

from typing import Any

from .snapshot import ConnInfo, ConsumerInfo, PublisherInfo, ReplicationInfo, StreamInfo

Json = dict[str, Any]

#: RabbitMQ's name for a protocol, per listener table entry
PROTOCOLS = {"rabbitmq": "stream"}

_UNITS = (("Y", 365 * 86400_000), ("M", 30 * 86400_000), ("D", 86400_000), ("h", 3600_000),
          ("m", 60_000), ("s", 1000))


def age_text(ms: int) -> str:
    """A max-age in RabbitMQ's syntax, the largest unit that divides it: 604800000 -> "7D"."""
    for unit, size in _UNITS:
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms // 1000}s"


def connection(c: ConnInfo, node: str) -> Json:
    return {
        "name": c.name, "node": node, "vhost": c.vhost, "user": c.user or "",
        "protocol": PROTOCOLS.get(c.protocol, c.protocol), "type": "network", "state": c.state,
        "host": c.host, "port": c.port, "peer_host": c.peer_host, "peer_port": c.peer_port,
        "ssl": c.ssl, "frame_max": c.frame_max, "timeout": c.heartbeat,
        "client_properties": c.client_properties,
        # streamlet's own
        "publishers": c.publishers, "consumers": c.consumers,
    }


def connection_details(c: ConnInfo, node: str) -> Json:
    """What RabbitMQ's stream publishers and consumers say of their connection."""
    return {"name": c.name, "node": node, "user": c.user or "", "peer_host": c.peer_host,
            "peer_port": c.peer_port, "protocol": PROTOCOLS.get(c.protocol, c.protocol)}


def arguments(s: StreamInfo) -> Json:
    """The queue's x-arguments, as a stream declared through RabbitMQ shows them."""
    out: Json = {"x-queue-type": "stream",
                 "x-stream-max-segment-size-bytes": s.max_segment_size_bytes}
    if s.max_age_ms is not None:
        out["x-max-age"] = age_text(s.max_age_ms)
    if s.max_length_bytes:
        out["x-max-length-bytes"] = s.max_length_bytes
    if s.filter_size != 16:
        out["x-stream-filter-size-bytes"] = s.filter_size
    return out


def queue(s: StreamInfo, node: str) -> Json:
    return {
        "name": s.name, "vhost": s.vhost, "type": "stream", "durable": True,
        "auto_delete": False, "exclusive": False, "arguments": arguments(s), "node": node,
        "state": "running", "leader": s.leader, "members": list(s.members),
        "online": list(s.members) if s.leader is not None else [],
        "messages": s.messages, "messages_ready": s.messages, "messages_unacknowledged": 0,
        "consumers": s.consumers, "segments": s.segments, "committed_offset": s.committed_offset,
        "first_offset": s.first_offset,
        "message_stats": {"publish": s.messages_in, "deliver_get": s.messages_out,
                          "confirm": s.confirmed},
        # streamlet's own
        "size_bytes": s.size_bytes, "publishers": s.publishers, "writable": s.writable,
        "replicated": s.replicated,
        # two leaders seen in one epoch (member ids): a split brain (docs/replication.md)
        "split_brain": None if s.split_brain is None else dict(zip(
            ("epoch", "known_leader", "claimed_leader", "count"), s.split_brain, strict=True)),
        "replication": None if s.replication is None else replication(s.replication),
        # RabbitMQ's: the policy that applies and its definition (operator policies: none)
        "policy": None if s.policy is None else s.policy[0], "operator_policy": None,
        "effective_policy_definition": {} if s.policy is None else s.policy[1],
        # streamlet's own: the retention the stream runs with (the policy over its arguments)
        "retention": None if s.running is None else retention(*s.running),
    }


def retention(max_age_ms: int | None, max_length_bytes: int | None, segment: int) -> Json:
    return {"max-age": None if max_age_ms is None else age_text(max_age_ms),
            "max-length-bytes": max_length_bytes, "stream-max-segment-size-bytes": segment}


def replication(r: ReplicationInfo) -> Json:
    """This member's view of a replicated stream (member ids); the leader's adds who is in
    sync and each follower's lag, as /metrics' streamlet_replication_* report them."""
    return {"epoch": r.epoch, "member_ids": list(r.members), "leads": r.leads,
            "in_sync": None if r.in_sync is None else list(r.in_sync),
            "lag": None if r.lag is None else {
                str(m): dict(zip(("offsets", "chunks", "bytes"), behind, strict=True))
                for m, behind in sorted(r.lag.items())}}


def publisher(p: PublisherInfo, node: str) -> Json:
    return {"connection_details": connection_details(p.conn, node),
            "queue": {"name": p.stream, "vhost": p.vhost}, "publisher_id": p.publisher_id,
            "reference": p.reference or ""}


def consumer(c: ConsumerInfo, node: str) -> Json:
    status = ("single_active" if c.active else "waiting") if c.single_active else "up"
    return {"connection_details": connection_details(c.conn, node),
            "queue": {"name": c.stream, "vhost": c.vhost}, "subscription_id": c.subscription_id,
            "credits": c.credits, "offset": c.offset, "offset_lag": c.offset_lag,
            "properties": c.properties, "active": c.active, "activity_status": status}


def vhost(name: str, streams: list[StreamInfo]) -> Json:
    mine = [s for s in streams if s.vhost == name]
    return {"name": name, "description": "", "tags": [], "tracing": False,
            "messages": sum(s.messages for s in mine), "messages_ready": sum(
                s.messages for s in mine), "messages_unacknowledged": 0}


def overview(*, cluster_name: str, node: str, version: str, rabbitmq_version: str,
             connections: int, streams: list[StreamInfo], consumers: int, publishers: int,
             listeners: list[Json], port: int) -> Json:
    messages = sum(s.messages for s in streams)
    return {
        "management_version": version, "rabbitmq_version": rabbitmq_version,
        "product_name": "streamlet", "product_version": version,
        "cluster_name": cluster_name, "node": node,
        "object_totals": {"connections": connections, "channels": 0, "exchanges": 0,
                          "queues": len(streams), "consumers": consumers},
        "queue_totals": {"messages": messages, "messages_ready": messages,
                         "messages_unacknowledged": 0},
        "message_stats": {"publish": sum(s.messages_in for s in streams),
                          "deliver_get": sum(s.messages_out for s in streams),
                          "confirm": sum(s.confirmed for s in streams)},
        "listeners": listeners,
        "contexts": [{"node": node, "description": "streamlet management API", "path": "/",
                      "port": str(port)}],
        # streamlet's own
        "publishers": publishers,
    }


def error(kind: str, reason: str) -> Json:
    return {"error": kind, "reason": reason}
