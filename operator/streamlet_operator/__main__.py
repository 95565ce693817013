"""`streamlet-operator`: run the kopf operator with streamlet's handlers."""

from __future__ import annotations

import argparse
import logging
import secrets
import time
from typing import Any

import kopf

from . import metrics
from .settings import SETTINGS

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
    parser.add_argument("--peering", default="",
                        help="the kopf peering object (a KopfPeering in each watched namespace, "
                             "or a ClusterKopfPeering when watching all) shared by the "
                             "operator's replicas: only one of them acts at a time; default: "
                             "none (one replica only, no peering)")
    parser.add_argument("--priority", type=int, default=None,
                        help="this replica's peering priority (the highest acts); default: "
                             "from the start time, the longest-running replica first")
    parser.add_argument("-v", "--verbose", action="store_true")
    return parser.parse_args(argv)


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
        # One operator replica: no peering resources needed.
        options["standalone"] = True
    return options


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from . import handlers  # noqa: F401  (registers the handlers with kopf)

    metrics.serve(SETTINGS.metrics_port)
    kopf.run(**run_options(args))


if __name__ == "__main__":
    main()
