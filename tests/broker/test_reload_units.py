"""reload.py's decisions as tables, [server] reload_interval, and ServerTls keeping its
certificate when a new one does not load (in memory: no broker process)."""

from __future__ import annotations

import shutil
import ssl
from dataclasses import replace
from functools import partial
from pathlib import Path

import pytest

from streamlet.broker.config.model import (
    DEFAULT_RELOAD_INTERVAL,
    BrokerConfig,
    ConfigError,
    Permission,
    TlsConfig,
    User,
)
from streamlet.broker.config.users import UsersFile, combine_users
from streamlet.broker.protocols import load
from streamlet.broker.reload import (
    changed_parts,
    check_users,
    fingerprint,
    fingerprints,
    replication_in_use,
    watched,
)
from streamlet.broker.tls import ServerTls

U, C, K, A = Path("/u/users.toml"), Path("/t/tls.crt"), Path("/t/tls.key"), Path("/t/ca.crt")
PARTS = {"users": (U,), "tls": (C, K, A)}


@pytest.mark.parametrize(("before", "now", "expected"), [
    ({U: "1", C: "2", K: "3", A: "4"}, {U: "1", C: "2", K: "3", A: "4"}, []),
    ({U: "1", C: "2", K: "3", A: "4"}, {U: "9", C: "2", K: "3", A: "4"}, ["users"]),
    ({U: "1", C: "2", K: "3", A: "4"}, {U: "1", C: "2", K: "9", A: "4"}, ["tls"]),
    ({U: "1", C: "2", K: "3", A: "4"}, {U: "1", C: "2", K: "3", A: "9"}, ["tls"]),
    ({U: "1", C: "2", K: "3", A: "4"}, {U: "9", C: "9", K: "9", A: "4"}, ["users", "tls"]),
    # a file gone (unreadable) is a change, and so is its coming back
    ({U: "1", C: "2", K: "3", A: "4"}, {U: None, C: "2", K: "3", A: "4"}, ["users"]),
    ({U: None, C: "2", K: "3", A: "4"}, {U: "1", C: "2", K: "3", A: "4"}, ["users"]),
    ({U: None, C: "2", K: "3", A: "4"}, {U: None, C: "2", K: "3", A: "4"}, []),
])
def test_changed_parts(before: dict[Path, str | None], now: dict[Path, str | None],
                       expected: list[str]) -> None:
    assert changed_parts(PARTS, before, now) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(("cfg", "expected"), [
    (BrokerConfig(), {}),
    (BrokerConfig(users_file=U), {"users": (U,)}),
    (BrokerConfig(tls=TlsConfig(C, K)), {"tls": (C, K)}),
    (BrokerConfig(users_file=U, tls=TlsConfig(C, K, cafile=A)), {"users": (U,), "tls": (C, K, A)}),
])
def test_watched(cfg: BrokerConfig, expected: dict[str, tuple[Path, ...]]) -> None:
    assert watched(cfg) == expected


def test_fingerprint_follows_a_symlink_swap(tmp_path: Path) -> None:
    (tmp_path / "v1").mkdir()
    (tmp_path / "v2").mkdir()
    (tmp_path / "v1" / "f").write_text("one")
    (tmp_path / "v2" / "f").write_text("two")
    (tmp_path / "..data").symlink_to("v1")
    (tmp_path / "f").symlink_to("..data/f")
    first = fingerprint(tmp_path / "f")
    (tmp_path / "tmp").symlink_to("v2")
    (tmp_path / "tmp").replace(tmp_path / "..data")
    assert first is not None and fingerprint(tmp_path / "f") not in (first, None)
    assert fingerprint(tmp_path / "missing") is None


ADMIN, APP = User("admin", "a"), User("app", "b")
BASE = BrokerConfig(users=(ADMIN, APP))
CLUSTER = replace(BASE, peers=(("b-0", 5552), ("b-1", 5552)), member=0)
LINKS = "the brokers log in to each other as it"


@pytest.mark.parametrize(("cfg", "users", "error"), [
    (BASE, (ADMIN,), None),
    (BASE, (), "no user left"),
    (replace(BASE, replication_user="app"), (ADMIN,), "replication_user 'app' would be removed"),
    (replace(BASE, driver_user="app"), (ADMIN,), "driver_user 'app' would be removed"),
    # alone (no cluster), the first user may go: nothing logs in with it
    (BASE, (APP,), None),
    (CLUSTER, (ADMIN, User("app", "new")), None),
    (CLUSTER, (User("admin", "new"), APP), LINKS),
    (CLUSTER, (APP,), LINKS),
    # another user first (the operator sorts its users file): the links keep theirs, still valid
    (CLUSTER, (User("aaa", "x"), APP, ADMIN), None),
    (replace(BASE, directory_file=Path("/d.json")), (APP,), LINKS),
    (replace(CLUSTER, replication_user="app"), (ADMIN, APP, User("c", "c")), None),
    (replace(CLUSTER, replication_user="app"), (User("app", "other"), ADMIN), LINKS),
])
def test_check_users(cfg: BrokerConfig, users: tuple[User, ...], error: str | None) -> None:
    replication = replication_in_use(cfg)
    if error is None:
        assert check_users(cfg, users, replication) == []
    else:
        with pytest.raises(ConfigError, match=error):
            check_users(cfg, users, replication)


def test_check_users_warns_of_dormant_permissions() -> None:
    cfg = replace(BASE, config_permissions=(Permission("app", "/"),))
    warnings = check_users(cfg, (ADMIN,), None)
    assert len(warnings) == 1 and "'app'" in warnings[0] and "stay in force" in warnings[0]
    assert check_users(cfg, (ADMIN, APP), None) == []


ALICE_TOML = '[[users]]\nname = "alice"\npassword = "a"\n'
MAIN_PERM = Permission("admin", "/", "", "", "^admin$")


@pytest.mark.parametrize(("text", "expected"), [
    # users only, as before
    (ALICE_TOML, UsersFile((User("alice", "a"),))),
    # a permission for a user of the file, on the main config's vhosts
    (ALICE_TOML + '[[permissions]]\nuser = "alice"\nvhost = "t"\nconfigure = ""\nwrite = ""\n'
     'read = "^x$"\n', UsersFile((User("alice", "a"),), (Permission("alice", "t", "", "", "^x$"),))),
    # the fields default as the main config's do
    (ALICE_TOML + '[[permissions]]\nuser = "alice"\nvhost = "/"\n',
     UsersFile((User("alice", "a"),), (Permission("alice", "/"),))),
    # a main config user may be restricted from the file
    ('[[permissions]]\nuser = "m"\nvhost = "t"\nread = ""\n',
     UsersFile((), (Permission("m", "t", ".*", ".*", ""),))),
    ('[[permissions]]\nuser = "nobody"\nvhost = "/"\n', "'nobody' in .*: no such user"),
    (ALICE_TOML + '[[permissions]]\nuser = "alice"\nvhost = "nope"\n', "unknown vhost 'nope'"),
    (ALICE_TOML + '[[permissions]]\nuser = "alice"\nvhost = "/"\nread = "("\n',
     "not a regular expression"),
    (ALICE_TOML + '[[permissions]]\nuser = "alice"\n', "needs a user and a vhost"),
    (ALICE_TOML + '[[permissions]]\nuser = "alice"\nvhost = "/"\n' * 2, "given twice"),
    # the main config has (admin, "/") already: which would win is not guessed
    ('[[permissions]]\nuser = "admin"\nvhost = "/"\n', "admin on vhost '/' are given twice"),
    (ALICE_TOML + '[[vhosts]]\nname = "x"\n', "only \\[\\[users\\]\\] and \\[\\[permissions"),
    ('permissions = "all"\n' + ALICE_TOML, "must be a list of tables"),
])
def test_users_file_permissions(tmp_path: Path, text: str, expected: UsersFile | str) -> None:
    path = tmp_path / "users.toml"
    path.write_text(text)
    config_users = (User("admin", "p"), User("m", "q"))
    call = partial(combine_users, config_users, (MAIN_PERM,), ("/", "t"), path)
    if isinstance(expected, str):
        with pytest.raises(ConfigError, match=expected):
            call()
    else:
        assert call() == ((*config_users, *expected.users), (MAIN_PERM, *expected.permissions))


def test_users_file_permissions_at_start(tmp_path: Path) -> None:
    """load() reads them after the main config's [[vhosts]] and keeps the main config's apart."""
    (tmp_path / "users.toml").write_text(
        '[[users]]\nname = "f"\npassword = "p"\n'
        '[[permissions]]\nuser = "f"\nvhost = "t"\nwrite = ""\n')
    path = tmp_path / "b.toml"
    path.write_text('[server]\nusers_file = "users.toml"\n[[users]]\nname = "m"\npassword = "q"\n'
                    '[[vhosts]]\nname = "/"\n[[vhosts]]\nname = "t"\n'
                    '[[permissions]]\nuser = "m"\nvhost = "/"\n')
    cfg = load(path)
    assert cfg.config_permissions == (Permission("m", "/"),)
    assert cfg.permissions == (Permission("m", "/"), Permission("f", "t", ".*", "", ".*"))
    (tmp_path / "users.toml").write_text(
        '[[users]]\nname = "f"\npassword = "p"\n[[permissions]]\nuser = "f"\nvhost = "u"\n')
    with pytest.raises(ConfigError, match="unknown vhost 'u'"):
        load(path)


@pytest.mark.parametrize(("text", "expected"), [
    ("", DEFAULT_RELOAD_INTERVAL),
    ("reload_interval = 0", 0.0),
    ("reload_interval = 2.5", 2.5),
    ("reload_interval = 30", 30.0),
    ("reload_interval = -1", "reload_interval must be a number of seconds in 0..86400"),
    ('reload_interval = "5"', "reload_interval must be a number of seconds"),
    ("reload_interval = true", "reload_interval must be a number of seconds"),
    ("reload_interval = 100000", "reload_interval must be a number of seconds"),
])
def test_reload_interval(tmp_path: Path, text: str, expected: float | str) -> None:
    path = tmp_path / "b.toml"
    path.write_text(f"[server]\n{text}\n")
    if isinstance(expected, str):
        with pytest.raises(ConfigError, match=expected):
            load(path)
    else:
        assert load(path).reload_interval == expected


def test_config_users_are_kept_apart_from_the_users_file(tmp_path: Path) -> None:
    (tmp_path / "users.toml").write_text('[[users]]\nname = "f"\npassword = "p"\n')
    path = tmp_path / "b.toml"
    path.write_text('[server]\nusers_file = "users.toml"\n[[users]]\nname = "m"\npassword = "q"\n')
    cfg = load(path)
    assert [u.name for u in cfg.config_users] == ["m"]
    assert [u.name for u in cfg.users] == ["m", "f"]


@pytest.mark.process
def test_server_tls_keeps_its_certificate_when_the_new_one_does_not_load(tmp_path: Path,
                                                                         certs: Path) -> None:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    shutil.copy(certs / "server.crt", cert)
    shutil.copy(certs / "server.key", key)
    tls = ServerTls(TlsConfig(cert, key))
    first = tls.current
    assert tls.listening is first and first.sni_callback is not None
    shutil.copy(certs / "client.key", key)  # not the certificate's key
    with pytest.raises(ConfigError, match="cannot load certificates"):
        tls.reload()
    cert.write_text("not a certificate")
    with pytest.raises(ConfigError):
        tls.reload()
    assert tls.current is first
    shutil.copy(certs / "client.crt", cert)
    tls.reload()
    assert tls.current is not first and isinstance(tls.current, ssl.SSLContext)
    assert tls.listening is first  # the listeners keep theirs; its callback hands over


def test_fingerprints_of_every_watched_file(tmp_path: Path) -> None:
    users = tmp_path / "users.toml"
    users.write_text("")
    cfg = BrokerConfig(users_file=users, tls=TlsConfig(tmp_path / "c", tmp_path / "k"))
    assert fingerprints(cfg) == {users: fingerprint(users), tmp_path / "c": None,
                                 tmp_path / "k": None}
