"""`streamlet-operator`: run the kopf operator with streamlet's handlers."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import secrets
import socket
import sys
import time
from typing import Any
from urllib.parse import urlsplit

import kopf

from . import metrics
from .kube import Kube
from .lease import LeaderElector, check_timings
from .settings import SETTINGS

log = logging.getLogger("streamlet_operator")

#: Priorities go down with the start time (one step per second) and a random tie-breaker
#: below: of two replicas, the one started first stays active and the later one waits.
_TIE_BREAKER = 10**6
_EPOCH_END = 2**32


def start_priority(now: float | None = None) -> int:
    """A peering priority for a replica starting at ``now`` (an earlier start ranks higher;
    the random low digits keep two replicas started in the same second apart: kopf pauses
    every replica when two of the same priority meet)."""
    started = int(time.time() if now is None else now)
    return (_EPOCH_END - started) * _TIE_BREAKER + secrets.randbelow(_TIE_BREAKER)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="streamlet-operator", description=__doc__)
    parser.add_argument("-n", "--namespace", action="append", default=[],
                        help="watch this namespace (repeatable); default: all namespaces")
    parser.add_argument("--liveness", default="http://0.0.0.0:8080/healthz",
                        help="kopf's liveness endpoint URL ('' to disable)")
    ha = parser.add_mutually_exclusive_group()
    ha.add_argument("--lease", default="",
                    help="the coordination.k8s.io Lease the operator's replicas elect their "
                         "leader with: only the holder runs, the others wait to take it; its "
                         "leaseTransitions is the fencing token the brokers check; default: "
                         "none (one replica only)")
    ha.add_argument("--peering", default="",
                    help="instead of --lease (no fencing): the kopf peering object (a "
                         "KopfPeering in each watched namespace, or a ClusterKopfPeering when "
                         "watching all) shared by the operator's replicas")
    parser.add_argument("--lease-namespace", default=None,
                        help="the Lease's namespace; default: $STREAMLET_OPERATOR_NAMESPACE "
                             "(the operator's own, set by the chart), else the first "
                             "--namespace, else 'default'")
    parser.add_argument("--identity", default=None,
                        help="this replica's name in the Lease; default: $POD_ID, else the "
                             "host name")
    parser.add_argument("--lease-duration", type=float, default=15.0,
                        help="seconds a Lease not renewed stays its holder's (default 15)")
    parser.add_argument("--lease-renew-deadline", type=float, default=10.0,
                        help="seconds a leader goes on without a renewal before it stops "
                             "(exits 1; below --lease-duration; default 10)")
    parser.add_argument("--lease-retry", type=float, default=2.0,
                        help="seconds between tries to take or renew the Lease (default 2)")
    parser.add_argument("--priority", type=int, default=None,
                        help="this replica's peering priority (the highest acts); default: "
                             "from the start time, the longest-running replica first")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    why = check_timings(args.lease_duration, args.lease_renew_deadline, args.lease_retry)
    if args.lease and why is not None:
        parser.error(why)
    return args


def run_options(args: argparse.Namespace) -> dict[str, Any]:
    """kopf.run's keyword arguments for the command line ``args``."""
    settings = kopf.OperatorSettings()
    if args.namespace:
        # Named namespaces only: no listing of all namespaces (nor of the CRDs), which a
        # namespaced install's RBAC does not grant (charts/streamlet, rbac.scope=namespace).
        settings.scanning.disabled = True
    options: dict[str, Any] = {
        "settings": settings,
        "clusterwide": not args.namespace,
        "namespaces": args.namespace,
        "liveness_endpoint": args.liveness or None,
    }
    if args.peering:
        options.update(standalone=False, peering_name=args.peering,
                       priority=start_priority() if args.priority is None else args.priority)
    else:
        # One replica, or the Lease's holder (kopf starts once it is taken): no peering.
        options["standalone"] = True
    return options


def lease_namespace(args: argparse.Namespace) -> str:
    if args.lease_namespace:
        return str(args.lease_namespace)
    if SETTINGS.namespace:
        return SETTINGS.namespace
    return str(args.namespace[0]) if args.namespace else "default"


def identity(args: argparse.Namespace) -> str:
    return str(args.identity or os.environ.get("POD_ID") or socket.gethostname())


def run(args: argparse.Namespace, kube: Kube | None = None, **extra: Any) -> None:
    """Run the operator: at once, or with --lease once this replica holds the Lease (``kube``:
    where the Lease is; default: in-cluster or the kubeconfig, as the handlers')."""
    options = {**run_options(args), **extra}
    if not args.lease:
        kopf.run(**options)
        return
    asyncio.run(lead(args, options, kube))


async def lead(args: argparse.Namespace, options: dict[str, Any], kube: Kube | None) -> None:
    """Wait for the Lease (the liveness URL answering meanwhile), run kopf while it is held;
    stopped (SIGTERM), release it; lost, exit at once with 1, as client-go's users do: no
    handler of a deposed leader goes on, and the pod restarts as a candidate."""
    if kube is None:
        from .handlers.lifecycle import default_kube

        kube = default_kube(options["settings"])
    elector = LeaderElector(kube, lease_namespace(args), args.lease, identity(args),
                            duration=args.lease_duration, renew_deadline=args.lease_renew_deadline,
                            retry=args.lease_retry)
    waiting = await _waiting_liveness(args.liveness)
    try:
        await elector.acquire()
    finally:
        if waiting is not None:
            await waiting.cleanup()
    keeper = asyncio.create_task(elector.keep())
    operator = asyncio.create_task(kopf.operator(**options))
    done, _ = await asyncio.wait({keeper, operator}, return_when=asyncio.FIRST_COMPLETED)
    if keeper in done:
        log.error("lease %s lost (%s): stopping at once", args.lease, keeper.result())
        logging.shutdown()
        sys.stdout.flush()
        os._exit(1)
    keeper.cancel()
    await elector.release()
    await kube.close()
    operator.result()


async def _waiting_liveness(url: str) -> Any:
    """A liveness endpoint for a replica waiting for the Lease (kopf serves it once it runs)."""
    if not url:
        return None
    from aiohttp import web

    parts = urlsplit(url)

    async def alive(_: web.Request) -> web.Response:
        return web.json_response({"waiting": "for the lease"})

    app = web.Application()
    app.router.add_get(parts.path or "/", alive)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, parts.hostname, parts.port or 80).start()
    return runner


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from . import handlers  # noqa: F401  (registers the handlers with kopf)

    metrics.serve(SETTINGS.metrics_port)
    run(args)


if __name__ == "__main__":
    main()
