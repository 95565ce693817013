"""`streamlet-operator`: run the kopf operator with streamlet's handlers."""

from __future__ import annotations

import argparse
import logging

import kopf

from . import metrics
from .settings import SETTINGS


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="streamlet-operator", description=__doc__)
    parser.add_argument("-n", "--namespace", action="append", default=[],
                        help="watch this namespace (repeatable); default: all namespaces")
    parser.add_argument("--liveness", default="http://0.0.0.0:8080/healthz",
                        help="kopf's liveness endpoint URL ('' to disable)")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)

    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from . import handlers  # noqa: F401  (registers the handlers with kopf)

    metrics.serve(SETTINGS.metrics_port)
    kopf.run(
        # One operator replica: no peering resources needed (the Deployment uses Recreate).
        standalone=True,
        clusterwide=not args.namespace,
        namespaces=args.namespace,
        liveness_endpoint=args.liveness or None,
    )


if __name__ == "__main__":
    main()
