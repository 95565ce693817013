"""The add-member workload: on a 3-node cluster of each server, a stream with 2 members filled
with ``Sizes.add_bytes`` of 1,000 B messages (all confirmed), then the third node added with
the server's own tool (RabbitMQ: ``rabbitmq-streams add_replica``; streamlet: ``streamlet
cluster members STREAM --add I``). The row's seconds run from the command's start until the
server's own status says the new member holds everything committed; a consumer attached to
the new member must then get the last message. What it measures and why:
docs/performance.md#adding-a-member.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from .client import BenchError
from .replicated import _create, _delete_sync, _holds
from .servers import ClusterServer, ServerError
from .workers import Job
from .workloads import Row, RssSampler, _errors, _phase

#: the stream's members before the add (initial-cluster-size), on a 3-node cluster
BEFORE = 2
SIZE = 1000
#: how long the new member may take to be in sync before the row says it never was
ADD_TIMEOUT_S = 900.0
#: between two looks at the server's status (each look is a CLI call: 0.1-0.5 s by itself)
POLL_S = 0.2


def add_member_row(server: str, count: int, confirmed: int, command_s: float | None,
                   in_sync_s: float | None, read: bool, polls: int,
                   extra: dict[str, Any]) -> Row:
    """The row: seconds = until in sync; msg/s and MB/s the data moved to the new member over
    that time; exact when every message was confirmed, the member got in sync and a consumer
    on it read the last message."""
    gb = count * SIZE / 1e9
    took = f"{in_sync_s:.2f} s" if in_sync_s is not None else "never"
    row = Row("r3-add-member", f"2 -> 3 members: add a member to a stream of {gb:.2f} GB "
              f"({count:,} x {SIZE} B): {took} to in sync", server, SIZE, count,
              confirmed=confirmed, consumed=count if read and in_sync_s is not None else 0,
              seconds=in_sync_s or 0.0, measures="consumed",
              errors=0 if in_sync_s is not None and read and confirmed == count else 1)
    row.extra.update(extra)
    row.extra.update(add_s=None if in_sync_s is None else round(in_sync_s, 3),
                     command_s=None if command_s is None else round(command_s, 3),
                     polls=polls, read_last=read,
                     mb_s=round(count * SIZE / 1e6 / in_sync_s, 1) if in_sync_s else None)
    return row


def add_member(srv: ClusterServer, bytes_: int, run_no: int) -> list[Row]:
    srv.ensure_up()
    stream = f"bench-r3-add-{run_no}"
    count = max(1, bytes_ // SIZE)
    leader, replicas = asyncio.run(_create(srv.ports[0], stream, BEFORE))
    try:
        results, _ = _phase(srv, [Job("publish", leader, [stream], {"count": count,
                                                                     "size": SIZE})])
        confirmed = sum(int(r.get("confirmed", 0)) for r in results)
        new = next(p for p in srv.ports if p != leader and p not in replicas)
        baseline = srv.add_baseline(stream)
        os.sync()  # the fill's writeback is not the add's to pay for
        sampler = RssSampler(srv)
        sampler.start()
        t0 = time.monotonic()
        try:
            srv.add_member(stream, new)
            command_s = time.monotonic() - t0
            in_sync_s, not_yet_s, polls, by = _until_in_sync(srv, stream, new, baseline, count,
                                                             t0, command_s)
        finally:
            sampler.stop()
        read = in_sync_s is not None and asyncio.run(_holds(new, stream, count - 1, 60))
        row = add_member_row(srv.name, count, confirmed, command_s, in_sync_s, read, polls,
                             {"leader": leader, "members_before": [leader, *replicas],
                              "added": new, "in_sync_by": by,
                              "not_in_sync_s": round(not_yet_s, 3),
                              "server_errors": _errors(results)})
        row.rss_peak_mb, row.rss_end_mb = sampler.peak_mb, sampler.last_mb
        if in_sync_s is not None:
            row.broker_cpu_pct = sampler.cpu_pct(t0, t0 + in_sync_s)
        return [row]
    except (BenchError, ServerError) as e:
        return [add_member_row(srv.name, count, 0, None, None, False, 0, {"error": str(e)})]
    finally:
        _delete_sync(srv, stream, leader)


def _until_in_sync(srv: ClusterServer, stream: str, new: int, baseline: int, count: int,
                   t0: float, command_s: float) -> tuple[float | None, float, int, str]:
    """Look at the server's status until it says the member on ``new`` is in sync: (seconds
    from ``t0`` to the look that said so or None, seconds to the last look that said not yet
    (the command's end if none did), looks, "status" or "consumer" (the status did not say:
    a consumer on the new member waited for the last message instead))."""
    polls, not_yet = 0, command_s
    while time.monotonic() - t0 < ADD_TIMEOUT_S:
        polls += 1
        said = srv.member_in_sync(stream, new, baseline)
        if said is None:
            left = ADD_TIMEOUT_S - (time.monotonic() - t0)
            held = asyncio.run(_holds(new, stream, count - 1, left))
            return (time.monotonic() - t0 if held else None), not_yet, polls, "consumer"
        if said:
            return time.monotonic() - t0, not_yet, polls, "status"
        not_yet = time.monotonic() - t0
        time.sleep(POLL_S)
    return None, not_yet, polls, "status"
