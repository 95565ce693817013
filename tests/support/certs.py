"""Test certificates made with the openssl CLI (tests skip without it): one CA, a server
certificate for 127.0.0.1 and localhost, and client certificates, as files in a folder."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certs(d: Path, clients: tuple[str, ...] = ("client",)) -> Path:
    """``ca.crt``/``ca.key``, ``server.crt``/``server.key`` (CN localhost, SAN 127.0.0.1 and
    localhost) and ``<name>.crt``/``<name>.key`` per client (CN the name), in ``d``."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make test certificates")
    d.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", *EC, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
             "-subj", "/CN=streamlet-test-ca", cwd=d)
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name, cn in (("server", "localhost"), *((c, c) for c in clients)):
        _openssl("req", *EC, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj",
                 f"/CN={cn}", cwd=d)
        extra = ["-extfile", "san.ext"] if name == "server" else []
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", *extra, cwd=d)
    return d


def tls_only_config(d: Path, port: int, verify_peer: bool) -> str:
    """A broker config serving TLS only on ``port`` (give the broker ``--port`` the same: no
    plain listener takes it, and it is the port waited on) with the certificates of ``d``."""
    return f'''
[listeners.rabbitmq]
enabled = false

[tls]
port = {port}
certfile = "{d / 'server.crt'}"
keyfile = "{d / 'server.key'}"
cafile = "{d / 'ca.crt'}"
verify_peer = {str(verify_peer).lower()}
'''
