"""``cluster.member``: an id, or "auto" (a StatefulSet pod's ordinal from its hostname), and
the environment's STREAMLET_MEMBER over the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamlet.broker.config import environment
from streamlet.broker.config.environment import member_from_hostname
from streamlet.broker.config.model import ConfigError
from streamlet.broker.protocols import load

PEERS = 'peers = ["b-0:5552", "b-1:5552", "b-2:5552", "b-3:5552"]\n'


@pytest.mark.parametrize(("hostname", "member"), [
    ("streamlet-0", 0),
    ("streamlet-2", 2),
    ("my-broker-12", 12),
    ("streamlet-3.streamlet-headless.apps.svc.cluster.local", 3),  # setHostnameAsFQDN
    ("b-65534", 65534),
])
def test_member_from_a_statefulset_hostname(hostname: str, member: int) -> None:
    assert member_from_hostname(hostname) == member


@pytest.mark.parametrize(("hostname", "why"), [
    ("laptop", "does not end in -<ordinal>"),
    ("streamlet-", "does not end in -<ordinal>"),
    ("streamlet-x1", "does not end in -<ordinal>"),
    ("streamlet-1x", "does not end in -<ordinal>"),
    ("host.streamlet-1", "does not end in -<ordinal>"),  # only the first label counts
    ("b-65535", "0..65534"),
])
def test_a_hostname_without_an_ordinal_is_a_clear_error(hostname: str, why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        member_from_hostname(hostname)


def test_auto_in_the_file_takes_the_hostname(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STREAMLET_MEMBER", raising=False)
    monkeypatch.setattr(environment.socket, "gethostname", lambda: "streamlet-2")
    cfg = tmp_path / "b.toml"
    cfg.write_text('[cluster]\nmember = "auto"\n' + PEERS)
    assert load(cfg).member == 2
    monkeypatch.setattr(environment.socket, "gethostname", lambda: "laptop")
    with pytest.raises(ConfigError, match="hostname 'laptop' does not end in -<ordinal>"):
        load(cfg)
    monkeypatch.setattr(environment.socket, "gethostname", lambda: "streamlet-7")
    with pytest.raises(ConfigError, match="cluster.member must be one of 0..3, got 7"):
        load(cfg)  # a pod beyond the peers the file lists


def test_the_environment_overrides_the_file(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(environment.socket, "gethostname", lambda: "streamlet-2")
    cfg = tmp_path / "b.toml"
    cfg.write_text("[cluster]\nmember = 1\n" + PEERS)
    monkeypatch.setenv("STREAMLET_MEMBER", "3")
    assert load(cfg).member == 3
    monkeypatch.setenv("STREAMLET_MEMBER", "auto")
    assert load(cfg).member == 2
    monkeypatch.delenv("STREAMLET_MEMBER")
    assert load(cfg).member == 1
    monkeypatch.setenv("STREAMLET_MEMBER", "two")
    with pytest.raises(ConfigError, match='STREAMLET_MEMBER must be an integer in 0..65534 or "auto"'):
        load(cfg)


@pytest.mark.parametrize("value", ['"self"', "-1", "65535", "true", "1.5"])
def test_a_bad_member_in_the_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             value: str) -> None:
    monkeypatch.delenv("STREAMLET_MEMBER", raising=False)
    cfg = tmp_path / "b.toml"
    cfg.write_text(f"[cluster]\nmember = {value}\n")
    with pytest.raises(ConfigError, match="cluster.member must be an integer in 0..65534"):
        load(cfg)


def test_driver_user_names_a_configured_user(tmp_path: Path) -> None:
    """[cluster] driver_user: the placement driver's identity (default: the replication user);
    a user that is not configured is a config error, as for replication_user."""
    users = '[[users]]\nname = "repl"\npassword = "r"\n[[users]]\nname = "ops"\npassword = "o"\n'
    path = tmp_path / "b.toml"
    path.write_text(f'[cluster]\ndriver_user = "ops"\n{users}')
    cfg = load(path)
    assert (cfg.driver_user, cfg.replication_credentials[0]) == ("ops", "repl")
    assert load(None).driver_user is None
    path.write_text(f'[cluster]\ndriver_user = "nobody"\n{users}')
    with pytest.raises(ConfigError, match="cluster.driver_user 'nobody' is not a configured user"):
        load(path)
