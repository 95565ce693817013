"""The management API over HTTPS ([listeners.http] tls_port) on a real broker: served with
[tls]'s certificate, which urllib verifies against the test CA, without the client
certificate the broker's verify_peer asks of stream clients (its login is Basic auth); plain
HTTP on that port gets no answer; with tls_port alone there is no plain HTTP port at all, the
broker announces its HTTPS port, and the CLI's lists reach it with --tls."""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from streamlet.cli.mgmt import announced_properties
from tests.cli.support import cli, stderr_line
from tests.support.brokers import BrokerProcess, distinct_ports

pytestmark = pytest.mark.process

USER, PASSWORD = "admin", "admin-pw"


def _config(d: Path, certs: Path, tls_port: int, https_port: int, plain_http: int | None) -> Path:
    plain = f"port = {plain_http}\n" if plain_http else ""
    path = d / "broker.toml"
    path.write_text(f"""
[[users]]
name = "{USER}"
password = "{PASSWORD}"

[tls]
port = {tls_port}
certfile = "{certs / 'server.crt'}"
keyfile = "{certs / 'server.key'}"
cafile = "{certs / 'ca.crt'}"
verify_peer = true

[listeners.http]
tls_port = {https_port}
{plain}""")
    return path


def get(url: str, ctx: ssl.SSLContext | None = None) -> Any:
    auth = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    req = urllib.request.Request(url, headers={"Authorization": f"Basic {auth}"})
    with urllib.request.urlopen(req, timeout=10, context=ctx) as resp:
        return json.loads(resp.read())


def ca_only(certs: Path) -> ssl.SSLContext:
    """What a script's HTTPS client has: the CA, no client certificate."""
    return ssl.create_default_context(cafile=str(certs / "ca.crt"))


def test_https_only(broker_factory: Callable[..., BrokerProcess], tmp_path: Path,
                    certs: Path) -> None:
    tls_port, https, plain_http = distinct_ports(3)
    b = broker_factory(config=_config(tmp_path, certs, tls_port, https, None),
                       extra_args=["--metrics-port", "0"])
    b.wait_listening([tls_port, https])
    overview = get(f"https://127.0.0.1:{https}/api/overview", ca_only(certs))
    assert [(lst["protocol"], lst["port"]) for lst in overview["listeners"]
            if lst["protocol"].startswith("http")] == [("https", https)]
    # plaintext on the HTTPS port: no HTTP answer, the handshake fails and the broker closes
    with pytest.raises((http.client.HTTPException, ConnectionError, OSError)):
        get(f"http://127.0.0.1:{https}/api/overview")
    # a client that does not trust the CA is refused by its own check
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        get(f"https://127.0.0.1:{https}/api/overview", ssl.create_default_context())
    # what the broker announces: no plain HTTP port, the HTTPS one
    props = announced_properties("127.0.0.1", b.port)
    assert (props["streamlet_http_port"], props["streamlet_https_port"]) == ("0", str(https))
    # the CLI: over TLS to the stream TLS port, it finds and uses the HTTPS port
    login = ["--host", "127.0.0.1", "--user", USER, "--password", PASSWORD]
    mtls = ["--tls", "--ca-cert", str(certs / "ca.crt"), "--cert", str(certs / "client.crt"),
            "--key", str(certs / "client.key")]
    res = cli(*login, "--port", str(tls_port), *mtls, "connections", "list", "--json")
    assert res.returncode == 0, res.stderr
    res = cli(*login, "--port", str(b.port), "streams", "list", check=False)
    assert res.returncode == 1
    assert stderr_line(res.stderr) == (
        f"streamlet: the broker at 127.0.0.1:{b.port} serves its management API over HTTPS "
        f"only (port {https}): give --tls (and --ca-cert) and its TLS --port")


def test_https_beside_http(broker_factory: Callable[..., BrokerProcess], tmp_path: Path,
                           certs: Path) -> None:
    tls_port, https, plain_http = distinct_ports(3)
    b = broker_factory(config=_config(tmp_path, certs, tls_port, https, plain_http),
                       extra_args=["--metrics-port", "0"])
    b.wait_listening([tls_port, https, plain_http])
    secure = get(f"https://127.0.0.1:{https}/api/overview", ca_only(certs))
    plain = get(f"http://127.0.0.1:{plain_http}/api/overview")
    assert [(lst["protocol"], lst["port"]) for lst in secure["listeners"]
            if lst["protocol"].startswith("http")] == [("http", plain_http), ("https", https)]
    assert secure["listeners"] == plain["listeners"]
    props = announced_properties("127.0.0.1", b.port)
    assert (props["streamlet_http_port"], props["streamlet_https_port"]) == (
        str(plain_http), str(https))
