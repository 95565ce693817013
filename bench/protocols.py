"""The ``protocols`` workload: MEGA and Reactive Streams IO beside the RabbitMQ Stream protocol
on one streamlet broker, in one run (streamlet only: RabbitMQ speaks neither).

Each protocol produces ``proto_count`` messages of ``small`` bytes into its own empty stream
(the RabbitMQ protocol with bench/load.py's publisher, the others with bench/protoload.py's
pipelined clients). Then each reads back the stream the RabbitMQ protocol wrote, from its first
offset, so all three consumers read the same chunks (MEGA the first ``proto_mega_consume``
only: see Sizes). The rows' ratio column compares each protocol with the RabbitMQ protocol's
row of the same run.
"""

from __future__ import annotations

from .servers import Server
from .workers import Job, admin_sync
from .workloads import Row, Sizes, _consume_row, _phase, _publish_row

#: (key, what the label calls it); the RabbitMQ protocol first, the baseline of the others
PROTOCOLS = (("rabbitmq", "RabbitMQ Stream protocol"), ("mega", "MEGA"), ("rsio", "RSIO"))
BASELINE = "rabbitmq"


def protocols(server: Server, sz: Sizes) -> list[Row]:
    ports: dict[str, int] = {"rabbitmq": server.port, **getattr(server, "protocol_ports", {})}
    if server.name != "streamlet" or not all(p in ports for p, _ in PROTOCOLS):
        return []
    size, count = sz.small, sz.proto_count
    streams = {p: f"bench-proto-{p}" for p, _ in PROTOCOLS}
    admin_sync(server.port, create=list(streams.values()), delete=list(streams.values()))
    label = f"{count:,} x {size} B"
    rows: list[Row] = []
    try:
        for proto, name in PROTOCOLS:
            kind = "publish" if proto == BASELINE else f"{proto}_produce"
            results, sampler = _phase(server, [Job(kind, ports[proto], [streams[proto]],
                                                   {"count": count, "size": size})])
            row = _publish_row(f"{proto}-produce-{size}", f"{name}: produce {label}", server,
                               size, count, results, sampler)
            if "window" in results[0]:
                row.extra["window"] = results[0]["window"]
            rows.append(row)
        for proto, name in PROTOCOLS:
            kind = "consume" if proto == BASELINE else f"{proto}_consume"
            n = min(count, sz.proto_mega_consume) if proto == "mega" else count
            results, sampler = _phase(server, [Job(kind, ports[proto], [streams[BASELINE]],
                                                   {"count": n, "size": size})])
            what = f"consume {label}" if n == count else f"consume the first {n:,} of {label}"
            row = _consume_row(f"{proto}-consume-{size}", f"{name}: {what}", server, size, n,
                               results, sampler)
            row.errors += sum(r.get("errors", 0) for r in results)
            # every message's bytes came back (the RabbitMQ consumer counts chunk data instead)
            if proto != BASELINE and sum(r["data_bytes"] for r in results) != n * size:
                row.errors += 1
            rows.append(row)
    finally:
        admin_sync(server.port, delete=list(streams.values()))
    return rows


def baseline_of(row: Row) -> str | None:
    """The workload key of the RabbitMQ-protocol row a MEGA or RSIO row compares with."""
    proto, _, rest = row.workload.partition("-")
    if proto in ("mega", "rsio") and rest:
        return f"{BASELINE}-{rest}"
    return None
