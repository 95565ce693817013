"""One operator replica in a process of its own, for tests/operator/test_peering.py and
test_lease.py: the production entry point's options and run (streamlet_operator.__main__:
--peering, --lease, --namespace, --priority) against an emulated API server, with its metrics
on a port of its own.

    python -m tests.operator.peering_main --api URL --metrics-port PORT [operator options]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--api", required=True)
    parser.add_argument("--metrics-port", type=int, required=True)
    ours, rest = parser.parse_known_args(argv)
    # The timers take their interval at import: short ones, so an active replica shows at once.
    os.environ.setdefault("STREAMLET_OPERATOR_BROKER_INTERVAL", "1")
    os.environ.setdefault("STREAMLET_OPERATOR_STREAM_INTERVAL", "1")

    import kopf
    from prometheus_client import start_http_server

    import streamlet_operator.handlers  # noqa: F401  (registers the handlers)
    from streamlet_operator.__main__ import parse, run
    from streamlet_operator.kube import Kube
    from streamlet_operator.runtime import Runtime

    @kopf.on.login()
    def _login(**_: Any) -> kopf.ConnectionInfo:
        # Also keeps kopf from looking for a kubeconfig.
        return kopf.ConnectionInfo(server=ours.api, insecure=True)

    async def _guest(namespace: str, broker: str) -> tuple[str, str]:
        return "guest", "guest"

    args = parse(["--liveness", "", *rest])
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    start_http_server(ours.metrics_port, addr="127.0.0.1")  # the operator's metrics, loopback
    runtime = Runtime(kube=Kube(ours.api, insecure=True), credentials=_guest)
    run(args, kube=Kube(ours.api, insecure=True), memo=kopf.Memo(runtime=runtime))


if __name__ == "__main__":
    main()
