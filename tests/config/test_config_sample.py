"""docs/configuration.md's "Every key, annotated" sample: the broker's own loader takes it as
it is written, and it names every key the loader reads (a key added to the loader but not
to the sample fails here)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from streamlet.broker.config.reading import LISTENER_KEYS, SECTION_KEYS, settings_keys
from streamlet.broker.mega.settings import MegaSettings
from streamlet.broker.protocols import PROTOCOLS, load
from streamlet.broker.rsio.settings import RsioSettings
from streamlet.broker.sbp.settings import SbpSettings

PAGE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
HEADING = "## Every key, annotated"


def sample() -> str:
    """The first TOML block after the heading."""
    text = PAGE.read_text()
    found = re.search(r"```toml\n(.*?)```", text[text.index(HEADING):], re.S)
    assert found is not None, f"no TOML block under {HEADING!r} in {PAGE}"
    return found.group(1)


def test_the_sample_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("STREAMLET_ADVERTISED_HOST", "STREAMLET_ADVERTISED_PORT", "STREAMLET_MEMBER"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "streamlet.toml"
    path.write_text(sample())
    cfg = load(path)
    assert {lst.protocol for lst in cfg.listeners} == {"rabbitmq", "mega", "rsio", "sbp"}
    assert cfg.settings_of("mega", MegaSettings) == MegaSettings()
    assert cfg.settings_of("rsio", RsioSettings) == RsioSettings()
    assert cfg.settings_of("sbp", SbpSettings) == SbpSettings()
    assert cfg.data_dir == tmp_path / "data"  # relative to the file's folder
    assert [u.name for u in cfg.users] == ["guest", "app", "operator"]


def _keys() -> list[str]:
    keys = {k for section in SECTION_KEYS.values() for k in section} | set(LISTENER_KEYS)
    for row in PROTOCOLS:
        if row.settings is not None:
            keys |= settings_keys(row.settings)
    return sorted(keys)


@pytest.mark.parametrize("key", _keys())
def test_the_sample_names_every_key(key: str) -> None:
    """As a key, or in a comment (``# users_file = ...``: a file the sample cannot ship)."""
    assert re.search(rf"^[#\s]*{key}\s*=", sample(), re.M), f"{key} is not in {PAGE.name}'s sample"
