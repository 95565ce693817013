"""The chart as `helm package` makes it (Helm's own library, as `make chart` runs it): an archive
of regular files, the symlinked CRDs carried as the repository's crds/*.yaml byte for byte and
kopf's peering CRDs as the chart's own, and rendering, with every value set test_chart.py
tries, the same manifests as the chart's directory."""

from __future__ import annotations

import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python
import pytest

from tests.chart.conftest import CHART, CRDS
from tests.chart.test_chart import VALUE_SETS

helm_python.disable_logging()


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Path(helm_python.package(CHART, destination=tmp_path_factory.mktemp("package")))


@pytest.fixture(scope="module")
def packaged(archive: Path) -> Iterator[helm_python.Chart]:
    """The packaged chart loaded from the archive's bytes, as a repository would serve it."""
    loaded = helm_python.Chart.load_archive(archive.read_bytes())
    yield loaded
    loaded.close()


def expected_crds() -> dict[str, bytes]:
    """The chart's crds/ as its files say (a symlink's target read): name -> bytes."""
    found = {f"crds/{path.name}": path.read_bytes() for path in (CHART / "crds").glob("*.yaml")}
    assert {name for name in found if name.startswith("crds/streamlet.dev_")} == {
        f"crds/{path.name}" for path in CRDS.glob("*.yaml")}
    return found


def test_the_chart_crds_are_the_repositorys() -> None:
    for path in CRDS.glob("*.yaml"):
        assert (CHART / "crds" / path.name).read_bytes() == path.read_bytes()


def test_the_archive_holds_regular_files_only(archive: Path) -> None:
    crds = {}
    with tarfile.open(archive) as tar:
        members = tar.getmembers()
        assert members and all(m.isfile() for m in members)
        for member in members:
            if member.name.startswith("streamlet/crds/"):
                data = tar.extractfile(member)
                assert data is not None
                crds[member.name.removeprefix("streamlet/")] = data.read()
    assert crds == expected_crds()


def test_the_packaged_chart_installs_the_same_crds(packaged: helm_python.Chart,
                                                   chart: helm_python.Chart) -> None:
    carried = {crd["name"]: crd["data"].encode() for crd in packaged.crds}
    assert carried == expected_crds()
    assert carried == {crd["name"]: crd["data"].encode() for crd in chart.crds}


def test_the_packaged_chart_is_the_directorys(packaged: helm_python.Chart,
                                              chart: helm_python.Chart) -> None:
    assert packaged.metadata == chart.metadata
    assert packaged.values == chart.values
    assert packaged.schema == chart.schema
    assert packaged.templates == chart.templates


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_the_packaged_chart_renders_the_same(packaged: helm_python.Chart,
                                             chart: helm_python.Chart,
                                             values: dict[str, Any]) -> None:
    options: dict[str, Any] = {"name": "streamlet", "namespace": "streamlet-system",
                               "is_install": True}
    rendered = packaged.render(values, **options)
    assert rendered and rendered == chart.render(values, **options)


def test_a_bad_value_is_refused_by_the_packaged_schema(packaged: helm_python.Chart) -> None:
    with pytest.raises(helm_python.HelmError):
        packaged.render({"unknownKey": True})
