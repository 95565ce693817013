"""The checked-in FlatBuffers code (streamlet/sbp/fbs) is what flatc makes of the schema beside
it: regenerated into a temporary folder and compared file by file. Needs flatc (Debian's
flatbuffers-compiler, which .ci/install-system-deps installs): under CI=true a missing flatc
fails the test; elsewhere it is skipped, saying so."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import streamlet.sbp

PACKAGE = Path(streamlet.sbp.__file__).parent
SCHEMA = PACKAGE / "schema" / "sbp.fbs"
GENERATED = PACKAGE / "fbs"


def flatc() -> str:
    found = shutil.which("flatc")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("flatc is missing under CI: .ci/install-system-deps installs "
                        "flatbuffers-compiler")
        pytest.skip("flatc is not installed (apt-get install flatbuffers-compiler): the "
                    "generated SBP code is not compared with its schema")
    return found


@pytest.mark.process
def test_generated_code_matches_the_schema(tmp_path: Path) -> None:
    subprocess.run([flatc(), "--python", "--gen-object-api", "-o", str(tmp_path), str(SCHEMA)],
                   check=True, capture_output=True)
    fresh = tmp_path / "streamlet" / "sbp" / "fbs"
    made = {p.name: p.read_text() for p in fresh.glob("*.py")}
    kept = {p.name: p.read_text() for p in GENERATED.glob("*.py")}
    assert sorted(made) == sorted(kept), "files differ: regenerate (docs/protocols/sbp.md)"
    stale = [name for name in made if made[name] != kept[name]]
    assert not stale, f"regenerate these from schema/sbp.fbs: {stale}"


def test_every_table_of_the_schema_is_generated() -> None:
    tables = {line.split()[1] for line in SCHEMA.read_text().splitlines()
              if line.startswith(("table ", "enum "))}
    assert tables <= {p.stem for p in GENERATED.glob("*.py")}
    assert len(tables) > 50
