"""The ``protocols`` workload: MEGA, Reactive Streams IO and the Streaming Batch Protocol beside
the RabbitMQ Stream protocol on one streamlet broker, in one run (streamlet only: RabbitMQ speaks
none of them).

Each protocol produces into its own empty stream and reads back (SBP the stream the RabbitMQ
protocol wrote, so both read the same chunks); each row's ratio column compares it with the
RabbitMQ protocol's row of the same size and run. Sizes and counts:
docs/performance.md#other-protocols-mega-and-rsio.
"""

from __future__ import annotations

from .servers import Server
from .workers import Job, admin_sync
from .workloads import Row, Sizes, _consume_row, _phase, _publish_row

#: (key, what the label calls it); the RabbitMQ protocol first, the baseline of the others
PROTOCOLS = (("rabbitmq", "RabbitMQ Stream protocol"), ("mega", "MEGA"), ("rsio", "RSIO"),
             ("sbp", "SBP"))
BASELINE = "rabbitmq"
#: the protocols run at the large size too (SBP's target is at both sizes), with as many
#: messages as the baseline (``sbp_bytes`` worth)
BOTH_SIZES = ("rabbitmq", "mega", "rsio", "sbp")


def plan(sz: Sizes) -> list[tuple[int, tuple[tuple[str, str], ...]]]:
    """(size, the protocols run at it), the baseline first at each size."""
    return [(sz.small, PROTOCOLS),
            (sz.large, tuple(p for p in PROTOCOLS if p[0] in BOTH_SIZES))]


def protocols(server: Server, sz: Sizes) -> list[Row]:
    ports: dict[str, int] = {"rabbitmq": server.port, **getattr(server, "protocol_ports", {})}
    if server.name != "streamlet" or not all(p in ports for p, _ in PROTOCOLS):
        return []
    rows: list[Row] = []
    for size, protos in plan(sz):
        rows += _one_size(server, ports, size, counts(sz, size, protos), protos)
    return rows


def counts(sz: Sizes, size: int, protos: tuple[tuple[str, str], ...]) -> dict[str, int]:
    """Messages per protocol: ``sbp_bytes`` worth (``proto_count`` at least) for those run at
    both sizes (every protocol: so each reads the stream the RabbitMQ protocol wrote),
    ``proto_count`` for any other."""
    big = max(sz.proto_count, sz.sbp_bytes // size)
    return {p: big if p in BOTH_SIZES else sz.proto_count for p, _ in protos}


def _one_size(server: Server, ports: dict[str, int], size: int, count_of: dict[str, int],
              protos: tuple[tuple[str, str], ...]) -> list[Row]:
    streams = {p: f"bench-proto-{p}-{size}" for p, _ in protos}
    admin_sync(server.port, create=list(streams.values()), delete=list(streams.values()))
    rows: list[Row] = []
    try:
        for proto, name in protos:
            kind = "publish" if proto == BASELINE else f"{proto}_produce"
            count = count_of[proto]
            label = f"{count:,} x {size} B"
            results, sampler = _phase(server, [Job(kind, ports[proto], [streams[proto]],
                                                   {"count": count, "size": size})])
            row = _publish_row(f"{proto}-produce-{size}", f"{name}: produce {label}", server,
                               size, count, results, sampler)
            if "window" in results[0]:
                row.extra["window"] = results[0]["window"]
            rows.append(row)
        for proto, name in protos:
            kind = "consume" if proto == BASELINE else f"{proto}_consume"
            count = count_of[proto]
            label = f"{count:,} x {size} B"
            # the RabbitMQ protocol's stream, or one of as many messages as asked for: RSIO's
            # demand may run past ``count`` in a longer stream
            source = streams[BASELINE if count == count_of[BASELINE] else proto]
            results, sampler = _phase(server, [Job(kind, ports[proto], [source],
                                                   {"count": count, "size": size})])
            row = _consume_row(f"{proto}-consume-{size}", f"{name}: consume {label}", server,
                               size, count, results, sampler)
            row.errors += sum(r.get("errors", 0) for r in results)
            # every message's bytes came back (the RabbitMQ consumer counts chunk data instead)
            if proto != BASELINE and sum(r["data_bytes"] for r in results) != count * size:
                row.errors += 1
            rows.append(row)
    finally:
        admin_sync(server.port, delete=list(streams.values()))
    return rows


def baseline_of(row: Row) -> str | None:
    """The workload key of the RabbitMQ-protocol row a MEGA, RSIO or SBP row compares with."""
    proto, _, rest = row.workload.partition("-")
    if proto in ("mega", "rsio", "sbp") and rest:
        return f"{BASELINE}-{rest}"
    return None
