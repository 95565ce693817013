"""Paths in a config file are relative to the file's folder, whatever the working directory
(a broker started from elsewhere, `cluster up` copying the file into each node's folder)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from streamlet.broker.config.environment import absolute_paths
from streamlet.broker.protocols import load


def test_relative_paths_resolve_against_the_files_folder(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "users.toml").write_text('[[users]]\nname = "app"\npassword = "p"\n')
    (conf / "broker.toml").write_text(
        '[server]\ndata_dir = "data"\nusers_file = "users.toml"\n'
        '[cluster]\ndirectory_file = "../shared/streams.json"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    cfg = load(Path("../conf/broker.toml"))
    assert cfg.data_dir == conf.resolve() / "data"
    assert [u.name for u in cfg.users] == ["app"]  # read from conf/, not from elsewhere/
    assert cfg.directory_file is not None
    assert os.path.normpath(cfg.directory_file) == str(tmp_path / "shared" / "streams.json")
    # a flag is the command line's: relative to the working directory
    assert load(Path("../conf/broker.toml"), data_dir="d").data_dir == Path("d")


@pytest.mark.parametrize(("doc", "expected"), [
    ({"server": {"data_dir": "/abs"}}, {"server": {"data_dir": "/abs"}}),
    ({"server": {"data_dir": "rel"}}, {"server": {"data_dir": "/base/rel"}}),
    ({"tls": {"certfile": "c.pem", "port": 5551}},
     {"tls": {"certfile": "/base/c.pem", "port": 5551}}),
    ({"cluster": {"member": 1}}, {"cluster": {"member": 1}}),
    ({"server": {"host": "h"}}, {"server": {"host": "h"}}),
])
def test_absolute_paths(doc: dict[str, object], expected: dict[str, object]) -> None:
    assert absolute_paths(doc, Path("/base")) == expected
