"""The metrics endpoint over HTTPS ([listeners.metrics] tls_port) on a real broker: /metrics
and /ready served with [tls]'s certificate, which urllib verifies against the test CA, with no
client certificate asked for although verify_peer asks stream clients for one; the plain port
beside it answers the same; plaintext on the HTTPS port gets no answer."""

from __future__ import annotations

import http.client
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.brokers import BrokerProcess, distinct_ports

pytestmark = pytest.mark.process


def _config(d: Path, certs: Path, tls_port: int, metrics: int, metrics_tls: int) -> Path:
    path = d / "broker.toml"
    path.write_text(f"""
[tls]
port = {tls_port}
certfile = "{certs / 'server.crt'}"
keyfile = "{certs / 'server.key'}"
cafile = "{certs / 'ca.crt'}"
verify_peer = true

[listeners.metrics]
port = {metrics}
tls_port = {metrics_tls}
""")
    return path


def fetch(url: str, ctx: ssl.SSLContext | None = None) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=10, context=ctx) as resp:
        return resp.status, resp.read().decode()


def test_scrape_over_https(broker_factory: Callable[..., BrokerProcess], tmp_path: Path,
                           certs: Path) -> None:
    tls_port, metrics, metrics_tls = distinct_ports(3)
    b = broker_factory(config=_config(tmp_path, certs, tls_port, metrics, metrics_tls),
                       extra_args=["--http-port", "0"])
    b.wait_listening([tls_port, metrics, metrics_tls])
    # what Prometheus has: the CA, no client certificate
    ca_only = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    status, secure = fetch(f"https://127.0.0.1:{metrics_tls}/metrics", ca_only)
    assert status == 200 and "streamlet_" in secure and "process_cpu_seconds_total" in secure
    assert fetch(f"https://127.0.0.1:{metrics_tls}/ready", ca_only)[0] == 200
    # the plain port beside it (the readiness probe's) serves the same endpoint
    status, plain = fetch(f"http://127.0.0.1:{metrics}/metrics")
    assert status == 200 and "streamlet_" in plain
    assert fetch(f"http://127.0.0.1:{metrics}/ready")[0] == 200
    # plaintext on the HTTPS port: no HTTP answer
    with pytest.raises((http.client.HTTPException, ConnectionError, OSError)):
        fetch(f"http://127.0.0.1:{metrics_tls}/metrics")
    # a client that does not trust the CA is refused by its own check
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        fetch(f"https://127.0.0.1:{metrics_tls}/metrics", ssl.create_default_context())
