"""Test certificates made with the openssl CLI (tests skip without it): one CA, a server
certificate for 127.0.0.1 and localhost, and client certificates, as PEM files named
``<name>.crt``/``<name>.key`` in a folder. The ``certs`` fixture of tests/conftest.py makes
the usual set; ``make_ca`` and ``issue`` add more (another CA, another server certificate)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
#: the server certificates' subjectAltName, as an openssl extension file in the folder
SAN_EXT = "san.ext"


def need_openssl() -> None:
    """Skip the calling test when the openssl command is not installed."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make test certificates")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(d: Path, name: str = "ca", cn: str = "streamlet-test-ca") -> None:
    """A self-signed CA, ``<name>.crt``/``<name>.key`` in ``d``."""
    need_openssl()
    _openssl("req", "-x509", *EC, "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", "2",
             "-subj", f"/CN={cn}", cwd=d)


def issue(d: Path, name: str, cn: str, server: bool = False, ca: str = "ca",
          san: str = "IP:127.0.0.1,DNS:localhost") -> None:
    """``<name>.crt``/``<name>.key`` (a new key) signed by the CA ``<ca>.crt`` of ``d``; a
    ``server`` certificate also names ``san`` (subjectAltName: 127.0.0.1 and localhost)."""
    need_openssl()
    _openssl("req", *EC, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={cn}",
             cwd=d)
    extra: list[str] = []
    if server:
        (d / SAN_EXT).write_text(f"subjectAltName={san}\n")
        extra = ["-extfile", SAN_EXT]
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
             "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", *extra, cwd=d)


def make_certs(d: Path, clients: Sequence[str] | Mapping[str, str] = ("client",)) -> Path:
    """``ca.crt``/``ca.key``, ``server.crt``/``server.key`` (CN localhost, SAN 127.0.0.1 and
    localhost) and ``<name>.crt``/``<name>.key`` per client, in ``d`` (made if missing).
    ``clients``: file names (each its own CN), or file names to CNs."""
    need_openssl()
    d.mkdir(parents=True, exist_ok=True)
    make_ca(d)
    issue(d, "server", "localhost", server=True)
    names = clients if isinstance(clients, Mapping) else {c: c for c in clients}
    for name, cn in names.items():
        issue(d, name, cn)
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
