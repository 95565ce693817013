"""server.users_file and [cluster] directory_file: the files a pod mounts beside its config; and
the data directory's super streams record, unreadable: the same one-line error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from streamlet.broker.config.model import ConfigError
from streamlet.broker.protocols import load


def _config(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "c.toml"
    p.write_text(text)
    return p


def test_users_file_adds_users_to_the_main_file(tmp_path: Path) -> None:
    (tmp_path / "users.toml").write_text(
        '[[users]]\nname = "app"\npassword = "s3"\nloopback_only = false\n')
    cfg = load(_config(tmp_path, f'[server]\nusers_file = "{tmp_path}/users.toml"\n'
                                 '[[users]]\nname = "ops"\npassword = "o"\n'))
    assert [(u.name, u.password) for u in cfg.users] == [("ops", "o"), ("app", "s3")]
    assert cfg.users_file == tmp_path / "users.toml"


def test_users_file_alone_replaces_the_default_guest(tmp_path: Path) -> None:
    (tmp_path / "users.toml").write_text('[[users]]\nname = "app"\npassword = "s3"\n')
    cfg = load(_config(tmp_path, f'[server]\nusers_file = "{tmp_path}/users.toml"\n'))
    assert [u.name for u in cfg.users] == ["app"]


@pytest.mark.parametrize("content, message", [
    (None, "cannot read users file"),
    ("[[users]\n", "is not valid TOML"),
    ('[server]\nport = 1\n', "may hold only [[users]]"),
    ('[[users]]\nname = "app"\n', "needs a name and a password"),
    ('[[users]]\nname = "ops"\npassword = "x"\n', "user 'ops' is defined twice"),
])
def test_users_file_problems_are_one_clear_error(tmp_path: Path, content: str | None,
                                                 message: str) -> None:
    if content is not None:
        (tmp_path / "users.toml").write_text(content)
    with pytest.raises(ConfigError) as e:
        load(_config(tmp_path, f'[server]\nusers_file = "{tmp_path}/users.toml"\n'
                               '[[users]]\nname = "ops"\npassword = "o"\n'))
    assert message in str(e.value) and "\n" not in str(e.value)


@pytest.mark.process
def test_a_missing_users_file_stops_serve_with_one_line(tmp_path: Path) -> None:
    cfg = _config(tmp_path, f'[server]\nusers_file = "{tmp_path}/nope.toml"\n')
    run = subprocess.run([sys.executable, "-m", "streamlet", "serve", "--config", str(cfg),
                          "--data-dir", str(tmp_path / "d")], capture_output=True, text=True,
                         timeout=30)
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot read users file" in lines[0] and "nope.toml" in lines[0]


@pytest.mark.process
def test_an_unreadable_super_streams_record_stops_serve_with_one_line(tmp_path: Path) -> None:
    data = tmp_path / "d"
    data.mkdir()
    (data / "superstreams.json").write_text("{not json")
    run = subprocess.run([sys.executable, "-m", "streamlet", "serve", "--config",
                          str(_config(tmp_path, "")), "--data-dir", str(data)],
                         capture_output=True, text=True, timeout=30)
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot read" in lines[0] and "superstreams.json" in lines[0]


def test_directory_file_key(tmp_path: Path) -> None:
    assert load(_config(tmp_path, "")).directory_file is None
    cfg = load(_config(tmp_path, '[cluster]\ndirectory_file = "/etc/streamlet/directory/s.json"\n'))
    assert cfg.directory_file == Path("/etc/streamlet/directory/s.json")


@pytest.mark.parametrize("server, limit", [
    ("", 16 << 20),                                       # the default
    ("frame_limit = 1073741824\n", 1 << 30),
    ("frame_max = 0\nframe_limit = 8192\n", 8192),        # no frame_max offered, still bounded
])
def test_frame_limit(tmp_path: Path, server: str, limit: int) -> None:
    assert load(_config(tmp_path, f"[server]\n{server}")).frame_limit == limit


@pytest.mark.parametrize("server", ["frame_limit = 4096\n",
                                    "frame_max = 2097152\nframe_limit = 1048576\n"])
def test_a_frame_limit_under_frame_max_is_refused(tmp_path: Path, server: str) -> None:
    with pytest.raises(ConfigError, match="frame_limit must be at least"):
        load(_config(tmp_path, f"[server]\n{server}"))


def test_request_timeout(tmp_path: Path) -> None:
    assert load(_config(tmp_path, "[server]\n")).request_timeout == 60
    assert load(_config(tmp_path, "[server]\nrequest_timeout = 5\n")).request_timeout == 5
    with pytest.raises(ConfigError, match="request_timeout must be at least 1"):
        load(_config(tmp_path, "[server]\nrequest_timeout = 0\n"))
