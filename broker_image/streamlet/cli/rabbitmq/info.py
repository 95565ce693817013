"""`streamlet streams info`: what Metadata (leader, replicas) and StreamStats (offsets, messages,
size, segments, retention, stored offsets and sequences) say of each stream.

The stats come from the broker connected to when it holds the stream (its leader, or a replica:
then a replica's view, its committed offset as far as the leader told it), else from the
stream's leader, connected to for it; only a leader that cannot be reached leaves a stream at
its leader and replicas ("held by ...")."""

from __future__ import annotations

import argparse
import json
import sys

from ...client import Client, StreamletError
from ...rabbitmq import Code
from ..words import size as size_text
from .session import Opener


async def info(client: Client, args: argparse.Namespace, opener: Opener | None = None) -> int:
    """Exit 1 when a stream is missing (the others are still shown)."""
    code = 0
    meta = await client.metadata(list(args.names))
    brokers = {b.reference: f"{b.host}:{b.port}" for b in meta.brokers}
    found = {s.stream: s for s in meta.streams}
    docs = []
    for name in args.names:
        entry = found.get(name)
        if entry is None or entry.code != Code.OK:
            print(f"streamlet: {name}: no such stream", file=sys.stderr)
            code = 1
            continue
        where = brokers.get(entry.leader)
        doc: dict[str, object] = {
            "stream": name, "leader": where,
            "replicas": [brokers.get(r, str(r)) for r in entry.replicas]}
        leader = await client.leader(name)
        replicas = [(b.host, b.port) for b in meta.brokers if b.reference in entry.replicas]
        if any(client.is_local(r) for r in replicas):  # a replica's own view
            doc.update(await client.stream_stats(name))
            doc["read_on"] = f"{args.host}:{args.port}"
        elif leader is None or client.is_local(leader):
            doc.update(await client.stream_stats(name))
        else:  # held by other brokers of the cluster: the leader's stats are there
            stats = await _stats_at(opener, leader, name)
            if stats is None:
                doc["elsewhere"] = True
            else:
                doc.update(stats)
        docs.append(doc)
    if args.json:
        for doc in docs:
            print(json.dumps(doc, sort_keys=True))
    else:
        for doc in docs:
            print("\n".join(describe(doc)))
    return code


async def _stats_at(opener: Opener | None, address: tuple[str, int],
                    name: str) -> dict[str, int] | None:
    """StreamStats of ``name`` asked of the broker at ``address``; None when it cannot be."""
    if opener is None:
        return None
    try:
        other = await opener(*address)
    except (OSError, TimeoutError, StreamletError):
        return None
    try:
        return await other.stream_stats(name)
    except StreamletError:
        return None
    finally:
        await other.close()


def describe(doc: dict[str, object]) -> list[str]:
    """Lines for a person: the stream's name, then indented ``what: value`` lines."""
    d = {k: v for k, v in doc.items()}
    lines = [f"{d['stream']}", f"  leader: {d['leader']}"]
    replicas = d.get("replicas") or []
    assert isinstance(replicas, list)
    lines.append(f"  replicas: {', '.join(map(str, replicas)) or 'none'}")
    if d.get("read_on"):
        lines.append(f"  read on replica {d['read_on']} (its committed offset may trail the "
                     "leader's by what is in flight)")
    if d.get("elsewhere"):
        lines.append(f"  held by {d['leader']}: ask it for the rest "
                     f"(streamlet streams info --host ... --port ...)")
        return lines
    if "first_offset" not in d:  # a broker without streamlet's keys: RabbitMQ's own
        lines += [f"  {k}: {v}" for k, v in sorted(d.items())
                  if k not in ("stream", "leader", "replicas", "read_on")]
        return lines
    first, committed = int(d["first_offset"]), int(d["committed_offset"])  # type: ignore[call-overload]
    if committed < first:
        lines.append("  offsets: none yet (empty)")
    else:
        lines.append(f"  offsets: {first}..{committed} (first..last committed)")
    lines.append(f"  messages: {d['messages']}")
    size = int(d["size_bytes"])  # type: ignore[call-overload]
    lines.append(f"  size on disk: {_bytes(size)} in {d['segments']} segment(s)")
    lines.append(f"  retention: {_retention(d)}")
    if d.get("sealed") and not d.get("read_on"):  # a replica takes none anyway
        lines.append("  sealed: takes no publishes (moving to another broker)")
    for prefix, title in (("offset", "stored consumer offsets"),
                          ("sequence", "publisher sequences")):
        named = {k.split(":", 1)[1]: v for k, v in d.items() if k.startswith(f"{prefix}:")}
        total = int(d.get(f"{prefix}s", len(named)))  # type: ignore[call-overload]
        more = f" (and {total - len(named)} more)" if total > len(named) else ""
        shown = ", ".join(f"{k}={v}" for k, v in sorted(named.items())) or "none"
        lines.append(f"  {title}: {shown}{more}")
    return lines


def _bytes(n: int) -> str:
    """In the unit family every command uses (cli/words.py size), exact beside it."""
    return f"{size_text(n)} ({n} bytes)" if n >= 1024 else f"{n} bytes"


def _retention(d: dict[str, object]) -> str:
    parts = []
    if "max_age_ms" in d:
        parts.append(f"max-age {_duration(int(d['max_age_ms']))}")  # type: ignore[call-overload]
    if "max_length_bytes" in d:
        parts.append(f"max-length-bytes {d['max_length_bytes']}")
    kept = " and ".join(parts) or "none (kept for ever)"
    return f"{kept}; segments of {d['max_segment_size_bytes']} bytes"


def _duration(ms: int) -> str:
    for unit, size in (("D", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms} ms"
