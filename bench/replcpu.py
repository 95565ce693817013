"""CPU seconds per GB published on each broker of a 3-member stream: what replication costs the
leader and each follower, whatever else shares the cores (throughput does not say that here).

    python -m bench.replcpu [--repeat 4] [--count 200000] [--size 1000]

Starts ``streamlet cluster up --nodes 3`` as the replicated workload does, and for each repeat
creates a 3-member stream, publishes ``count`` x ``size`` B to its leader with the bench's
publisher (until all are confirmed), and reads each broker process's user+system CPU time
(/proc/<pid>/stat) before and after. Prints one JSON line per repeat and the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

from .replicated import MEMBERS, _create, _delete_sync
from .servers import StreamletCluster, cpu_seconds
from .workers import Job, run_parallel


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=4)
    ap.add_argument("--count", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1000)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="replcpu-") as root:
        srv = StreamletCluster.start(Path(root))
        try:
            for run in range(args.repeat):
                stream = f"replcpu-{run}"
                leader, replicas = asyncio.run(_create(srv.ports[0], stream, MEMBERS))
                time.sleep(0.5)  # the followers' links are up
                pids = dict(zip(srv.ports, srv.node_pids(), strict=True))
                before = {port: cpu_seconds(pid) for port, pid in pids.items()}
                res = run_parallel([Job("publish", leader, [stream],
                                        {"count": args.count, "size": args.size})])[0]
                time.sleep(0.3)  # the follower not in the majority writes its last chunks
                after = {port: cpu_seconds(pid) for port, pid in pids.items()}
                gb = args.count * args.size / 1e9
                lead = (after[leader] - before[leader]) / gb
                fol = [(after[p] - before[p]) / gb for p in replicas]
                row = {"leader_s_per_gb": round(lead, 2),
                       "followers_s_per_gb": [round(x, 2) for x in fol],
                       "total_s_per_gb": round(lead + sum(fol), 2),
                       "msg_s": int(res["confirmed"] / (res["t1"] - res["t0"]))}
                print(json.dumps(row), flush=True)
                rows.append(row)
                _delete_sync(srv, stream, leader)
        finally:
            srv.stop()
    print(json.dumps({
        "median_leader_s_per_gb": statistics.median(r["leader_s_per_gb"] for r in rows),
        "median_follower_s_per_gb": statistics.median(
            x for r in rows for x in r["followers_s_per_gb"]),
        "median_total_s_per_gb": statistics.median(r["total_s_per_gb"] for r in rows)}))


if __name__ == "__main__":
    main()
