"""Config sections for vhosts, permissions, TLS and limits, and the permission rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamlet.broker.access import AccessControl
from streamlet.broker.config.model import ConfigError
from streamlet.broker.protocols import load


def _load(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    p = tmp_path / "c.toml"
    p.write_text(text)
    return load(p)


def test_defaults_keep_the_old_behaviour(tmp_path: Path) -> None:
    cfg = _load(tmp_path, '[[users]]\nname = "app"\npassword = "x"\n')
    assert cfg.vhosts == ("/",) and cfg.permissions == () and cfg.tls is None
    assert cfg.max_connections == 10_000 and cfg.max_connections_per_user == 0  # the defaults
    acl = AccessControl(cfg)
    assert acl.vhost_allowed("app", "/") and acl.allowed("app", "/", "configure", "anything")


def test_permissions_follow_rabbitmq(tmp_path: Path) -> None:
    cfg = _load(tmp_path, '[[users]]\nname = "app"\npassword = "p"\n'
                '[[vhosts]]\nname = "/"\n[[vhosts]]\nname = "t"\n'
                '[[permissions]]\nuser = "app"\nvhost = "/"\nconfigure = "^app-"\nwrite = "orders"\nread = ""\n')
    acl = AccessControl(cfg)
    assert acl.allowed("app", "/", "configure", "app-1")
    assert not acl.allowed("app", "/", "configure", "x-app-1")  # anchored
    assert acl.allowed("app", "/", "write", "eu-orders-1")  # unanchored: matches anywhere
    assert not acl.allowed("app", "/", "read", "app-1")  # "" denies everything
    assert not acl.vhost_allowed("app", "t") and not acl.allowed("app", "t", "read", "x")
    assert acl.vhost_allowed("other", "t")  # no entries: full access


@pytest.mark.parametrize(("text", "message"), [
    ('[[permissions]]\nuser = "guest"\nvhost = "nope"\n', "unknown vhost"),
    ('[[permissions]]\nuser = "guest"\nvhost = "/"\nread = "("\n', "not a regular expression"),
    ('[[permissions]]\nuser = "nobody"\nvhost = "/"\n', "'nobody': no such user in"),
    ('[tls]\ncertfile = "a"\nkeyfile = "b"\nprot = 1\n', r"unknown key\(s\) in \[tls\]: prot"),
    ('[limits]\nmax_conections = 1\n', r"unknown key\(s\) in \[limits\]: max_conections"),
    ('[listeners.mega]\nport = 5553\nprot = 1\n', r"unknown key\(s\) in \[listeners.mega\]: prot"),
    ('[[vhosts]]\nname = "other"\n', 'must include "/"'),
    ('[tls]\nport = 5551\n', "needs certfile and keyfile"),
    ('[tls]\ncertfile = "a"\nkeyfile = "b"\nverify_peer = true\n', "verify_peer needs a cafile"),
    ('[limits]\nmax_connections = -1\n', "limits.max_connections"),
])
def test_bad_sections_are_named(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _load(tmp_path, text)
